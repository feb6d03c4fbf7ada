"""EPUB e-books: the reading order's (X)HTML documents, in sections under their headings.

Read with the standard library (the container's ``META-INF/container.xml`` names the package
document, whose spine gives the reading order) and BeautifulSoup for the pages.

A 15 KB book can stand for gigabytes: a page of millions of tiny elements, or one page named a
thousand times by the spine (867 MB and 56 s). So every part is read within the budgets of
:mod:`.parts` (:data:`BUDGET`: each part, and all the bytes read, a page read again counting
again), and each page's elements are counted by a streaming parser before BeautifulSoup builds
its tree: at most :data:`PAGE_ELEMENTS` a page, :func:`~.parts.element_budget` in the book.
"""

from __future__ import annotations

import posixpath
import zipfile
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote
from xml.etree import ElementTree

from lxml import etree

from crag.documents.document import LoaderError, Section
from crag.documents.formats.common import office_archive
from crag.documents.formats.markup import html_text
from crag.documents.formats.parts import (
    Allowance,
    BoundedParts,
    ElementBudget,
    PartBudget,
    element_budget,
)
from crag.documents.limits import FileLimits

_CONTAINER = "META-INF/container.xml"
_NS = {
    "c": "urn:oasis:names:tc:opendocument:xmlns:container",
    "opf": "http://www.idpf.org/2007/opf",
    "dc": "http://purl.org/dc/elements/1.1/",
}
_PAGE_TYPES = frozenset({"application/xhtml+xml", "text/html"})

PART_BYTES = 8 << 20
"""The most bytes one part of a book (a page, the package document) may unpack to: a chapter
is commonly tens of kilobytes."""

BOOK_BYTES = 64 << 20
"""The most bytes read from a book's parts together (a page the spine names twice counts
twice): BeautifulSoup's tree costs tens of times its markup."""

PAGE_ELEMENTS = 100_000
"""The most elements of one page (about 100 MB of BeautifulSoup's tree)."""

BUDGET = PartBudget(
    total=Allowance(BOOK_BYTES, "one e-book, all its parts together"),
    each=Allowance(PART_BYTES, "one part of an e-book (a page, its package document)"),
)


class Book(NamedTuple):
    """An e-book's title and its sections in reading order."""

    title: str | None
    sections: list[Section]


def read_epub(data: bytes, path: Path, limits: FileLimits) -> Book:
    """The book's title (``dc:title``) and its sections in reading order.

    Each section has its heading path within its (X)HTML document of the reading order, else
    ``part``: that document's 1-based position in the order.

    Raises:
        LoaderError: Not a valid EPUB (not a ZIP archive, no container or package document,
            malformed XML), encrypted (DRM), no text, or more characters than ``limits`` allow.
    """
    stream = office_archive(data, path, ".epub")
    try:
        with zipfile.ZipFile(stream) as archive:
            parts = BoundedParts(archive, path, BUDGET)
            parts.check_declared()
            return _read_book(parts, path, limits)
    except LoaderError:
        raise
    except (
        KeyError,
        ElementTree.ParseError,
        etree.LxmlError,
        zipfile.BadZipFile,
        UnicodeDecodeError,
    ) as exc:
        raise LoaderError(f"{path}: not a valid .epub file ({type(exc).__name__}: {exc})") from exc


def _read(parts: BoundedParts, name: str) -> bytes:
    """The member ``name``'s bytes, read within :data:`BUDGET`.

    Raises:
        KeyError: No such member.
        LoaderError: It (or the parts read so far) unpack to more than allowed.
    """
    return b"".join(parts.chunks(parts.archive.getinfo(name)))


def _page_markup(parts: BoundedParts, name: str, elements: ElementBudget) -> str:
    """The page ``name``'s markup, once its elements are counted (:data:`PAGE_ELEMENTS`).

    Raises:
        LoaderError: The page, or the book so far, holds more elements than allowed.
    """
    data = _read(parts, name)
    page = ElementBudget(parts.path, PAGE_ELEMENTS, "one page of an e-book")
    parser = etree.HTMLPullParser(events=("start",), no_network=True)
    for start in range(0, len(data), 1 << 16):
        parser.feed(data[start : start + (1 << 16)])
        for _ in parser.read_events():
            page.take(name)
            elements.take(name)
    parser.close()
    return data.decode("utf-8", errors="replace")


def _read_book(parts: BoundedParts, path: Path, limits: FileLimits) -> Book:
    archive = parts.archive
    if "META-INF/encryption.xml" in archive.namelist():
        raise LoaderError(f"{path}: encrypted (DRM-protected) e-book; it cannot be read")
    container = ElementTree.fromstring(_read(parts, _CONTAINER))
    rootfile = container.find(".//c:rootfile", _NS)
    package_path = rootfile.get("full-path") if rootfile is not None else None
    if not package_path:
        raise LoaderError(f"{path}: not a valid .epub file (no package document in {_CONTAINER})")
    package = ElementTree.fromstring(_read(parts, package_path))
    title_tag = package.find(".//dc:title", _NS)
    title = " ".join((title_tag.text or "").split()) if title_tag is not None else ""
    base = posixpath.dirname(package_path)
    pages = {
        item.get("id"): posixpath.normpath(posixpath.join(base, unquote(item.get("href") or "")))
        for item in package.iterfind(".//opf:manifest/opf:item", _NS)
        if item.get("media-type") in _PAGE_TYPES
    }
    order = [ref.get("idref") for ref in package.iterfind(".//opf:spine/opf:itemref", _NS)]
    sections: list[Section] = []
    chars = 0
    elements = ElementBudget(path, element_budget(limits))
    for part, idref in enumerate((i for i in order if i in pages), start=1):
        markup = _page_markup(parts, pages[idref], elements)
        found = html_text(markup, part=part, with_title=False).sections
        chars += sum(len(section.text) for section in found)
        limits.check_chars(path, chars)  # part by part: a long book stops being read early
        sections.extend(found)
    if not sections:
        raise LoaderError(f"{path}: no text in the e-book")
    return Book(title or None, sections)
