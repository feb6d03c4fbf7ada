"""Word (.docx): one section per heading, with its heading path; tables as text rows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import docx
from docx.oxml.ns import qn
from docx.table import Table
from docx.text.paragraph import Paragraph

from crag.vectorstore.documents import LoaderError, Section
from crag.vectorstore.formats.common import clean_text, office_archive, table_row
from crag.vectorstore.formats.outline import Outline
from crag.vectorstore.limits import FileLimits

_HEADING_STYLE = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)
CAPTION_STYLE = "caption"


def read_docx(data: bytes, path: Path, limits: FileLimits) -> list[Section]:
    """The document's sections, one per heading (and one for the text before the first).

    Headings are the paragraphs styled "Title" or "Heading N"; a section's ``headings`` is
    the path down to it ("Method > Evaluator"). A table becomes text rows ("a | b | c") kept
    with its caption (a paragraph styled "Caption" just before or after it). The paragraphs
    (those of tables included) are counted in the parsed XML before python-docx wraps any.

    Raises:
        LoaderError: The file is password-protected, not a valid .docx, has no text, or has
            more paragraphs than ``limits`` allow.
    """
    stream = office_archive(data, path, ".docx")
    try:
        document = docx.Document(stream)
        _check_paragraphs(document.element.body, path, limits)
        blocks = list(document.iter_inner_content())
        outline = Outline()
        _read_blocks(blocks, outline)
    except LoaderError:
        raise
    except Exception as exc:  # python-docx raises many types for damaged files
        raise LoaderError(f"{path}: not a valid .docx file ({type(exc).__name__}: {exc})") from exc
    sections = outline.sections()
    if not sections:
        raise LoaderError(f"{path}: no text in the document")
    return sections


def _check_paragraphs(body: Any, path: Path, limits: FileLimits) -> None:
    """Refuse a body of more paragraphs than ``limits`` allow, counting no further than that.

    Wrapping each paragraph and looking up its style is what takes long (minutes for a million
    empty paragraphs); walking the XML elements is quick.
    """
    count = 0
    for count, _ in enumerate(body.iter(qn("w:p")), start=1):
        if count > limits.paragraphs:
            break
    limits.check_paragraphs(path, count)


def _heading_level(paragraph: Paragraph) -> int | None:
    """1 for a "Title" or "Heading 1" paragraph, N for "Heading N", ``None`` for the rest."""
    name = (paragraph.style.name if paragraph.style is not None else "") or ""
    if name.lower() == "title":
        return 1
    match = _HEADING_STYLE.match(name)
    return int(match.group(1)) if match else None


def _is_caption(block: Paragraph | Table) -> bool:
    if not isinstance(block, Paragraph) or block.style is None:
        return False
    return (block.style.name or "").lower() == CAPTION_STYLE


def _table_text(table: Table) -> str:
    """The table's rows as text lines; a merged cell (repeated by python-docx) appears once."""
    lines = []
    for row in table.rows:
        cells: list[str] = []
        previous = None
        for cell in row.cells:
            if cell._tc is not previous:
                cells.append(clean_text(cell.text))
            previous = cell._tc
        line = table_row(cells)
        if line:
            lines.append(line)
    return "\n".join(lines)


def _at(blocks: list[Paragraph | Table], index: int) -> Paragraph | Table | None:
    return blocks[index] if index < len(blocks) else None


def _read_blocks(blocks: list[Paragraph | Table], outline: Outline) -> None:
    """Feed the body's paragraphs and tables to ``outline`` in order, captions with tables."""
    used: set[int] = set()
    for index, block in enumerate(blocks):
        if index in used:
            continue
        if isinstance(block, Table):
            parts = [_table_text(block)]
            following = _at(blocks, index + 1)
            if isinstance(following, Paragraph) and _is_caption(following):
                parts.append(clean_text(following.text))
                used.add(index + 1)
            outline.add("\n".join(p for p in parts if p))
            continue
        text = clean_text(block.text)
        level = _heading_level(block)
        if level is not None and text:
            outline.heading(level, text)
        elif _is_caption(block) and isinstance(following := _at(blocks, index + 1), Table):
            used.add(index + 1)
            outline.add("\n".join(p for p in (text, _table_text(following)) if p))
        else:
            outline.add(text)
