"""PowerPoint (.pptx): one section per slide, its shapes' text, tables and speaker notes.

python-pptx parses every XML part of a presentation into a tree when it opens the file (about
15 bytes of memory a byte of XML: a 50 MB slide took 770 MB), so the parts are measured first
(:mod:`.parts`): each may unpack to at most :data:`PART_BYTES`, all together to
:data:`PRESENTATION_BYTES`, and all of them may hold at most
:func:`~crag.documents.formats.parts.element_budget` elements (8 MB of empty paragraphs is 1.4
million elements, 255 MB of python-pptx's tree).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pptx
from pptx.enum.shapes import MSO_SHAPE_TYPE

from crag.documents.document import LoaderError, Section
from crag.documents.formats.common import clean_text, office_archive, table_row
from crag.documents.formats.parts import (
    Allowance,
    ElementBudget,
    PartBudget,
    check_parts,
    element_budget,
)
from crag.documents.limits import FileLimits

PART_BYTES = 8 << 20
"""The most bytes of XML one part of a presentation (a slide, its notes, a layout) may unpack
to: a slide's XML is commonly tens of kilobytes, one of a large table a megabyte or two."""

PRESENTATION_BYTES = 32 << 20
"""The most bytes of XML all the parts of one presentation may unpack to (python-pptx holds
their trees at once: a few hundred MB at most)."""

BUDGET = PartBudget(
    total=Allowance(PRESENTATION_BYTES, "one presentation, all its parts together"),
    each=Allowance(PART_BYTES, "one part of a presentation (a slide, its notes, a layout)"),
)


def read_pptx(data: bytes, path: Path, limits: FileLimits) -> list[Section]:
    """One section per slide with text: ``slide`` (1-based), notes after "Notes:".

    Raises:
        LoaderError: The file is password-protected, not a valid .pptx, has no text, has
            more slides than ``limits`` allow pages, or XML parts past :data:`BUDGET` or
            holding more elements than :func:`element_budget` allows.
    """
    stream = office_archive(data, path, ".pptx")
    check_parts(stream, path, BUDGET, ElementBudget(path, element_budget(limits)))
    try:
        presentation = pptx.Presentation(stream)
        limits.check_pages(path, len(presentation.slides), "slides")
        sections = [
            Section(text, slide=number)
            for number, slide in enumerate(presentation.slides, start=1)
            if (text := _slide_text(slide))
        ]
    except LoaderError:
        raise
    except Exception as exc:  # python-pptx raises many types for damaged files
        raise LoaderError(f"{path}: not a valid .pptx file ({type(exc).__name__}: {exc})") from exc
    if not sections:
        raise LoaderError(f"{path}: no text on any slide")
    return sections


def _slide_text(slide: Any) -> str:
    """The slide's text: its shapes in order, then its speaker notes."""
    blocks = [text for shape in _shapes(slide.shapes) if (text := _shape_text(shape))]
    if slide.has_notes_slide:
        frame = slide.notes_slide.notes_text_frame
        notes = clean_text(frame.text) if frame is not None else ""
        if notes:
            blocks.append(f"Notes: {notes}")
    return "\n\n".join(blocks)


def _shapes(shapes: Iterable[Any]) -> Iterator[Any]:
    """The shapes, with the members of group shapes in their place."""
    for shape in shapes:
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            yield from _shapes(shape.shapes)
        else:
            yield shape


def _shape_text(shape: Any) -> str:
    if getattr(shape, "has_table", False):
        rows = [table_row([clean_text(c.text) for c in row.cells]) for row in shape.table.rows]
        return "\n".join(row for row in rows if row)
    if getattr(shape, "has_text_frame", False):
        return clean_text(shape.text_frame.text)
    return ""
