"""EPUB e-books: the reading order's (X)HTML documents, in sections under their headings.

Read with the standard library (the container's ``META-INF/container.xml`` names the package
document, whose spine gives the reading order) and BeautifulSoup for the pages.
"""

from __future__ import annotations

import posixpath
import zipfile
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote
from xml.etree import ElementTree

from crag.documents.document import LoaderError, Section
from crag.documents.formats.common import office_archive
from crag.documents.formats.markup import html_text
from crag.documents.limits import FileLimits

_CONTAINER = "META-INF/container.xml"
_NS = {
    "c": "urn:oasis:names:tc:opendocument:xmlns:container",
    "opf": "http://www.idpf.org/2007/opf",
    "dc": "http://purl.org/dc/elements/1.1/",
}
_PAGE_TYPES = frozenset({"application/xhtml+xml", "text/html"})


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
            return _read_book(archive, path, limits)
    except LoaderError:
        raise
    except (KeyError, ElementTree.ParseError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise LoaderError(f"{path}: not a valid .epub file ({type(exc).__name__}: {exc})") from exc


def _read_book(archive: zipfile.ZipFile, path: Path, limits: FileLimits) -> Book:
    if "META-INF/encryption.xml" in archive.namelist():
        raise LoaderError(f"{path}: encrypted (DRM-protected) e-book; it cannot be read")
    container = ElementTree.fromstring(archive.read(_CONTAINER))
    rootfile = container.find(".//c:rootfile", _NS)
    package_path = rootfile.get("full-path") if rootfile is not None else None
    if not package_path:
        raise LoaderError(f"{path}: not a valid .epub file (no package document in {_CONTAINER})")
    package = ElementTree.fromstring(archive.read(package_path))
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
    for part, idref in enumerate((i for i in order if i in pages), start=1):
        markup = archive.read(pages[idref]).decode("utf-8", errors="replace")
        found = html_text(markup, part=part, with_title=False).sections
        chars += sum(len(section.text) for section in found)
        limits.check_chars(path, chars)  # part by part: a long book stops being read early
        sections.extend(found)
    if not sections:
        raise LoaderError(f"{path}: no text in the e-book")
    return Book(title or None, sections)
