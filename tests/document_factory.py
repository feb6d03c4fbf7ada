"""Documents built with the format libraries themselves, with known text in known places."""

from __future__ import annotations

import csv
import zipfile
from collections.abc import Sequence
from pathlib import Path

import docx
import openpyxl
import pptx
from pypdf import PdfWriter
from pypdf.constants import PageLabelStyle
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

SAMPLES = Path(__file__).parent / "data" / "documents"

ZEPHYR = "The Zephyr turbine produces 4.2 megawatts at a wind speed of twelve metres per second."
QUESTION = "How many megawatts does the Zephyr turbine produce?"
"""A question only the report PDF (:data:`PAGES`) answers."""
PAGES = [
    ["Wind energy report"],
    ["Contents: turbines, maintenance."],
    [ZEPHYR],
    ["Maintenance of the gearbox is due every six months."],
]
"""The report PDF's pages (``write_pdf(..., roman_front=2)``): two front pages numbered i and ii,
so the third page, which answers :data:`QUESTION`, is labelled 1."""
"""Real sample documents from other projects (see LICENSES.md there)."""


def _pdf_string(text: str) -> str:
    return "(" + text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


def write_pdf(
    path: Path,
    pages: Sequence[Sequence[str]],
    *,
    roman_front: int = 0,
    user_password: str | None = None,
) -> Path:
    """A PDF with one page per entry of ``pages``, each line of text on its own line.

    An empty page has no text layer (as a scan). The first ``roman_front`` pages are labelled
    i, ii, ... and the rest 1, 2, ...; with ``user_password`` the file is encrypted (RC4, which
    pypdf reads without extra packages).
    """
    writer = PdfWriter()
    font = writer._add_object(
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
    )
    for lines in pages:
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
        shown = " ".join(f"{_pdf_string(line)} Tj T*" for line in lines)
        stream = DecodedStreamObject()
        stream.set_data(f"BT /F1 11 Tf 14 TL 72 720 Td {shown} ET".encode("latin-1"))
        page[NameObject("/Contents")] = writer._add_object(stream)
    if roman_front:
        writer.set_page_label(0, roman_front - 1, style=PageLabelStyle.LOWERCASE_ROMAN)
        writer.set_page_label(roman_front, len(pages) - 1, style=PageLabelStyle.DECIMAL, start=1)
    if user_password is not None:
        writer.encrypt(user_password, "owner-secret", algorithm="RC4-128")
    with path.open("wb") as out:
        writer.write(out)
    return path


def write_docx(path: Path) -> Path:
    """A Word file: a title, nested headings, a table with a caption before it."""
    document = docx.Document()
    document.add_paragraph("Corrective retrieval", style="Title")
    document.add_paragraph("This report describes a retrieval pipeline.")
    document.add_heading("Method", level=1)
    document.add_paragraph("The method has three parts.")
    document.add_heading("Evaluator", level=2)
    document.add_paragraph("The evaluator is a fine-tuned T5-large model that scores passages.")
    document.add_paragraph("Table 1: Accuracy by dataset", style="Caption")
    table = document.add_table(rows=3, cols=3)
    rows = [("Dataset", "Accuracy", "Notes"), ("PopQA", "59.3", ""), ("Bio", "74.1", "")]
    for row, values in zip(table.rows, rows, strict=True):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    document.add_heading("Results", level=1)
    document.add_paragraph("Retrieval quality improved on every dataset.")
    document.save(str(path))
    return path


def write_pptx(path: Path) -> Path:
    """A deck of three slides; the second has speaker notes, the third a table."""
    deck = pptx.Presentation()
    layout = deck.slide_layouts[1]  # title and content
    contents = [
        ("Quarterly review", "Revenue grew in every region."),
        ("Hiring plan", "We will hire twelve engineers in Lisbon."),
        ("Budget", ""),
    ]
    for title, body in contents:
        slide = deck.slides.add_slide(layout)
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    deck.slides[1].notes_slide.notes_text_frame.text = "Mention the relocation package."
    table = deck.slides[2].shapes.add_table(2, 2, 0, 0, 4000000, 1000000).table
    for (row, col), value in {
        (0, 0): "Item",
        (0, 1): "Cost",
        (1, 0): "Cloud",
        (1, 1): "40k",
    }.items():
        table.cell(row, col).text = value
    deck.save(str(path))
    return path


def write_xlsx(path: Path, rows: int = 60) -> Path:
    """A workbook with two sheets: "Sales" (a header and ``rows`` rows) and "Staff"."""
    workbook = openpyxl.Workbook()
    sales = workbook.active
    assert sales is not None
    sales.title = "Sales"
    sales.append(["Region", "Quarter", "Revenue"])
    for number in range(rows):
        sales.append([f"Region {number}", f"Q{number % 4 + 1}", 1000 + number])
    staff = workbook.create_sheet("Staff")
    staff.append(["Name", "Role"])
    staff.append(["Ada Lovelace", "Analyst"])
    staff.append([None, None])
    staff.append(["Grace Hopper", "Admiral"])
    workbook.save(str(path))
    return path


def write_csv(path: Path) -> Path:
    """A CSV file with a header, a quoted field with a comma, and an empty line."""
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["city", "country", "population"])
        writer.writerow(["Lisbon", "Portugal", "545000"])
        writer.writerow(["Washington, D.C.", "United States", "690000"])
        writer.writerow([])
        writer.writerow(["Porto", "Portugal", "232000"])
    return path


_CONTAINER = """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
  <rootfiles>
    <rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>
  </rootfiles>
</container>"""
_PACKAGE = """<?xml version="1.0"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
    <dc:title>The Lighthouse Keeper</dc:title><dc:identifier id="id">x</dc:identifier>
  </metadata>
  <manifest>
    <item id="cover" href="cover.xhtml" media-type="application/xhtml+xml"/>
    <item id="c1" href="text/chapter%201.xhtml" media-type="application/xhtml+xml"/>
    <item id="css" href="style.css" media-type="text/css"/>
  </manifest>
  <spine><itemref idref="cover"/><itemref idref="c1"/></spine>
</package>"""
_COVER = """<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Cover</title></head>
<body><p>A novel in two parts.</p></body></html>"""
_CHAPTER = """<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Chapter 1</title></head>
<body><h1>Chapter 1</h1><p>The keeper lit the lamp at dusk.</p>
<h2>The storm</h2><p>Waves rose over the rocks all night.</p></body></html>"""


def write_epub(path: Path) -> Path:
    """An EPUB with a cover page (no heading) and a chapter with two headings."""
    with zipfile.ZipFile(path, "w") as book:
        book.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        book.writestr("META-INF/container.xml", _CONTAINER)
        book.writestr("OEBPS/content.opf", _PACKAGE)
        book.writestr("OEBPS/cover.xhtml", _COVER)
        book.writestr("OEBPS/text/chapter 1.xhtml", _CHAPTER)
        book.writestr("OEBPS/style.css", "p { margin: 0 }")
    return path
