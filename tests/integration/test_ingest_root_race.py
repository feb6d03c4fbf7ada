"""The ingest root holds even when a symbolic link is swapped between the check and the read.

Real files, real links, real Chroma on disk (hash embedder). The one thing arranged is the
moment: the path resolver is wrapped so that the link is swapped right after it returns, which
is the gap a checker that resolves a path and then opens it again leaves open.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

import crag.documents.confined
import crag.documents.loaders
import crag.vectorstore.ingest
from crag.documents.confined import read_inside
from crag.documents.document import LoaderError
from crag.vectorstore.ingest import IngestOptions, ingest_paths
from crag.vectorstore.store import open_store
from tests.hash_embeddings import HashEmbeddings

pytestmark = pytest.mark.integration

SECRET = "the outside secret: the vault code is 4-8-15-16-23-42"


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    """``root/notes.txt``, ``outside/secret.txt`` and ``root/link.txt`` -> ``notes.txt``."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "notes.txt").write_text("inside notes: the meeting is on Tuesday")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    (root / "link.txt").symlink_to(root / "notes.txt")
    return root, root / "link.txt", outside / "secret.txt"


def swap_after_resolving(
    monkeypatch: pytest.MonkeyPatch, link: Path, target: Path
) -> Callable[[], int]:
    """Make the link point at ``target`` just after the first time it is resolved."""
    resolve = crag.documents.loaders.real_path
    swaps = 0

    def resolve_then_swap(path: Path) -> Path:
        nonlocal swaps
        resolved = resolve(path)
        if Path(path) == link and swaps == 0:
            swaps += 1
            link.unlink()
            link.symlink_to(target)
        return resolved

    for module in (crag.vectorstore.ingest, crag.documents.confined):
        monkeypatch.setattr(module, "real_path", resolve_then_swap, raising=False)
    return lambda: swaps


def test_a_link_swapped_after_the_check_is_refused_not_read(
    tree: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, link, secret = tree
    swaps = swap_after_resolving(monkeypatch, link, secret)
    store = open_store(tmp_path / "store", "race", HashEmbeddings(), create=True)
    report = ingest_paths([link], store, IngestOptions(root=root, progress=False))
    assert swaps() == 1  # the swap happened, between the check and the open
    stored = store.get(include=["documents"])["documents"] or []
    assert not any("vault code" in text for text in stored), "the outside file was read"
    assert [path for path, _ in report.failed] == [str(link)]
    assert "leads outside" in report.failed[0][1]


def test_a_link_swapped_back_after_the_open_is_refused(
    tree: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Swapped out after the check, opened outside, swapped back in before the opened file
    is checked: the path names the inside file again, but that is not the file opened."""
    root, link, secret = tree
    swaps = swap_after_resolving(monkeypatch, link, secret)
    open_file = crag.documents.confined._open

    def open_then_swap_back(path: Path) -> int:
        fd = open_file(path)
        link.unlink()
        link.symlink_to(root / "notes.txt")
        return fd

    monkeypatch.setattr(crag.documents.confined, "_open", open_then_swap_back)
    with pytest.raises(LoaderError, match="leads outside"):
        read_inside(link, root.resolve())
    assert swaps() == 1


def test_files_inside_the_root_are_read_and_others_refused_with_one_line(
    tree: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    root, link, secret = tree
    assert read_inside(link, root.resolve()).startswith(b"inside notes")
    with pytest.raises(LoaderError, match="leads outside"):
        read_inside(secret, root.resolve())
    fifo = root / "pipe.txt"
    os.mkfifo(fifo)
    with pytest.raises(LoaderError, match="not a regular file"):
        read_inside(fifo, root.resolve())  # refused without blocking on the FIFO
    with pytest.raises(LoaderError, match="does not exist"):
        read_inside(root / "missing.txt", root.resolve())
