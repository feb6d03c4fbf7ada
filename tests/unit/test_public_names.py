"""A served run's names for the server's files (crag.core.public_names): no server folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from crag.core.public_names import (
    ServedFolders,
    member_source,
    public_name,
    public_text,
    server_path,
)


@pytest.fixture
def folders(tmp_path: Path) -> ServedFolders:
    root = tmp_path / "root"
    (root / "uploads").mkdir(parents=True)
    return ServedFolders.of("", str(root), str(tmp_path / "store" / "chroma"))


def test_each_folder_has_its_scheme_the_upload_folder_first(
    folders: ServedFolders, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    assert public_name(str(root / "uploads/ab/x.md"), folders) == "upload:ab/x.md"
    assert public_name(str(root / "docs/a.pdf"), folders) == "shared:docs/a.pdf"
    assert public_name(str(root / "rows.jsonl#line3"), folders) == "shared:rows.jsonl#line3"
    assert public_name("/srv/elsewhere/handbook.pdf", folders) == "handbook.pdf"
    assert public_name("/srv/elsewhere/rows.jsonl#line12", folders) == "rows.jsonl#line12"


@pytest.mark.parametrize("source", ["wikipedia:Mona Lisa", "inline:3f2a", "https://x.org/a"])
def test_a_source_that_is_not_a_path_is_its_own_name(folders: ServedFolders, source: str) -> None:
    assert public_name(source, folders) == source


def test_a_name_reads_back_into_its_path_and_never_outside_its_folder(
    folders: ServedFolders, tmp_path: Path
) -> None:
    root = (tmp_path / "root").resolve()
    for path in (root / "uploads/ab/x.md", root / "docs/a.pdf"):
        assert server_path(public_name(str(path), folders), folders) == str(path)
    assert server_path("shared:rows.jsonl#line3", folders) == f"{root}/rows.jsonl#line3"
    for name in ("upload:../../etc/passwd", "shared:/etc/passwd", "upload:", "shared:a\0b"):
        assert server_path(name, folders) is None, name
    assert server_path("/etc/passwd", folders) is None
    assert server_path("wikipedia:Mona Lisa", folders) is None


def test_without_an_ingest_root_only_uploads_are_named(tmp_path: Path) -> None:
    folders = ServedFolders.of(str(tmp_path / "up"), "", str(tmp_path / "store"))
    assert public_name(str(tmp_path / "up/members/ann/ab/x.md"), folders) == (
        "upload:members/ann/ab/x.md"
    )
    assert server_path("shared:docs/a.pdf", folders) is None


def test_a_members_inline_documents_show_their_own_names_to_them(folders: ServedFolders) -> None:
    stored = member_source("notes:plan", "ann")
    assert stored == "member:ann/notes:plan"
    assert public_name(stored, folders, "ann") == "notes:plan"
    assert public_name(stored, folders, "bo") == stored  # never another's (nor found by them)
    assert public_name(stored, folders) == stored  # an admin sees whose it is


def test_a_sentence_names_the_files_not_the_folders(folders: ServedFolders, tmp_path: Path) -> None:
    root = (tmp_path / "root").resolve()
    said = f"cannot read {root}/uploads/ab/x.pdf: damaged; {root}/docs/b.md is empty"
    assert public_text(said, folders) == (
        "cannot read upload:ab/x.pdf: damaged; shared:docs/b.md is empty"
    )
