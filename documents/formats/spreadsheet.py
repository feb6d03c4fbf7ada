"""Spreadsheets (.xlsx) and CSV: rows as text ("a | b | c"), grouped, with sheet and rows.

A sheet's rows are grouped into sections of about :data:`GROUP_CHARS` characters, each cited
by its rows ("sheet Sales, rows 2-40"). The sheet's first row (its header, usually) starts every
group, so that each chunk still says what its columns are.
"""

from __future__ import annotations

import csv
import datetime
import io
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import openpyxl

from crag.documents.document import LoaderError, Section
from crag.documents.formats.common import office_archive, table_row
from crag.documents.limits import FileLimits

GROUP_CHARS = 800
"""Characters of rows gathered in one section: below the default chunk size, so that a
section is usually one chunk and cites its rows exactly."""

CSV_DELIMITERS = ",;\t|"
"""Delimiters a CSV file may use (sniffed from its start; a comma when none is clear)."""


def read_xlsx(data: bytes, path: Path, limits: FileLimits) -> list[Section]:
    """The worksheets' rows, grouped: ``sheet``, ``row`` (first row) and ``rows``.

    Cells hold the values last computed by the spreadsheet program (not formulas).

    Raises:
        LoaderError: The file is password-protected, not a valid .xlsx, has no values, or has
            more rows (in all its sheets) than ``limits`` allow paragraphs.
    """
    stream = office_archive(data, path, ".xlsx")
    counter = _RowCounter(path, limits)
    try:
        workbook = openpyxl.load_workbook(stream, read_only=True, data_only=True)
        try:
            sections = [
                section
                for sheet in workbook.worksheets
                for section in group_rows(counter.count(_sheet_rows(sheet)), sheet=sheet.title)
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


def _sheet_rows(sheet: Any) -> Iterable[tuple[int, str]]:
    """``(row number, row text)`` of a worksheet, from its first row."""
    for number, values in enumerate(sheet.iter_rows(min_row=1, values_only=True), start=1):
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
