"""What loaders produce: documents, their sections with locations, and the loading error.

A document may be made of *sections*: pieces of its text each with where it is in the file (a
PDF page, a slide, rows of a sheet, a heading path). Chunking splits each section on its own, so
no chunk spans two pages or slides, and every chunk records its section's location, which
answers cite (``report.pdf, p. 12``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

MetadataValue = str | int
"""A section field as stored in chunk metadata (Chroma takes str, int, float, bool)."""


MAX_LOCATION_CHARS = 200
"""The most characters of one location field kept in a chunk's metadata (a heading path, a
page label): every chunk of a section carries them, and every answer citing it prints them. A
375 KB Markdown file with two 100,000-character headings made a 364 MB store."""

ELLIPSIS = "…"


def capped(value: str, limit: int = MAX_LOCATION_CHARS) -> str:
    """``value``, cut to ``limit`` characters (the last an ellipsis) when it is longer."""
    return value if len(value) <= limit else value[: limit - 1] + ELLIPSIS


class LoaderError(ValueError):
    """A file cannot be turned into documents."""


@dataclass(frozen=True)
class Section:
    """A piece of a document and where it is in the file (fields that do not apply are None).

    Attributes:
        text: The section's text.
        page: 1-based page number in the PDF file.
        page_label: The page's printed label (``"iv"``, ``"A-3"``) when the PDF defines labels.
        slide: 1-based slide number.
        sheet: Worksheet name.
        row: 1-based row (spreadsheet, CSV) of the section's first row.
        rows: ``"2-40"`` when the section holds several rows.
        headings: The heading path, outermost first: ``"Method > Evaluator"``.
        part: 1-based position in an e-book's reading order, for a part without headings.
    """

    text: str
    page: int | None = None
    page_label: str | None = None
    slide: int | None = None
    sheet: str | None = None
    row: int | None = None
    rows: str | None = None
    headings: str | None = None
    part: int | None = None

    @property
    def location(self) -> str | None:
        """Where the section is, for citations; ``None`` when the format says nothing.

        ``"p. 12"`` (the page's label when it has one), ``"slide 3"``, ``"sheet Sales, rows
        2-40"``, ``"row 7"``, ``"Method > Evaluator"``, ``"part 2"``.
        """
        if self.page is not None:
            return f"p. {self.page_label or self.page}"
        if self.slide is not None:
            return f"slide {self.slide}"
        rows = f"rows {self.rows}" if self.rows else f"row {self.row}" if self.row else None
        if self.sheet is not None:
            return f"sheet {self.sheet}, {rows}" if rows else f"sheet {self.sheet}"
        if rows:
            return rows
        if self.headings:
            return self.headings
        return f"part {self.part}" if self.part is not None else None

    def metadata(self) -> dict[str, MetadataValue]:
        """The location fields that apply, and ``location``, as chunk metadata.

        Each text field is cut to :data:`MAX_LOCATION_CHARS` (:func:`capped`).
        """
        found: dict[str, MetadataValue] = {
            f.name: capped(value) if isinstance(value, str) else value
            for f in fields(self)
            if f.name != "text" and (value := getattr(self, f.name)) is not None
        }
        location = self.location
        if location is not None:
            found["location"] = capped(location)
        return found


@dataclass(frozen=True)
class LoadedDocument:
    """One document ready for chunking.

    Attributes:
        source: Absolute path of the file (``path#lineN`` for a JSON line, ``wikipedia:Title``
            for the bundled corpus).
        text: The document text (its sections' texts, separated by blank lines).
        sha256: Hex SHA-256 of the raw bytes the document came from (detects changes).
        title: The document title when the format has one.
        file: Absolute path of the file holding several documents (JSON Lines), so that lines
            removed from the file can be removed from the store.
        sections: The document's sections with their locations; empty: ``text`` is one
            section without a location (plain text, the bundled corpus).
    """

    source: str
    text: str
    sha256: str
    title: str | None = None
    file: str | None = None
    sections: tuple[Section, ...] = ()

    def parts(self) -> tuple[Section, ...]:
        """The sections to chunk, one by one (the whole text when there are none)."""
        return self.sections or (Section(self.text),)


def join_sections(sections: list[Section]) -> str:
    """The document text of ``sections``: their texts separated by blank lines."""
    return "\n\n".join(section.text for section in sections)
