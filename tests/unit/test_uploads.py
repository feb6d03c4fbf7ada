"""The chat page's uploads (:mod:`crag.app.web.uploads`): where a file goes, and what is refused.

A file lands at ``<upload folder>/<16 hex digits of its SHA-256>/<safe name>``: the same bytes
at the same path, different bytes in another folder. Refusals carry one sentence and an HTTP
status; the size limit is counted while the bytes arrive, and reading stops there. A symbolic
link planted at the file or at its folder is never followed.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from crag.app.web.uploads import (
    MAX_NAME_BYTES,
    MAX_NAME_CHARS,
    StoredUpload,
    UploadRefusedError,
    receive_upload,
    safe_name,
    store_upload,
    upload_folder,
)
from crag.documents.loaders import SUPPORTED_EXTENSIONS
from crag.settings.deployment import DeploymentSettings, deployment_with

PDF = b"%PDF-1.4\n1 0 obj << >> endobj\n%%EOF\n"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path / "uploads"


@pytest.fixture
def settings(folder: Path) -> DeploymentSettings:
    return deployment_with(upload_dir=str(folder), ingest_root="", upload_max_bytes=1000)


def _digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def _refused(
    name: str, body: bytes, settings: DeploymentSettings, status: int
) -> UploadRefusedError:
    with pytest.raises(UploadRefusedError) as info:
        store_upload(name, body, settings)
    assert info.value.status == status, str(info.value)
    return info.value


def _leftovers(folder: Path) -> list[Path]:
    """Everything in the upload folder: temporary files included."""
    return sorted(folder.rglob("*")) if folder.exists() else []


# -- where a file goes --------------------------------------------------------------------------


def test_an_upload_lands_in_the_folder_of_its_hash_under_its_name(
    settings: DeploymentSettings, folder: Path
) -> None:
    stored = store_upload("notes.txt", b"the Mona Lisa\n", settings)
    sha256 = _digest(b"the Mona Lisa\n")
    assert stored == StoredUpload(
        path=folder.resolve() / sha256[:16] / "notes.txt",
        name="notes.txt",
        bytes=14,
        sha256=sha256,
    )
    assert stored.path.read_bytes() == b"the Mona Lisa\n"
    assert stored.path.is_absolute()
    # the path it answers is its name, never the server's folder
    assert stored.as_json(settings) == {
        "path": f"upload:{sha256[:16]}/notes.txt",
        "name": "notes.txt",
        "bytes": 14,
        "sha256": sha256,
    }
    assert _leftovers(folder) == [stored.path.parent, stored.path]  # no temporary file left


def test_the_same_bytes_land_at_the_same_path(settings: DeploymentSettings, folder: Path) -> None:
    first = store_upload("paper.pdf", PDF, settings)
    again = store_upload("paper.pdf", [PDF[:10], PDF[10:]], settings)
    assert again == first
    assert _leftovers(folder) == [first.path.parent, first.path]


def test_different_bytes_land_in_another_folder_and_overwrite_nothing(
    settings: DeploymentSettings,
) -> None:
    first = store_upload("notes.md", b"# one\n", settings)
    second = store_upload("notes.md", b"# two\n", settings)
    assert first.path.name == second.path.name == "notes.md"
    assert first.path.parent != second.path.parent
    assert first.path.read_bytes() == b"# one\n"
    assert second.path.read_bytes() == b"# two\n"


def test_the_upload_folder_follows_the_settings(tmp_path: Path) -> None:
    root = tmp_path / "root"
    plain = deployment_with(upload_dir="", ingest_root="", store_path=str(tmp_path / "s/chroma"))
    assert upload_folder(plain) == tmp_path.resolve() / "s" / "uploads"
    in_root = deployment_with(upload_dir="", ingest_root=str(root))
    assert upload_folder(in_root) == root.resolve() / "uploads"
    chosen = deployment_with(upload_dir=str(root / "mine"), ingest_root=str(root))
    assert upload_folder(chosen) == root.resolve() / "mine"
    default = DeploymentSettings.model_fields
    assert default["upload_dir"].default == ""
    assert default["upload_max_bytes"].default == 50_000_000


def test_an_upload_folder_outside_the_ingest_root_refuses_every_upload(tmp_path: Path) -> None:
    outside = deployment_with(upload_dir=str(tmp_path / "up"), ingest_root=str(tmp_path / "root"))
    with pytest.raises(UploadRefusedError) as info:
        upload_folder(outside)
    assert info.value.status == 500
    assert "upload_dir" in str(info.value) and "ingest_root" in str(info.value)
    refused = _refused("notes.txt", b"text", outside, 500)
    assert str(refused) == str(info.value)
    assert not (tmp_path / "up").exists()


# -- names --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("../../x.pdf", "x.pdf"),
        ("a/b.pdf", "b.pdf"),
        ("a\\b.pdf", "b.pdf"),
        ("C:\\Users\\me\\..\\report.PDF", "report.PDF"),
        ("..hidden.txt", "hidden.txt"),
        (" . spaced name .md ", "spaced name .md"),
        ("cafe\u0301.txt", "caf\u00e9.txt"),  # NFC
        ("a\x00b\x1f\u202ec.txt", "abc.txt"),  # control characters, a right-to-left override
    ],
)
def test_only_a_clean_base_name_is_kept(given: str, stored: str) -> None:
    assert safe_name(given) == stored


@pytest.mark.parametrize("given", ["", "..", "...", "/", "a/", "../..", " . ", "\x00\x01"])
def test_a_name_with_nothing_usable_is_refused(given: str, settings: DeploymentSettings) -> None:
    refused = _refused(given, b"text", settings, 400)
    assert "has nothing a stored file can be named after" in str(refused)


def test_a_long_name_is_cut_keeping_its_extension() -> None:
    assert safe_name("a" * 300 + ".pdf") == "a" * (MAX_NAME_CHARS - 4) + ".pdf"
    wide = safe_name("\U0001f600" * 100 + ".txt")  # 4 bytes each in UTF-8
    assert wide.endswith(".txt") and len(wide.encode("utf-8")) <= MAX_NAME_BYTES


def test_an_extension_the_ingestion_does_not_read_is_refused_naming_those_it_reads(
    settings: DeploymentSettings, folder: Path
) -> None:
    refused = _refused("tool.exe", b"MZ", settings, 415)
    assert str(refused).startswith("tool.exe: the ingestion does not read .exe files")
    assert ", ".join(SUPPORTED_EXTENSIONS) in str(refused)
    assert "files without an extension" in str(_refused("README", b"text", settings, 415))
    assert _leftovers(folder) == []


# -- contents -----------------------------------------------------------------------------------


def test_an_empty_file_is_refused(settings: DeploymentSettings, folder: Path) -> None:
    refused = _refused("empty.txt", b"", settings, 400)
    assert str(refused) == "empty.txt is empty: there is nothing in it to ingest"
    assert [p for p in _leftovers(folder) if p.is_file()] == []


@pytest.mark.parametrize(
    ("name", "body", "words"),
    [
        ("paper.pdf", b"<html>not a pdf</html>", "is not a PDF: its bytes do not start with %PDF-"),
        ("paper.pdf", b"%PD", "is not a PDF"),
        ("slides.pptx", b"%PDF-1.4", "is not a .pptx file: a .pptx file is a ZIP archive"),
        ("book.epub", b"plain text", "is not a .epub file"),
        ("notes.txt", b"caf\xe9 latin-1", "its bytes are not UTF-8"),
        ("notes.md", b"caf\xc3", "they end inside a character"),
        ("rows.csv", b"a,b\n\x00\x00", "holds binary data (a NUL byte)"),
    ],
)
def test_bytes_that_are_not_what_the_extension_says_are_refused(
    name: str, body: bytes, words: str, settings: DeploymentSettings, folder: Path
) -> None:
    refused = _refused(name, body, settings, 415)
    assert str(refused).startswith(f"{name}: ") and words in str(refused)
    assert [p for p in _leftovers(folder) if p.is_file()] == []


def test_office_files_and_utf8_text_pass_the_cheap_checks(settings: DeploymentSettings) -> None:
    assert store_upload("sheet.xlsx", b"PK\x03\x04rest", settings).bytes == 8
    text = "\ufeffcaf\u00e9 \U0001f600\n".encode()
    # a character cut across two chunks is still one character
    assert store_upload("notes.txt", [text[:-3], text[-3:]], settings).bytes == len(text)


# -- the size limit -----------------------------------------------------------------------------


def test_a_file_at_the_limit_is_stored(settings: DeploymentSettings) -> None:
    assert store_upload("big.txt", b"x" * 1000, settings).bytes == 1000


def test_the_size_is_counted_while_reading_and_reading_stops_at_the_limit(
    settings: DeploymentSettings, folder: Path
) -> None:
    read: list[int] = []

    def chunks() -> Iterator[bytes]:
        for number in range(100):
            read.append(number)
            yield b"x" * 400

    refused = _refused("big.txt", chunks(), settings, 413)  # type: ignore[arg-type]
    assert str(refused) == (
        "the file is larger than 1,000 bytes, the most this server accepts "
        "(setting upload_max_bytes)"
    )
    assert read == [0, 1, 2]  # 1,200 bytes: refused at the third chunk, the others never read
    assert [p for p in _leftovers(folder) if p.is_file()] == []


def test_a_stream_is_refused_at_the_limit_or_before_it_is_read(
    settings: DeploymentSettings, folder: Path
) -> None:
    read: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        for number in range(100):
            read.append(number)
            yield b"x" * 300

    with pytest.raises(UploadRefusedError) as info:
        asyncio.run(receive_upload("big.txt", chunks(), settings))
    assert info.value.status == 413 and read == [0, 1, 2, 3]
    read.clear()
    with pytest.raises(UploadRefusedError) as info:
        asyncio.run(receive_upload("big.txt", chunks(), settings, declared_bytes=1001))
    assert info.value.status == 413 and read == []  # Content-Length past the limit: not read
    stored = asyncio.run(receive_upload("ok.txt", _once(b"fine"), settings, declared_bytes=4))
    assert stored.path.read_bytes() == b"fine"
    assert [p for p in _leftovers(folder) if p.is_file()] == [stored.path]


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body


# -- symbolic links -----------------------------------------------------------------------------


def test_a_link_planted_at_the_target_is_replaced_not_followed(
    settings: DeploymentSettings, folder: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me")
    body = b"uploaded text"
    target = folder / _digest(body)[:16] / "notes.txt"
    target.parent.mkdir(parents=True)
    target.symlink_to(victim)
    stored = store_upload("notes.txt", body, settings)
    assert stored.path == target.resolve()
    assert not target.is_symlink() and target.read_bytes() == body
    assert victim.read_bytes() == b"keep me"


def test_a_link_planted_at_the_files_folder_is_refused(
    settings: DeploymentSettings, folder: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    body = b"uploaded text"
    folder.mkdir()
    (folder / _digest(body)[:16]).symlink_to(elsewhere, target_is_directory=True)
    refused = _refused("notes.txt", body, settings, 500)
    assert "holds something other than a folder" in str(refused)
    assert list(elsewhere.iterdir()) == []
    assert [p.name for p in folder.iterdir()] == [_digest(body)[:16]]  # no temporary file left
