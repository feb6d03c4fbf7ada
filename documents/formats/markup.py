"""HTML and Markdown: the visible text, in sections under their heading paths."""

from __future__ import annotations

import re

from bs4 import BeautifulSoup, Tag
from bs4.element import NavigableString, PageElement

from crag.documents.document import Section
from crag.documents.formats.outline import Outline

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_DROPPED_TAGS = ("script", "style", "nav", "header", "footer", "noscript", "template")
_SKIPPED_TAGS = frozenset({"title", *_DROPPED_TAGS})
"""Tags whose text is not the page's (the title is read on its own)."""
_HEADING_TAGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_BLOCK_TAGS = (
    *_HEADING_TAGS,
    "address",
    "article",
    "aside",
    "blockquote",
    "br",
    "caption",
    "dd",
    "div",
    "dl",
    "dt",
    "figcaption",
    "figure",
    "form",
    "hr",
    "li",
    "main",
    "ol",
    "p",
    "pre",
    "section",
    "table",
    "td",
    "th",
    "tr",
    "ul",
)
_MARK = "\ue000"
"""Marks a heading block's level in the extracted text (a private-use character, removed from
the page first)."""
_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


class HtmlText:
    """An HTML page's visible text, title and sections (see :func:`html_text`)."""

    def __init__(self, text: str, title: str | None, sections: list[Section]) -> None:
        self.text = text
        self.title = title
        self.sections = sections


def html_text(markup: str, part: int | None = None, *, with_title: bool = True) -> HtmlText:
    """The visible text of an HTML page, its title, and its sections under its headings.

    Blocks are separated by blank lines; headings are ``<h1>`` to ``<h6>``. The title starts
    the text unless the body already does (or ``with_title`` is false). ``part`` is recorded
    on the sections without a heading (an e-book's reading-order position).
    """
    soup = BeautifulSoup(markup.replace(_MARK, ""), "html.parser")
    title_tag = soup.find("title")
    title = " ".join(title_tag.get_text(" ").split()) if title_tag is not None else ""
    root = soup.body or soup
    blocks = [" ".join(block.split()) for block in _PARAGRAPH_BREAK.split(_block_text(root))]
    blocks = [block for block in blocks if _plain(block)]
    if with_title and title and not _plain(blocks[0] if blocks else "").startswith(title):
        blocks.insert(0, title)
    outline = Outline(part)
    for block in blocks:
        if block.startswith(_MARK):
            level, _, heading = block[1:].partition(_MARK)
            outline.heading(int(level), heading.strip())
        else:
            outline.add(block.replace(_MARK, ""))
    body = "\n\n".join(_plain(block) for block in blocks)
    return HtmlText(body, title or None, outline.sections())


def _block_text(root: Tag) -> str:
    """The text of ``root``: blocks apart by blank lines, headings marked, dropped tags left out.

    Inline markup (``<b>``, ``<a>``, ...) flows into its paragraph.

    Walked once with a stack (a page may nest tags thousands deep): inserting the breaks into the
    tree (``insert_after``, which looks up the element's place among its siblings and the end of
    its subtree) was quadratic, and a file of 100,000 nested ``<div>`` did not finish in 90 s.
    """
    types = root.interesting_string_types or Tag.MAIN_CONTENT_STRING_TYPES
    pieces: list[str] = []
    stack: list[PageElement | str] = list(reversed(root.contents))
    while stack:
        node = stack.pop()
        if isinstance(node, str) and not isinstance(node, PageElement):
            pieces.append(node)  # a break pushed after a block's children
        elif isinstance(node, NavigableString):
            if type(node) in types:
                pieces.append(node)
        elif isinstance(node, Tag) and node.name not in _SKIPPED_TAGS:
            if node.name in _BLOCK_TAGS:
                pieces.append("\n\n")
                stack.append("\n\n")
            if node.name in _HEADING_TAGS:
                pieces.append(f"{_MARK}{node.name[1]}{_MARK}")
            stack.extend(reversed(node.contents))
    return "".join(pieces)


def _plain(block: str) -> str:
    """A block without its heading mark."""
    if block.startswith(_MARK):
        return block[1:].partition(_MARK)[2].strip()
    return block


def markdown_sections(text: str) -> list[Section]:
    """Sections of a Markdown text under its ATX headings (``#`` to ``######``).

    Lines in fenced code blocks are never headings. A section's text is the original lines,
    its heading line included.
    """
    outline = Outline()
    lines: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        fenced = _FENCE.match(line)
        if fenced and (fence is None or fenced.group(1).startswith(fence)):
            fence = None if fence else fenced.group(1)[0] * 3
        heading = _ATX_HEADING.match(line) if fence is None else None
        if heading is None or not heading.group(2).strip():
            lines.append(line)
            continue
        outline.add("\n".join(lines).strip())
        lines = []
        outline.heading(len(heading.group(1)), heading.group(2).strip(), line.strip())
    outline.add("\n".join(lines).strip())
    return outline.sections()
