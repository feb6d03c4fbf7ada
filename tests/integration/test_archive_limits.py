"""Small files that stand for huge ones cost ``crag ingest`` neither gigabytes nor minutes.

Issue 59, item 3: a 15 KB e-book of one page of a million elements, a Word file and a
presentation of 10 MB of empty XML elements, a 1.5 GB sparse ``.pdf``, a Markdown file with two
100,000-character headings. Each is written here, then given to ``crag ingest`` in a child
process (the hash embedder stands in for MiniLM; see :mod:`test_office_budgets`), whose time and
peak memory are its own: the file is refused in one line naming it, quickly, and the harmless
note beside it is stored; the headings are cut in what every chunk stores.
"""

from __future__ import annotations

import os
import sqlite3
import zipfile
from pathlib import Path

import pytest

from tests.document_factory import write_docx, write_epub
from tests.integration.test_office_budgets import (
    _repeated,
    failed_line,
    measured_ingest,
    write_huge_slide_pptx,
)

pytestmark = pytest.mark.integration

OTTERS = "Otters hold hands while they sleep so that they do not drift apart."


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder of documents holding one harmless note besides the hostile file."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "otters.md").write_text(OTTERS, encoding="utf-8")
    return docs


def write_element_bomb_epub(path: Path, elements: int) -> Path:
    """A real e-book whose chapter holds ``elements`` more empty ``<i/>`` elements (4 bytes)."""
    base = write_epub(path.with_name("base.epub"))
    with zipfile.ZipFile(base) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for info in source.infolist():
            data = source.read(info)
            if info.filename != "OEBPS/text/chapter 1.xhtml":
                out.writestr(info, data)
                continue
            head, tail = data.decode().split("</body>", 1)
            _repeated(out, info.filename, head + "<p>", "<i/>", elements, "</p></body>" + tail)
    base.unlink()
    return path


def write_empty_runs_docx(path: Path, runs: int) -> Path:
    """A real Word file (python-docx's) whose first paragraph gets ``runs`` empty ``<w:r/>``."""
    base = write_docx(path.with_name("base.docx"))
    with zipfile.ZipFile(base) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for info in source.infolist():
            data = source.read(info)
            if info.filename != "word/document.xml":
                out.writestr(info.filename, data)
                continue
            head, tail = data.decode().split("</w:p>", 1)
            _repeated(out, info.filename, head, "<w:r/>", runs, "</w:p>" + tail)
    base.unlink()
    return path


def test_an_epub_page_of_a_million_elements_is_refused_before_it_is_parsed(
    tmp_path: Path, folder: Path
) -> None:
    bomb = write_element_bomb_epub(folder / "book.epub", 1_500_000)
    assert bomb.stat().st_size < 100_000

    measured = measured_ingest(tmp_path, folder)
    assert failed_line(measured["stderr"], bomb) == (
        f"{bomb}: refused: its XML parts, up to its part OEBPS/text/chapter 1.xhtml, hold more "
        "than the 100,000 XML elements read from one page of an e-book"
    )
    assert measured["stdout"].startswith("1 added, "), measured["stdout"]
    assert measured["cpu_seconds"] < 20, measured
    assert measured["grown_mb"] < 150, measured


def test_an_epub_page_past_its_part_budget_is_refused_unread(tmp_path: Path, folder: Path) -> None:
    bomb = write_element_bomb_epub(folder / "big.epub", 3_000_000)
    with zipfile.ZipFile(bomb) as archive:
        size = archive.getinfo("OEBPS/text/chapter 1.xhtml").file_size

    measured = measured_ingest(tmp_path, folder)
    assert failed_line(measured["stderr"], bomb) == (
        f"{bomb}: refused: its part OEBPS/text/chapter 1.xhtml would unpack to {size:,} bytes, "
        "more than the 8,388,608 bytes of XML read from one part of an e-book (a page, its "
        "package document)"
    )
    assert measured["cpu_seconds"] < 20, measured
    assert measured["grown_mb"] < 150, measured


def test_a_word_file_of_two_million_empty_runs_is_refused_before_python_docx_parses_it(
    tmp_path: Path, folder: Path
) -> None:
    bomb = write_empty_runs_docx(folder / "runs.docx", 2_000_000)
    assert bomb.stat().st_size < 200_000

    measured = measured_ingest(tmp_path, folder)
    assert failed_line(measured["stderr"], bomb) == (
        f"{bomb}: refused: its XML parts, up to its part word/document.xml, hold more than the "
        "1,000,000 XML elements read from one file for the paragraphs it may hold (setting "
        "max_file_paragraphs, environment variable CRAG_MAX_FILE_PARAGRAPHS)"
    )
    assert measured["stdout"].startswith("1 added, "), measured["stdout"]
    assert measured["cpu_seconds"] < 20, measured
    assert measured["grown_mb"] < 150, measured


def test_a_slide_of_1_3_million_empty_paragraphs_is_refused_before_python_pptx_parses_it(
    tmp_path: Path, folder: Path
) -> None:
    """7.8 MB of ``<a:p/>``: within the 8 MiB a slide may unpack to, past its elements."""
    bomb = write_huge_slide_pptx(folder / "slides.pptx", 1_300_000)
    with zipfile.ZipFile(bomb) as archive:
        assert archive.getinfo("ppt/slides/slide1.xml").file_size < 8 << 20

    measured = measured_ingest(tmp_path, folder)
    assert failed_line(measured["stderr"], bomb) == (
        f"{bomb}: refused: its XML parts, up to its part ppt/slides/slide1.xml, hold more than "
        "the 1,000,000 XML elements read from one file for the paragraphs it may hold (setting "
        "max_file_paragraphs, environment variable CRAG_MAX_FILE_PARAGRAPHS)"
    )
    assert measured["stdout"].startswith("1 added, "), measured["stdout"]
    assert measured["cpu_seconds"] < 20, measured
    assert measured["grown_mb"] < 150, measured


def test_a_sparse_pdf_of_1_5_gb_is_refused_unread(tmp_path: Path, folder: Path) -> None:
    huge = folder / "huge.pdf"
    with huge.open("wb") as file:
        file.write(b"%PDF-1.4\n")
        file.truncate(1_500_000_000)
    size = huge.stat().st_size

    measured = measured_ingest(tmp_path, folder)
    assert failed_line(measured["stderr"], huge) == (
        f"{huge}: refused: {size:,} bytes, more than the 268,435,456 bytes read from one file "
        "(setting max_file_bytes, environment variable CRAG_MAX_FILE_BYTES)"
    )
    assert measured["stdout"].startswith("1 added, "), measured["stdout"]
    assert measured["cpu_seconds"] < 20, measured
    assert measured["grown_mb"] < 150, measured


def test_max_file_bytes_binds_text_files_too(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAG_MAX_FILE_BYTES", "1000")
    long_note = folder / "long.txt"
    long_note.write_text("otters " * 200, encoding="utf-8")

    measured = measured_ingest(tmp_path, folder)
    assert failed_line(measured["stderr"], long_note) == (
        f"{long_note}: refused: 1,400 bytes, more than the 1,000 bytes read from one file "
        "(setting max_file_bytes, environment variable CRAG_MAX_FILE_BYTES)"
    )
    assert measured["stdout"].startswith("1 added, "), measured["stdout"]


def _stored_metadata_chars(store: Path) -> list[int]:
    """The characters of each chunk's string metadata in the store's SQLite file, largest first."""
    with sqlite3.connect(store / "chroma.sqlite3") as db:
        rows = db.execute(
            "SELECT id, SUM(LENGTH(string_value)) FROM embedding_metadata "
            "WHERE key IN ('headings', 'location') GROUP BY id"
        ).fetchall()
    return sorted((total or 0 for _, total in rows), reverse=True)


def test_huge_headings_are_cut_in_what_every_chunk_stores(tmp_path: Path, folder: Path) -> None:
    """Two 100,000-character headings over 175 KB of text: each chunk stores 400 characters."""
    body = "\n\n".join(f"Otters number {n} sleep holding hands." for n in range(4_500))
    text = f"# {'A' * 100_000}\n\n## {'B' * 100_000}\n\n{body}\n"
    (folder / "headings.md").write_text(text, encoding="utf-8")

    measured = measured_ingest(tmp_path, folder)
    assert measured["stdout"].startswith("2 added, "), measured["stdout"]
    sizes = _stored_metadata_chars(tmp_path / "store")
    assert len(sizes) > 50
    assert sizes[0] <= 400, sizes[:3]
    stored = sum(
        entry.stat().st_size for entry in (tmp_path / "store").rglob("*") if entry.is_file()
    )
    assert stored < 60 * 1024 * 1024, stored
    assert os.path.getsize(tmp_path / "store" / "chroma.sqlite3") > 0
