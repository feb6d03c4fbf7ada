"""Spreadsheets (.xlsx) and CSV: rows as text ("a | b | c"), grouped, with sheet and rows.

A sheet's rows are grouped into sections of about :data:`GROUP_CHARS` characters, each cited
by its rows ("sheet Sales, rows 2-40"). The sheet's first row (its header, usually) starts every
group, so that each chunk still says what its columns are.

Before openpyxl opens a workbook, its XML parts are measured (:mod:`.parts`): openpyxl keeps the
shared strings, styles and workbook parts whole in memory (about 10 µs and 100 bytes a shared
string), so each may unpack to at most :data:`PART_BYTES`; it streams worksheets, which may be
larger (:data:`SHEET_BYTES`); all of them together at most what ``max_file_chars`` allows.
"""

from __future__ import annotations

import csv
import datetime
import glob
import io
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import openpyxl
from lxml import etree
from openpyxl.packaging.manifest import Manifest
from openpyxl.xml.constants import ARC_CONTENT_TYPES, WORKSHEET_TYPE
from openpyxl.xml.functions import fromstring

from crag.documents.document import LoaderError, Section
from crag.documents.formats.common import office_archive, table_row
from crag.documents.formats.parts import (
    MIN_XML_BYTES,
    Allowance,
    BoundedParts,
    PartBudget,
    chars_phrase,
    check_parts,
    xml_budget,
)
from crag.documents.limits import FileLimits

GROUP_CHARS = 800
"""Characters of rows gathered in one section: below the default chunk size, so that a
section is usually one chunk and cites its rows exactly."""

CSV_DELIMITERS = ",;\t|"
"""Delimiters a CSV file may use (sniffed from its start; a comma when none is clear)."""

PART_BYTES = 16 << 20
"""The most bytes of XML a workbook part other than a worksheet (its shared strings, styles)
may unpack to: a million short shared strings, read in about 10 s into about 100 MB."""

MAX_CELLS = 5_000_000
"""The most cells (values and the empty cells before a row's last one) read from one workbook:
100,000 rows of 50 columns, read in about 10 s. A row is as wide as its last cell."""

SHEET_BYTES = MIN_XML_BYTES
"""The most bytes of XML one worksheet may unpack to (openpyxl streams it row by row)."""


def read_xlsx(data: bytes, path: Path, limits: FileLimits) -> list[Section]:
    """The worksheets' rows, grouped: ``sheet``, ``row`` (first row) and ``rows``.

    Cells hold the values last computed by the spreadsheet program (not formulas).

    Raises:
        LoaderError: The file is password-protected, not a valid .xlsx, has no values, has
            more rows (in all its sheets) than ``limits`` allow paragraphs, or XML parts past
            :func:`workbook_budget`.
    """
    stream = office_archive(data, path, ".xlsx")
    check_parts(stream, path, lambda archive, _: workbook_budget(archive, path, limits))
    counter = _RowCounter(path, limits)
    cells = _CellCounter(path)
    try:
        workbook = openpyxl.load_workbook(stream, read_only=True, data_only=True)
        try:
            sections = [
                section
                for sheet in workbook.worksheets
                for section in group_rows(
                    counter.count(_sheet_rows(sheet, cells)), sheet=sheet.title
                )
            ]
        finally:
            workbook.close()
    except LoaderError:
        raise
    except Exception as exc:  # openpyxl raises many types for damaged files
        raise LoaderError(f"{path}: not a valid .xlsx file ({type(exc).__name__}: {exc})") from exc
    if not sections:
        raise LoaderError(f"{path}: no values in any sheet")
    return sections


def workbook_budget(archive: zipfile.ZipFile, path: Path, limits: FileLimits) -> PartBudget:
    """What a workbook's XML parts may unpack to.

    :data:`SHEET_BYTES` each of its worksheets, :data:`PART_BYTES` each other part,
    ``xml_budget(limits)`` all together.
    """
    each = Allowance(PART_BYTES, "one part of a workbook other than its worksheets")
    budget = PartBudget(Allowance(xml_budget(limits), chars_phrase()), each)
    sheet = Allowance(SHEET_BYTES, "one worksheet")
    named = tuple((glob.escape(name), sheet) for name in _worksheets(archive, path, budget))
    return PartBudget(budget.total, each, named)


def _worksheets(archive: zipfile.ZipFile, path: Path, budget: PartBudget) -> list[str]:
    """The parts the content types give the worksheet type and no other (lower case).

    openpyxl finds the shared strings by their type as well, so no part it reads whole passes
    for a worksheet. Content types that cannot be read (read within ``budget``) name none:
    openpyxl then says what is wrong with the file.
    """
    try:
        info = archive.getinfo(ARC_CONTENT_TYPES)
        xml = b"".join(BoundedParts(archive, path, budget).chunks(info))
        manifest = Manifest.from_tree(fromstring(xml))
    except (KeyError, TypeError, ValueError, etree.LxmlError):
        return []
    types: dict[str, set[str]] = {}
    for override in manifest.Override:
        types.setdefault(override.PartName.lstrip("/").lower(), set()).add(override.ContentType)
    return [name for name, kinds in types.items() if kinds == {WORKSHEET_TYPE}]


def read_csv(text: str, path: Path, limits: FileLimits) -> list[Section]:
    """The CSV's records, grouped: ``row`` (first record, 1-based) and ``rows``.

    Raises:
        LoaderError: The CSV is malformed, has no values, or has more records than ``limits``
            allow paragraphs.
    """
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(
            text[:8192], delimiters=CSV_DELIMITERS
        )
    except csv.Error:
        dialect = csv.excel
    reader = csv.reader(io.StringIO(text, newline=""), dialect)
    try:
        numbered = ((number, table_row(record)) for number, record in enumerate(reader, start=1))
        rows = list(_RowCounter(path, limits).count(numbered))
    except csv.Error as exc:
        raise LoaderError(f"{path}: malformed CSV (line {reader.line_num}: {exc})") from exc
    sections = group_rows(rows)
    if not sections:
        raise LoaderError(f"{path}: no values in the file")
    return sections


class _RowCounter:
    """Counts the rows read from one file, and refuses the file once they pass the limit."""

    def __init__(self, path: Path, limits: FileLimits) -> None:
        self.path = path
        self.limits = limits
        self.rows = 0

    def count(self, rows: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
        """``rows``, counted as they are read (the row past the limit is not read)."""
        for row in rows:
            self.rows += 1
            self.limits.check_paragraphs(self.path, self.rows, "rows")
            yield row


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, datetime.datetime) and value.time() == datetime.time():
        return value.date().isoformat()
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value)


class _CellCounter:
    """Counts the cells read from one workbook, and refuses it past :data:`MAX_CELLS`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.cells = 0

    def count(self, cells: int) -> None:
        """Count a row's ``cells``; refuse the file once all counted pass the budget."""
        self.cells += cells
        if self.cells > MAX_CELLS:
            raise LoaderError(
                f"{self.path}: refused: its rows span more than {MAX_CELLS:,} cells (the empty "
                "ones before each row's last cell counted), the most read from one workbook"
            )


def _sheet_rows(sheet: Any, cells: _CellCounter) -> Iterable[tuple[int, str]]:
    """``(row number, row text)`` of a worksheet, from its first row.

    The dimension the sheet declares is ignored (openpyxl pads every row to it: a 4.7 KB file
    declaring columns up to XFD took 13 minutes): each row is as wide as its last cell, and
    the cells of all rows are counted against :data:`MAX_CELLS` before they are turned to text.
    """
    sheet.reset_dimensions()
    for number, values in enumerate(sheet.iter_rows(min_row=1, values_only=True), start=1):
        cells.count(len(values))
        yield number, table_row([_cell_text(value) for value in values])


def group_rows(rows: Iterable[tuple[int, str]], sheet: str | None = None) -> list[Section]:
    """Sections of about :data:`GROUP_CHARS` characters of the non-empty ``rows``.

    The first non-empty row is the header: it starts every section; the sections cite the
    rows after it (the header alone when there are none).
    """
    filled = [(number, text) for number, text in rows if text]
    if not filled:
        return []
    (header_row, header), body = filled[0], filled[1:]
    if not body:
        return [Section(header, sheet=sheet, row=header_row)]
    sections: list[Section] = []
    group: list[tuple[int, str]] = []
    size = len(header)
    for number, text in body:
        if group and size + len(text) + 1 > GROUP_CHARS:
            sections.append(_section(header, group, sheet))
            group, size = [], len(header)
        group.append((number, text))
        size += len(text) + 1
    sections.append(_section(header, group, sheet))
    return sections


def _section(header: str, group: list[tuple[int, str]], sheet: str | None) -> Section:
    first, last = group[0][0], group[-1][0]
    text = "\n".join([header, *(line for _, line in group)])
    return Section(text, sheet=sheet, row=first, rows=f"{first}-{last}" if last > first else None)
