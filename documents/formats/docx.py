"""Word (.docx): one section per heading, with its heading path; tables as text rows.

A small .docx can unpack to a huge document (a 386 KB file of 40 million empty paragraphs,
240 MB of XML), and python-docx builds the whole XML tree before anything can be counted: GBs
of memory and many seconds. So the archive is checked first (:mod:`.parts`, as for workbooks and
presentations): the main document part's size against :func:`xml_budget`, every other XML
part's against :data:`MIN_XML_BYTES`, their total against :func:`xml_budget`, then the main
part's paragraphs, and every part's elements (10 MB of empty runs is 1.7 million elements: 423 MB
of python-docx's tree), counted by a streaming parser that stops past the limit. Only a document
that passes all of them is given to python-docx.
"""

from __future__ import annotations

import glob
import logging
import posixpath
import re
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import docx
from docx.opc.constants import RELATIONSHIP_TARGET_MODE, RELATIONSHIP_TYPE
from docx.oxml.ns import qn
from docx.table import Table
from docx.text.paragraph import Paragraph
from lxml import etree

from crag.documents.document import LoaderError, Section
from crag.documents.formats.common import clean_text, office_archive, table_row
from crag.documents.formats.outline import Outline
from crag.documents.formats.parts import (
    MIN_XML_BYTES,
    Allowance,
    BoundedParts,
    ElementBudget,
    PartBudget,
    chars_phrase,
    element_budget,
    read_bounded,
    too_large,
    xml_budget,
    xml_elements,
)
from crag.documents.limits import FileLimits

logger = logging.getLogger(__name__)

_HEADING_STYLE = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)
CAPTION_STYLE = "caption"

_PACKAGE_RELATIONSHIPS = "_rels/.rels"
_RELATIONSHIP = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"
_PARAGRAPH = qn("w:p")

_UNREADABLE = (
    KeyError,
    ValueError,
    OSError,
    EOFError,
    RuntimeError,
    NotImplementedError,
    zlib.error,
    zipfile.BadZipFile,
    etree.LxmlError,
)
"""What a damaged archive or XML raises while it is checked; python-docx then says what is
wrong with it, as it did before the check."""


def read_docx(data: bytes, path: Path, limits: FileLimits) -> list[Section]:
    """The document's sections, one per heading (and one for the text before the first).

    Headings are the paragraphs styled "Title" or "Heading N"; a section's ``headings`` is
    the path down to it ("Method > Evaluator"). A table becomes text rows ("a | b | c") kept
    with its caption (a paragraph styled "Caption" just before or after it). The main part's
    XML is measured and its paragraphs (those of tables included) counted before python-docx
    parses it (:func:`check_main_part`).

    Raises:
        LoaderError: The file is password-protected, not a valid .docx, has no text, has more
            paragraphs than ``limits`` allow, or XML past :func:`xml_budget`.
    """
    stream = office_archive(data, path, ".docx")
    check_main_part(stream, path, limits)
    stream.seek(0)
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


def check_main_part(stream: IO[bytes], path: Path, limits: FileLimits) -> None:
    """Refuse the .docx in ``stream`` if its XML is too large, before it is parsed.

    The main document part (found as python-docx finds it, through the package's
    relationships) may unpack to at most :func:`xml_budget` bytes, every other XML part to
    :data:`MIN_XML_BYTES`, all of them to :func:`xml_budget`; the main part may hold at most
    ``limits.paragraphs`` paragraphs, counted by a streaming parser that stops at the first one
    past the limit, and all the XML parts at most :func:`element_budget` elements. An archive
    that cannot be read so is left to python-docx, which says what is wrong with it.

    Raises:
        LoaderError: The XML or its paragraphs are past the limits (one sentence naming the
            file, the part and the setting).
    """
    try:
        with zipfile.ZipFile(stream) as archive:
            mains = _main_parts(archive, path)
            elements = ElementBudget(path, element_budget(limits))
            parts = BoundedParts(archive, path, document_budget(limits, mains), elements)
            parts.check_declared()
            count = 0
            for part in mains:
                count = _count_paragraphs(parts.parsed(part), path, limits, count)
            parts.read_all(skip=frozenset(part.filename for part in mains))
    except LoaderError:
        raise
    except _UNREADABLE as exc:
        logger.debug("%s: not checked before python-docx reads it (%r)", path, exc)


_OTHER_PART = Allowance(MIN_XML_BYTES, "one part of a Word file other than its main document")


def document_budget(limits: FileLimits, mains: list[zipfile.ZipInfo]) -> PartBudget:
    """What a Word file's XML parts may unpack to (see :func:`check_main_part`)."""
    allowed = Allowance(xml_budget(limits), chars_phrase())
    named = tuple((glob.escape(part.filename.lower()), allowed) for part in mains)
    return PartBudget(total=allowed, each=_OTHER_PART, named=named)


def _main_parts(archive: zipfile.ZipFile, path: Path) -> list[zipfile.ZipInfo]:
    """The members that the package's relationships name as its main document (one, usually).

    Raises:
        KeyError: The archive has no package relationships, or lacks a part they name.
        LoaderError: The relationships part is past :data:`MIN_XML_BYTES`.
    """
    info = archive.getinfo(_PACKAGE_RELATIONSHIPS)
    if info.file_size > _OTHER_PART.bytes:
        size = f"would unpack to {info.file_size:,} bytes, more than"
        raise too_large(path, info.filename, size, _OTHER_PART)
    with archive.open(info) as member:
        chunks = read_bounded(member, info.filename, path, _OTHER_PART.bytes, _OTHER_PART.of)
        names = _office_document_targets(chunks)
    return [archive.getinfo(name) for name in names]


def _office_document_targets(chunks: Iterator[bytes]) -> list[str]:
    """The member names of the package relationships' main document targets, in order.

    A target resolves against the package root as python-docx resolves it ("word/document.xml"
    and "/word/document.xml" name the same member).
    """
    names: list[str] = []
    for element in xml_elements(chunks):
        if (
            element.tag == _RELATIONSHIP
            and element.get("Type") == RELATIONSHIP_TYPE.OFFICE_DOCUMENT
            and element.get("TargetMode") != RELATIONSHIP_TARGET_MODE.EXTERNAL
        ):
            names.append(posixpath.abspath(posixpath.join("/", element.get("Target", "")))[1:])
    return names


def _count_paragraphs(
    elements: Iterator[Any], path: Path, limits: FileLimits, count: int = 0
) -> int:
    """``count`` plus the paragraphs (``w:p`` elements) among ``elements``.

    Raises:
        LoaderError: The total passes ``limits.paragraphs``, as soon as it does (the rest of
            the XML is not read).
    """
    for element in elements:
        if element.tag == _PARAGRAPH:
            count += 1
            limits.check_paragraphs(path, count)
    return count


def _check_paragraphs(body: Any, path: Path, limits: FileLimits) -> None:
    """Refuse a body of more paragraphs than ``limits`` allow, counting no further than that.

    :func:`check_main_part` counted them already, unless it could not read the archive (and
    python-docx could). Wrapping each paragraph and looking up its style is what takes long
    (minutes for a million empty paragraphs); walking the XML elements is quick.
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
