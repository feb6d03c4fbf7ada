"""Turn a fetched page into a title and paragraphs, as the CRAG paper's web reader does.

The paper's code takes the ``<p>`` elements of each page and prefixes them with the page
title. Here the page is cleaned first: navigation and other boilerplate (``nav``, ``header``,
``footer``, ``aside``, scripts, styles, forms, cookie banners, elements marked as navigation,
banners or dialogs) is removed, citation markers such as ``[12]`` are dropped, very short
paragraphs (menus, buttons, captions) are skipped and very long ones are cut at sentence
boundaries into pieces the evaluator can score. A page without ``<p>`` elements falls back to
its text blocks. PDF documents are read with ``pypdf`` (a dependency of crag; a page that is a
PDF is skipped, with a note, where it is missing).
"""

from __future__ import annotations

import importlib.util
import io
import itertools
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crag.knowledge.strips import split_sentences
from crag.websearch.fetch import FetchedPage, PageError

if TYPE_CHECKING:
    from bs4 import Tag

logger = logging.getLogger(__name__)

MIN_PARAGRAPH_WORDS = 6
"""Paragraphs with fewer words are boilerplate (links, buttons, captions) and are dropped."""
MAX_PARAGRAPH_WORDS = 150
"""Longer paragraphs are cut at sentence boundaries into pieces of at most this many words."""
MAX_PARAGRAPHS = 40
"""Paragraphs kept per page (the first ones), to bound the evaluator's batch."""
MAX_TEXT_CHARS = 1_000_000
"""Characters of paragraph text looked at per page: ``<p>`` elements nested in one another
(``html.parser`` does not close them) would each hold the text of all the ones inside."""
MAX_PDF_PAGES = 30
"""PDF pages read per document."""
MAX_TITLE_WORDS = 12
MAX_PAGE_ELEMENTS = 50_000
"""Tags parsed per page: the page is cut before the next one. ``html.parser`` takes about 20 µs
a tag, so a 2 MB page of bare tags (``<i><i><i>...``) costs about a second, not ten."""

_DROP_TAGS = (
    "script",
    "style",
    "noscript",
    "template",
    "nav",
    "header",
    "footer",
    "aside",
    "form",
    "button",
    "select",
    "textarea",
    "svg",
    "iframe",
    "object",
    "embed",
    "dialog",
    "menu",
)
_DROP_ROLES = frozenset(
    {"navigation", "banner", "contentinfo", "complementary", "search", "dialog", "alertdialog"}
)
# A class or id token whose first part (before - or _) is one of these marks boilerplate.
_BOILERPLATE_WORDS = frozenset(
    {
        "nav",
        "navbar",
        "navigation",
        "menu",
        "breadcrumb",
        "breadcrumbs",
        "sidebar",
        "header",
        "footer",
        "masthead",
        "newsletter",
        "subscribe",
        "share",
        "social",
        "advert",
        "ads",
        "ad",
        "promo",
        "popup",
        "modal",
        "comments",
    }
)
# ... and a token containing one of these anywhere (cookie banners come in many spellings).
_CONSENT_WORDS = ("cookie", "consent", "gdpr")
_NEVER_DROPPED = frozenset({"html", "body", "main", "article"})
_COOKIE_TEXT = re.compile(
    r"\bwe use cookies\b|\buses cookies\b|\bcookie (?:policy|settings|preferences|consent)\b"
    r"|\baccept (?:all )?cookies\b|\bby (?:continuing|using) (?:to (?:browse|use) )?"
    r"(?:this|our) (?:site|website)\b",
    re.IGNORECASE,
)
_CITATION = re.compile(r"\[\s*(?:\d+|[a-z]|citation needed|note \d+|nb \d+|edit)\s*\]", re.I)
_SITE_SUFFIX = re.compile(r"\s+[-|\u2013\u2014:]\s+(?:Wikipedia|Wikimedia)\b.*$", re.I)
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?)])")


@dataclass(frozen=True)
class PageText:
    """What was read from one page.

    Attributes:
        url: The page's final URL.
        title: Its cleaned title ("" if it has none).
        paragraphs: Its paragraphs, in page order, without the title.
    """

    url: str
    title: str
    paragraphs: tuple[str, ...]


def pdf_supported() -> bool:
    """Whether PDF documents can be read (``pypdf`` is installed)."""
    return importlib.util.find_spec("pypdf") is not None


def page_title(title: str) -> str:
    """A title fit for a heading line: no site suffix, no closing punctuation, short.

    ``"Mona Lisa - Wikipedia"`` becomes ``"Mona Lisa"``; an empty title stays empty.
    """
    text = _SITE_SUFFIX.sub("", " ".join(title.split())).strip()
    words = text.split()
    if len(words) > MAX_TITLE_WORDS:
        text = " ".join(words[:MAX_TITLE_WORDS])
    return text.rstrip(".!?;:,").strip()


def _clean_text(text: str) -> str:
    text = _CITATION.sub("", text)
    text = " ".join(text.split())
    return _SPACE_BEFORE_PUNCT.sub(r"\1", text)


def _split_long(paragraph: str) -> list[str]:
    """Cut a paragraph longer than :data:`MAX_PARAGRAPH_WORDS` at sentence boundaries."""
    if len(paragraph.split()) <= MAX_PARAGRAPH_WORDS:
        return [paragraph]
    pieces: list[str] = []
    current: list[str] = []
    count = 0
    for sentence in split_sentences(paragraph):
        words = sentence.split()
        while len(words) > MAX_PARAGRAPH_WORDS:  # one endless "sentence": word windows
            if current:
                pieces.append(" ".join(current))
                current, count = [], 0
            pieces.append(" ".join(words[:MAX_PARAGRAPH_WORDS]))
            words = words[MAX_PARAGRAPH_WORDS:]
        if count + len(words) > MAX_PARAGRAPH_WORDS and current:
            pieces.append(" ".join(current))
            current, count = [], 0
        if words:
            current.append(" ".join(words))
            count += len(words)
    if current:
        pieces.append(" ".join(current))
    return pieces


def _keep(texts: Iterable[str]) -> list[str]:
    """Clean, filter (short, cookie text, repeats), split long ones, cap the count.

    Texts are no longer looked at once they have passed :data:`MAX_TEXT_CHARS` in all and one
    paragraph is kept.
    """
    kept: list[str] = []
    seen: set[str] = set()
    looked_at = 0
    for raw in texts:
        looked_at += len(raw)
        if looked_at > MAX_TEXT_CHARS and kept:
            break
        text = _clean_text(raw)
        if len(text.split()) < MIN_PARAGRAPH_WORDS or _COOKIE_TEXT.search(text):
            continue
        for piece in _split_long(text):
            if piece not in seen:
                seen.add(piece)
                kept.append(piece)
        if len(kept) >= MAX_PARAGRAPHS:
            break
    return kept[:MAX_PARAGRAPHS]


def _is_boilerplate(tag: Tag, paragraphs: int, total_paragraphs: int) -> bool:
    """Whether ``tag`` is navigation, a banner, hidden, or named like boilerplate.

    A class or id name alone never drops an element that holds most of the page's
    paragraphs (``paragraphs`` of its ``total_paragraphs``: a page wrapper named
    ``menu-open`` is still the page).
    """
    if tag.name in _NEVER_DROPPED:
        return False
    if tag.has_attr("hidden") or str(tag.get("aria-hidden", "")).lower() == "true":
        return True
    if str(tag.get("role", "")).lower() in _DROP_ROLES:
        return True
    style = str(tag.get("style", "")).replace(" ", "").lower()
    if "display:none" in style or "visibility:hidden" in style:
        return True
    classes: Any = tag.get("class") or []
    tokens = [str(c).lower() for c in (classes if isinstance(classes, list) else [classes])]
    tokens.append(str(tag.get("id", "")).lower())
    named = any(
        token
        and (
            re.split(r"[-_]", token, maxsplit=1)[0] in _BOILERPLATE_WORDS
            or any(word in token for word in _CONSENT_WORDS)
        )
        for token in tokens
    )
    return named and paragraphs * 2 <= total_paragraphs


_TAG_START = re.compile(rb"<\x00?[A-Za-z]")
_TAG_START_TEXT = re.compile(r"<[A-Za-z]")


def _bounded(markup: bytes | str) -> bytes | str:
    """``markup`` cut before its tag past :data:`MAX_PAGE_ELEMENTS` (whole when it has fewer).

    Counted on the bytes (a ``<`` is one byte in every encoding a page is likely to use, or a
    ``<`` and a zero byte in UTF-16), by a regular expression: no Python code runs per tag.
    """
    pattern: Any = _TAG_START if isinstance(markup, bytes) else _TAG_START_TEXT
    past = next(itertools.islice(pattern.finditer(markup), MAX_PAGE_ELEMENTS, None), None)
    if past is None:
        return markup
    logger.info("page cut at its %d-th tag (offset %d)", MAX_PAGE_ELEMENTS, past.start())
    return markup[: past.start()]


def _child_tags(tag: Tag) -> list[Tag]:
    from bs4 import Tag

    return [child for child in tag.contents if isinstance(child, Tag)]


def _outermost(root: Tag, matches: Callable[[Tag], bool]) -> list[Tag]:
    """The tags under ``root`` that ``matches`` and are inside no other such tag, in page order.

    Walked with a stack, not recursion (a page may nest tags thousands deep), and the subtree of
    a matching tag is never looked at: each tag is visited once.
    """
    found: list[Tag] = []
    stack = _child_tags(root)[::-1]
    while stack:
        tag = stack.pop()
        if matches(tag):
            found.append(tag)
        else:
            stack.extend(_child_tags(tag)[::-1])
    return found


def _paragraph_counts(root: Tag) -> dict[int, int]:
    """``id(tag)`` -> the ``<p>`` elements inside it, for ``root`` and every tag under it.

    Summed from the innermost tags out, each from its children's counts: linear in the page
    (``tag.find_all("p")`` for every tag is quadratic in the nesting).
    """
    counts: dict[int, int] = {}
    for tag in [root, *root.find_all(True)][::-1]:
        counts[id(tag)] = sum(counts[id(child)] + (child.name == "p") for child in _child_tags(tag))
    return counts


def _drop_boilerplate(soup: Tag) -> None:
    """Decompose the dropped tags, then the boilerplate (outermost ones only, each once).

    bs4 4.15's ``element.decomposed`` searches the element's subtree for a ``_decomposed`` tag
    (attribute access on a tag is a search), so asking it of every element was quadratic: an
    88 KB page 8,000 ``<div>`` deep took 93 s.
    """
    for tag in _outermost(soup, lambda tag: tag.name in _DROP_TAGS):
        tag.decompose()
    counts = _paragraph_counts(soup)
    total = counts[id(soup)]
    for tag in _outermost(soup, lambda tag: _is_boilerplate(tag, counts[id(tag)], total)):
        tag.decompose()


def html_text(markup: bytes | str, charset: str | None = None) -> tuple[str, list[str]]:
    """The title and the paragraphs of an HTML document (see the module docstring).

    Malformed markup is parsed as well as it can be (``html.parser`` never gives up); only its
    first :data:`MAX_PAGE_ELEMENTS` tags are parsed, and every step after parsing is linear in
    the page, however deep its tags nest.
    BeautifulSoup is imported here, when a page is first read (about 0.15 s): a run answered
    from the store never reads one.
    """
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(
        _bounded(markup), "html.parser", from_encoding=charset if charset else None
    )
    title_tag = soup.find("title")
    title = title_tag.get_text(" ") if title_tag is not None else ""
    if not title.strip():
        heading = soup.find("h1")
        title = heading.get_text(" ") if heading is not None else ""
    _drop_boilerplate(soup)
    paragraphs = _keep(p.get_text(" ") for p in soup.find_all("p"))
    if not paragraphs:  # pages that put their text in <div>s: use the text blocks
        root = soup.body or soup
        blocks = re.split(r"\n\s*\n|\n", root.get_text("\n"))
        paragraphs = _keep(
            block for block in blocks if len(block.split()) >= 2 * MIN_PARAGRAPH_WORDS
        )
    return page_title(title), paragraphs


def pdf_text(data: bytes) -> tuple[str, list[str]]:
    """The title and paragraphs of a PDF document (its first :data:`MAX_PDF_PAGES` pages).

    Raises:
        PageError: ``pypdf`` is not installed, or the document cannot be read.
    """
    try:
        from pypdf import PdfReader
    except ImportError:
        raise PageError(
            "a PDF, and reading PDFs needs the pypdf package, which is not installed "
            "(reinstall crag)",
            skipped=True,
        ) from None
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise PageError("the PDF is encrypted")
        metadata = reader.metadata
        title = str(metadata.title or "") if metadata is not None else ""
        blocks: list[str] = []
        for page in reader.pages[:MAX_PDF_PAGES]:
            text = page.extract_text() or ""
            text = re.sub(r"(\w)-\n(\w)", r"\1\2", text)  # words hyphenated across lines
            blocks.extend(re.split(r"\n\s*\n", text))
    except PageError:
        raise
    except Exception as exc:  # pypdf raises many types for broken files
        logger.info("PDF could not be read: %r", exc)
        raise PageError("the PDF could not be read") from exc
    return page_title(title), _keep(blocks)


def extract(page: FetchedPage) -> PageText:
    """Read a fetched page's title and paragraphs.

    Raises:
        PageError: the document could not be parsed.
    """
    if page.is_pdf:
        title, paragraphs = pdf_text(page.body)
    else:
        try:
            title, paragraphs = html_text(page.body, page.charset)
        except Exception as exc:  # a parser bug must not end the run
            logger.warning("HTML of %s could not be parsed", page.url, exc_info=True)
            raise PageError("the page could not be parsed") from exc
    return PageText(url=page.url, title=title, paragraphs=tuple(paragraphs))
