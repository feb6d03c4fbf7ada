"""Loading PDF, Office, CSV, EPUB, Markdown and HTML files into located sections.

Real files from other projects (tests/data/documents, see LICENSES.md there) and files built
with the format libraries (tests/document_factory.py), with known text in known places.
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from langchain_text_splitters import RecursiveCharacterTextSplitter

from crag.documents.document import LoadedDocument, Section
from crag.documents.formats.common import clean_text
from crag.documents.formats.docx import check_main_part, read_docx
from crag.documents.formats.parts import MIN_XML_BYTES, read_bounded, xml_budget
from crag.documents.limits import FileLimits
from crag.documents.loaders import SUPPORTED_EXTENSIONS, LoaderError, iter_paths, load_file
from crag.vectorstore.ingest import split_document, split_text
from tests.document_factory import (
    SAMPLES,
    write_csv,
    write_docx,
    write_epub,
    write_pdf,
    write_pptx,
    write_xlsx,
)
from tests.hostile_documents import write_empty_paragraphs_docx, write_many_paragraphs_docx

ZEPHYR = "The Zephyr turbine produces 4.2 megawatts at a wind speed of twelve metres per second."


def load_one(path: Path) -> LoadedDocument:
    docs = load_file(path)
    assert len(docs) == 1
    return docs[0]


def locations(doc: LoadedDocument) -> list[str | None]:
    return [section.location for section in doc.sections]


def load_error(path: Path) -> str:
    with pytest.raises(LoaderError) as info:
        load_file(path)
    message = str(info.value)
    assert message.startswith(str(path))  # every message names the file
    return message


# --- PDF ------------------------------------------------------------------------------------


def test_real_pdf_gives_one_section_per_page() -> None:
    doc = load_one(SAMPLES / "lorem.pdf")
    assert [(s.page, s.page_label, s.location) for s in doc.sections] == [
        (1, "1", "p. 1"),
        (2, "2", "p. 2"),
    ]
    assert doc.sections[0].text.startswith("Lorem ipsum dolor sit amet,")
    assert "quis nostrud exercitation" in doc.sections[0].text  # runs of spaces made one
    assert "https://www.wikipedia.org/" in doc.sections[1].text
    assert "Lorem" not in doc.sections[1].text
    assert doc.text == f"{doc.sections[0].text}\n\n{doc.sections[1].text}"


def test_pdf_page_labels_hyphenation_and_pages_without_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pages = [["Preface"], ["Contents"], ["An exam-", "ple of a broken word."], [], [ZEPHYR]]
    path = write_pdf(tmp_path / "report.pdf", pages, roman_front=2)
    with caplog.at_level(logging.WARNING):
        doc = load_one(path)
    assert [(s.page, s.page_label) for s in doc.sections] == [
        (1, "i"),
        (2, "ii"),
        (3, "1"),
        (5, "3"),  # page 4 has no text layer: left out
    ]
    assert locations(doc) == ["p. i", "p. ii", "p. 1", "p. 3"]
    assert doc.sections[2].text == "An example of a broken word."
    assert doc.sections[3].text == ZEPHYR
    assert "1 of 5 pages have no text layer" in caplog.text


def test_long_pdf_logs_progress(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_pdf(tmp_path / "long.pdf", [[f"Page {n} text."] for n in range(1, 121)])
    with caplog.at_level(logging.INFO, logger="crag.documents.formats.pdf"):
        doc = load_one(path)
    assert len(doc.sections) == 120 and doc.sections[-1].text == "Page 120 text."
    progress = [r.getMessage() for r in caplog.records if "pages" in r.getMessage()]
    assert progress == [f"{path}: read 50 of 120 pages", f"{path}: read 100 of 120 pages"]


def test_encrypted_pdf_asks_for_a_decrypted_copy(tmp_path: Path) -> None:
    expected = "encrypted PDF; it needs a password: save a decrypted copy"
    assert load_error(SAMPLES / "encrypted.pdf") == f"{SAMPLES / 'encrypted.pdf'}: {expected}"
    locked = write_pdf(tmp_path / "locked.pdf", [["Secret plans."]], user_password="pw")
    assert expected in load_error(locked)
    # Encrypted with an empty user password (permissions only): it opens.
    restricted = write_pdf(tmp_path / "restricted.pdf", [["Open plans."]], user_password="")
    assert load_one(restricted).sections[0].text == "Open plans."


def test_scanned_pdf_has_no_text_layer() -> None:
    path = SAMPLES / "scanned.pdf"
    assert load_error(path) == f"{path}: no text layer (a scanned PDF?): OCR is not supported"


def test_corrupt_truncated_and_misnamed_pdfs(tmp_path: Path) -> None:
    assert "not a readable PDF (startxref not found)" in load_error(SAMPLES / "invalid.pdf")
    truncated = tmp_path / "truncated.pdf"
    truncated.write_bytes((SAMPLES / "lorem.pdf").read_bytes()[:5000])
    assert "not a readable PDF" in load_error(truncated)
    misnamed = tmp_path / "slides.pdf"
    misnamed.write_bytes((SAMPLES / "python-pptx-test.pptx").read_bytes())
    message = load_error(misnamed)
    assert "not a readable PDF" in message and "it looks like a ZIP archive" in message


def test_clean_text() -> None:
    assert clean_text("ﬁnal eﬀort") == "final effort"  # ligatures folded (NFKC)
    assert clean_text("an exam-\nple") == "an example"
    assert clean_text("well-\nKnown") == "well-\nKnown"  # a capital: not a broken word
    assert clean_text("a  b\t c\n\n\n\nd\x00") == "a b c\n\nd"


# --- Word -----------------------------------------------------------------------------------


def test_docx_heading_paths_and_captioned_table(tmp_path: Path) -> None:
    doc = load_one(write_docx(tmp_path / "report.docx"))
    assert [s.headings for s in doc.sections] == [
        "Corrective retrieval",
        "Method",
        "Method > Evaluator",
        "Results",
    ]
    evaluator = doc.sections[2]
    assert evaluator.location == "Method > Evaluator"
    assert evaluator.text == (
        "Evaluator\n\n"
        "The evaluator is a fine-tuned T5-large model that scores passages.\n\n"
        "Table 1: Accuracy by dataset\n"  # the caption, on the line above its table
        "Dataset | Accuracy | Notes\n"
        "PopQA | 59.3\n"
        "Bio | 74.1"
    )


def test_real_docx_files() -> None:
    doc = load_one(SAMPLES / "python-docx-test.docx")
    assert [(s.headings, s.text) for s in doc.sections] == [
        ("python-docx was here!", "python-docx was here!\n\npython-docx was here too!")
    ]
    tables = load_one(SAMPLES / "paras-and-tables.docx")
    assert tables.sections == ()  # no headings: one piece, no location
    assert tables.text.startswith("Lorem ipsum dolor sit amet, consectetur adipiscing elit.")
    assert "Donec semper facilisis metus finibus malesuada." in tables.text


def test_password_protected_office_files(tmp_path: Path) -> None:
    expected = "password-protected (encrypted) Office file; save an unencrypted copy"
    path = SAMPLES / "encrypted.docx"
    assert load_error(path) == f"{path}: {expected}"
    for name in ("sheet.xlsx", "deck.pptx"):  # the same container, whatever the Office type
        renamed = tmp_path / name
        renamed.write_bytes(path.read_bytes())
        assert expected in load_error(renamed)


def test_damaged_and_misnamed_office_files(tmp_path: Path) -> None:
    pdf_named_docx = tmp_path / "paper.docx"
    pdf_named_docx.write_bytes((SAMPLES / "lorem.pdf").read_bytes())
    message = load_error(pdf_named_docx)
    assert "not a valid .docx file" in message and "it looks like a PDF" in message
    truncated = tmp_path / "cut.pptx"
    truncated.write_bytes((SAMPLES / "python-pptx-test.pptx").read_bytes()[:4000])
    assert "not a valid .pptx file" in load_error(truncated)
    not_a_workbook = tmp_path / "book.xlsx"
    with zipfile.ZipFile(not_a_workbook, "w") as archive:
        archive.writestr("readme.txt", "no workbook here")
    assert "not a valid .xlsx file" in load_error(not_a_workbook)


# --- PowerPoint -----------------------------------------------------------------------------


def test_pptx_slides_with_notes_and_tables(tmp_path: Path) -> None:
    doc = load_one(write_pptx(tmp_path / "deck.pptx"))
    assert [(s.slide, s.location) for s in doc.sections] == [
        (1, "slide 1"),
        (2, "slide 2"),
        (3, "slide 3"),
    ]
    assert doc.sections[1].text == (
        "Hiring plan\n\nWe will hire twelve engineers in Lisbon.\n\n"
        "Notes: Mention the relocation package."
    )
    assert doc.sections[2].text == "Budget\n\nItem | Cost\nCloud | 40k"


def test_real_pptx_files() -> None:
    deck = load_one(SAMPLES / "python-pptx-test.pptx")
    assert [(s.slide, s.text) for s in deck.sections] == [
        (1, "Presentation Title Text\n\nSubtitle Text")
    ]
    notes = load_one(SAMPLES / "notes.pptx")  # slide 1: notes only; slide 2: nothing
    assert [(s.slide, s.text) for s in notes.sections] == [(1, "Notes: Notes")]


# --- Spreadsheets ---------------------------------------------------------------------------


def test_xlsx_sheets_and_row_groups(tmp_path: Path) -> None:
    doc = load_one(write_xlsx(tmp_path / "book.xlsx", rows=60))
    sales = [s for s in doc.sections if s.sheet == "Sales"]
    assert len(sales) > 1  # 60 rows are more than one group
    assert sales[0].row == 2 and sales[-1].rows is not None and sales[-1].rows.endswith("-61")
    for previous, following in itertools.pairwise(sales):
        assert previous.rows is not None
        assert int(previous.rows.split("-")[1]) + 1 == following.row  # no row left out
    for section in sales:  # each group starts with the header row
        assert section.text.startswith("Region | Quarter | Revenue\n")
    assert sales[0].text.split("\n")[1] == "Region 0 | Q1 | 1000"
    assert sales[0].location == f"sheet Sales, rows {sales[0].rows}"
    staff = [s for s in doc.sections if s.sheet == "Staff"]
    assert [(s.text, s.location) for s in staff] == [
        ("Name | Role\nAda Lovelace | Analyst\nGrace Hopper | Admiral", "sheet Staff, rows 2-4")
    ]


def test_csv_rows(tmp_path: Path) -> None:
    doc = load_one(write_csv(tmp_path / "cities.csv"))
    assert [(s.row, s.rows, s.location) for s in doc.sections] == [(2, "2-5", "rows 2-5")]
    assert doc.sections[0].text == (
        "city | country | population\n"
        "Lisbon | Portugal | 545000\n"
        "Washington, D.C. | United States | 690000\n"  # a quoted comma stays in its field
        "Porto | Portugal | 232000"
    )
    one_row = tmp_path / "one.csv"
    one_row.write_text("name;value\nwidth;12\n")  # a semicolon-separated file
    assert [(s.text, s.location) for s in load_one(one_row).sections] == [
        ("name | value\nwidth | 12", "row 2")
    ]


# --- EPUB, Markdown, HTML, text ---------------------------------------------------------------


def test_epub_reading_order_and_headings(tmp_path: Path) -> None:
    doc = load_one(write_epub(tmp_path / "book.epub"))
    assert doc.title == "The Lighthouse Keeper"
    assert [(s.location, s.text) for s in doc.sections] == [
        ("part 1", "A novel in two parts."),
        ("Chapter 1", "Chapter 1\n\nThe keeper lit the lamp at dusk."),
        ("Chapter 1 > The storm", "The storm\n\nWaves rose over the rocks all night."),
    ]
    broken = tmp_path / "broken.epub"
    with zipfile.ZipFile(broken, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip")
    assert "not a valid .epub file" in load_error(broken)


def test_markdown_heading_paths(tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    path.write_text(
        "Intro line.\n\n# Method\nThree parts.\n\n## Evaluator\nScores passages.\n\n"
        "```python\n# not a heading\n```\n\n# Results\nBetter.\n"
    )
    doc = load_one(path)
    assert [(s.headings, s.text) for s in doc.sections] == [
        (None, "Intro line."),
        ("Method", "# Method\n\nThree parts."),
        (
            "Method > Evaluator",
            "## Evaluator\n\nScores passages.\n\n```python\n# not a heading\n```",
        ),
        ("Results", "# Results\n\nBetter."),
    ]
    assert doc.text == path.read_text().strip()  # the document text is the file's


def test_html_heading_paths(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    path.write_text(
        "<html><head><title>Guide</title></head><body><p>Welcome.</p>"
        "<h1>Install</h1><p>Run the installer.</p><h2>On Linux</h2><p>Use apt.</p>"
        "<h2></h2><p>2024</p></body></html>"
    )
    doc = load_one(path)
    assert doc.title == "Guide"
    assert (
        doc.text
        == "Guide\n\nWelcome.\n\nInstall\n\nRun the installer.\n\nOn Linux\n\nUse apt.\n\n2024"
    )
    assert [(s.location, s.text) for s in doc.sections] == [
        (None, "Guide\n\nWelcome."),
        ("Install", "Install\n\nRun the installer."),
        ("Install > On Linux", "On Linux\n\nUse apt.\n\n2024"),
    ]


def test_text_without_headings_has_no_sections(tmp_path: Path) -> None:
    for name, content in (("plain.txt", "# Not markdown\nJust text."), ("flat.md", "No heading.")):
        path = tmp_path / name
        path.write_text(content)
        doc = load_one(path)
        assert doc.sections == () and doc.text == content
        assert doc.parts() == (Section(content),)


def test_new_extensions_are_found_in_folders(tmp_path: Path) -> None:
    for ext in (".pdf", ".docx", ".pptx", ".xlsx", ".csv", ".epub"):
        assert ext in SUPPORTED_EXTENSIONS
        (tmp_path / f"file{ext}").write_bytes(b"")
    (tmp_path / "old.doc").write_bytes(b"")
    found = [p.name for p in iter_paths([tmp_path])]
    assert found == ["file.csv", "file.docx", "file.epub", "file.pdf", "file.pptx", "file.xlsx"]


# --- chunking -------------------------------------------------------------------------------


def test_chunks_never_span_two_pages_and_carry_their_location(tmp_path: Path) -> None:
    long_page = [f"Sentence {n} of the long page about wind turbines." for n in range(20)]
    path = write_pdf(tmp_path / "report.pdf", [["Short first page."], long_page], roman_front=1)
    doc = load_one(path)
    splitter = RecursiveCharacterTextSplitter(chunk_size=200, chunk_overlap=0)
    chunks, where = split_document(doc, splitter)
    assert chunks[0] == "Short first page."
    assert where[0] == {"page": 1, "page_label": "i", "location": "p. i"}
    assert len(chunks) > 3
    for chunk, fields in zip(chunks[1:], where[1:], strict=True):
        assert "Short first page" not in chunk and "long page" in chunk
        assert fields == {"page": 2, "page_label": "1", "location": "p. 1"}


def test_plain_documents_split_as_before() -> None:
    text = "One.\n\nTwo.\n\nThree and more.\n\n  \n\nFour."
    doc = LoadedDocument(source="mem:a", text=text, sha256="x")
    splitter = RecursiveCharacterTextSplitter(chunk_size=10, chunk_overlap=0)
    chunks, where = split_document(doc, splitter)
    assert chunks == split_text(text, chunk_size=10, chunk_overlap=0)
    assert len(chunks) >= 3 and where == [{}] * len(chunks)


# --- Word decompression bombs ---------------------------------------------------------------

DEFAULT_LIMITS = FileLimits(pages=5_000, paragraphs=200_000, chars=20_000_000)
PARAGRAPHS_REFUSED = (
    "refused: more than 200,000 paragraphs, the most read from one file "
    "(setting max_file_paragraphs, environment variable CRAG_MAX_FILE_PARAGRAPHS)"
)
_MEASURE = textwrap.dedent(
    """
    import json, resource, sys, time
    from pathlib import Path
    from crag.documents.limits import FileLimits
    from crag.documents.loaders import LoaderError, load_file

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    try:
        load_file(Path(sys.argv[1]), FileLimits(5_000, 200_000, 20_000_000))
        error = None
    except LoaderError as exc:
        error = str(exc)
    seconds = time.monotonic() - started
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"error": error, "seconds": seconds, "grown_mb": grown / 1024}))
    """
)


def test_docx_of_empty_paragraphs_is_refused_before_python_docx_parses_it(
    tmp_path: Path,
) -> None:
    # 35 million <w:p/>: 210 MB of XML in a 300 KB file. Parsed whole, it took 13 s and 4.5 GB;
    # the streaming count stops after 200,001 paragraphs. Measured in a child process, whose
    # peak memory (ru_maxrss, KiB on Linux) is this load's alone.
    bomb = write_empty_paragraphs_docx(tmp_path / "bomb.docx", 35_000_000)
    assert bomb.stat().st_size < 1_000_000
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(bomb)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    measured = json.loads(done.stdout)
    assert measured["error"] == f"{bomb}: {PARAGRAPHS_REFUSED}"
    assert measured["seconds"] < 5, measured
    assert measured["grown_mb"] < 500, measured


def test_docx_main_part_past_the_xml_budget_is_refused_unread(tmp_path: Path) -> None:
    assert xml_budget(FileLimits(1, 1, 1_000)) == MIN_XML_BYTES == 64 << 20
    assert xml_budget(DEFAULT_LIMITS) == 320_000_000  # 16 bytes a character
    path = write_empty_paragraphs_docx(tmp_path / "big.docx", 12_000_000)  # 72 MB of XML
    with zipfile.ZipFile(path) as archive:
        size = archive.getinfo("word/document.xml").file_size
    with pytest.raises(LoaderError) as info:
        read_docx(path.read_bytes(), path, FileLimits(5_000, 10**9, 1_000))
    assert str(info.value) == (
        f"{path}: refused: its part word/document.xml would unpack to {size:,} bytes, more "
        "than the 67,108,864 bytes of XML read from one file for the characters it may hold "
        "(setting max_file_chars, environment variable CRAG_MAX_FILE_CHARS)"
    )


def test_docx_xml_is_read_no_further_than_the_budget_whatever_its_header_says() -> None:
    chunks = read_bounded(io.BytesIO(b"<w:p/>" * 100), "word/document.xml", Path("a.docx"), 500)
    with pytest.raises(LoaderError, match=r"^a\.docx: refused: its part word/document\.xml "):
        b"".join(chunks)
    assert b"".join(read_bounded(io.BytesIO(b"x" * 500), "x", Path("a.docx"), 500)) == b"x" * 500


def test_docx_paragraphs_are_counted_in_the_part_the_relationships_name(tmp_path: Path) -> None:
    path = write_many_paragraphs_docx(tmp_path / "renamed.docx", 300)
    renamed = tmp_path / "main.docx"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(renamed, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "_rels/.rels":
                data = data.replace(b'Target="word/document.xml"', b'Target="/word/main.xml"')
            name = "word/main.xml" if item.filename == "word/document.xml" else item.filename
            target.writestr(name, data)
    few = FileLimits(5_000, 100, 20_000_000)
    with pytest.raises(LoaderError) as info:
        check_main_part(io.BytesIO(renamed.read_bytes()), renamed, few)
    assert str(info.value).startswith(f"{renamed}: refused: more than 100 paragraphs, ")
    check_main_part(io.BytesIO(renamed.read_bytes()), renamed, DEFAULT_LIMITS)
    check_main_part(io.BytesIO((SAMPLES / "paras-and-tables.docx").read_bytes()), renamed, few)
