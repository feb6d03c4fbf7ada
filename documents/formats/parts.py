"""What an Office file's XML parts may unpack to, checked before a library parses them.

A small Office file can stand for a huge one: a 387 kB workbook whose shared strings unpack to
150 MB (openpyxl spent four minutes of a core and 850 MB building their list), a presentation
with a 50 MB slide (python-pptx parses every part into a tree when it opens the file: 770 MB),
a 386 kB Word file of 240 MB of XML. python-docx, openpyxl and python-pptx read the archive
through :mod:`zipfile`, which never yields more than a member's declared size; so the declared
size of each XML part is checked against its budget (:class:`PartBudget`), and their total,
before the library opens the file. Then each XML part is read through :func:`read_bounded`,
which counts the bytes actually unpacked (whatever the header says) against the part's budget
and the file's total, and stops at the first byte past either.

Bytes are not enough: 10 MB of empty elements (``<a:p/>``, six bytes each) is 1.7 million
elements, hundreds of MB once python-docx or python-pptx builds their tree. So a format may also
count its parts' elements (:class:`ElementBudget`), with a streaming parser that keeps no more of
the tree than its nesting, and the file is refused at the first element past the budget.

Only XML parts (``*.xml``, ``*.rels``, an e-book's pages and package) are budgeted: the
libraries parse those; images and other media are kept as bytes, bounded with the rest of the
archive by
:data:`~crag.documents.formats.common.MAX_UNZIPPED_BYTES`.
"""

from __future__ import annotations

import fnmatch
import logging
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from lxml import etree

from crag.documents.document import LoaderError
from crag.documents.limits import CHARS_SETTING, PARAGRAPHS_SETTING, FileLimits
from crag.settings.setting_checks import env_name

logger = logging.getLogger(__name__)

XML_BYTES_PER_CHAR = 16
"""Bytes of XML allowed for each character of text ``max_file_chars`` allows: Word's markup
(runs, properties, revision ids) is commonly 5 to 15 times the text of a long document."""

MIN_XML_BYTES = 64 << 20
"""The least XML budget, whatever ``max_file_chars``: a short document still carries markup
(section properties, drawings) many times its text."""

MIN_XML_ELEMENTS = 250_000
"""The least element budget, whatever ``max_file_paragraphs``."""

ELEMENTS_PER_PARAGRAPH = 5
"""Elements allowed for each paragraph ``max_file_paragraphs`` allows (a paragraph, its run,
its text and their properties: 1,000,000 elements by default, a tree of about 250 MB)."""

_CHUNK_BYTES = 1 << 16
_XML_SUFFIXES = (".xml", ".rels", ".xhtml", ".html", ".htm", ".opf", ".ncx")
"""Parts a library parses: Office's XML, an e-book's package document, table of contents, pages."""
_DAMAGED = (
    zipfile.BadZipFile,
    zlib.error,
    OSError,
    EOFError,
    ValueError,
    RuntimeError,
    NotImplementedError,
)
"""What zipfile raises for a damaged archive or member (a wrong CRC, a bad deflate stream)."""


def xml_budget(limits: FileLimits) -> int:
    """The most bytes of XML read for a document's text, from the characters ``limits`` allow."""
    return max(MIN_XML_BYTES, XML_BYTES_PER_CHAR * limits.chars)


def element_budget(limits: FileLimits) -> int:
    """The most XML elements read from one file, from the paragraphs ``limits`` allow."""
    return max(MIN_XML_ELEMENTS, ELEMENTS_PER_PARAGRAPH * limits.paragraphs)


def paragraphs_phrase() -> str:
    """What :func:`element_budget` is the most of, for a refusal."""
    setting = f"setting {PARAGRAPHS_SETTING}, environment variable {env_name(PARAGRAPHS_SETTING)}"
    return f"one file for the paragraphs it may hold ({setting})"


def chars_phrase() -> str:
    """What the budgets derived from ``max_file_chars`` are, for a refusal."""
    setting = f"setting {CHARS_SETTING}, environment variable {env_name(CHARS_SETTING)}"
    return f"one file for the characters it may hold ({setting})"


@dataclass(frozen=True)
class Allowance:
    """The most bytes of XML a part (or a file's parts together) may unpack to.

    ``of`` says, in a refusal, what the bytes are the most of ("one slide").
    """

    bytes: int
    of: str


@dataclass(frozen=True)
class PartBudget:
    """What one Office file's XML parts may unpack to, each and all together.

    A part's allowance is that of the first of ``named`` whose pattern (lower case, as
    :mod:`fnmatch` reads it) matches its name, else ``each``; ``total`` bounds them all.
    """

    total: Allowance
    each: Allowance
    named: tuple[tuple[str, Allowance], ...] = ()

    def of(self, name: str) -> Allowance:
        """The allowance of the part ``name`` (a member's name, matched case-insensitively)."""
        lowered = name.lower()
        for pattern, allowance in self.named:
            if fnmatch.fnmatchcase(lowered, pattern):
                return allowance
        return self.each


def is_xml_part(name: str) -> bool:
    """Whether the member ``name`` is XML a library parses (not an image or other media)."""
    return name.lower().endswith(_XML_SUFFIXES)


def too_large(path: Path, name: str, size: str, allowance: Allowance) -> LoaderError:
    """The refusal of a part past ``allowance``; ``size`` says how large ("unpacks to more")."""
    return LoaderError(
        f"{path}: refused: its part {name} {size} the {allowance.bytes:,} bytes of XML read "
        f"from {allowance.of}"
    )


def read_bounded(
    member: IO[bytes], name: str, path: Path, budget: int, of: str = ""
) -> Iterator[bytes]:
    """``member``'s bytes in chunks, refused once more than ``budget`` of them were read.

    A ZIP member's declared size can lie; zipfile stops at the declared size (the CRC check
    then fails), and this bound holds whatever reads the member. ``of`` says what ``budget``
    is the most of (default: the characters ``max_file_chars`` allows).

    Raises:
        LoaderError: ``member`` holds more than ``budget`` bytes.
    """
    allowance = Allowance(budget, of or chars_phrase())
    read = 0
    while chunk := member.read(_CHUNK_BYTES):
        read += len(chunk)
        if read > budget:
            raise too_large(path, name, "unpacks to more than", allowance)
        yield chunk


def xml_elements(chunks: Iterator[bytes]) -> Iterator[Any]:
    """The elements of the XML in ``chunks`` as each ends, forgotten once it is yielded.

    The parser is set as python-docx and python-pptx set their own (entities not resolved,
    lxml's default depth and text limits), so that what it cannot parse they cannot either.
    Each element is emptied and its earlier siblings removed after it is yielded: the tree kept
    stays as small as the XML's nesting, however many elements it holds.
    """
    parser = etree.XMLPullParser(events=("end",), resolve_entities=False, no_network=True)
    for chunk in chunks:
        parser.feed(chunk)
        for _, element in parser.read_events():
            yield element
            _forget(element)
    parser.close()


def _forget(element: Any) -> None:
    """Empty an element that has ended, and remove its earlier siblings from its parent."""
    element.clear(keep_tail=False)
    parent = element.getparent()
    if parent is not None:
        while element.getprevious() is not None:
            del parent[0]


class ElementBudget:
    """The XML elements one file may still hold, counted across its parts.

    :meth:`take` refuses the file, naming the part where the count passed ``limit``; ``of``
    says what the limit is the most of (default: the paragraphs ``max_file_paragraphs`` allows).
    """

    def __init__(self, path: Path, limit: int, of: str = "") -> None:
        self.path, self.limit, self.of = path, limit, of or paragraphs_phrase()
        self.used = 0

    def take(self, name: str) -> None:
        """Count one element of the part ``name``.

        Raises:
            LoaderError: The file now holds more elements than allowed.
        """
        self.used += 1
        if self.used > self.limit:
            raise LoaderError(
                f"{self.path}: refused: its XML parts, up to its part {name}, hold more than "
                f"the {self.limit:,} XML elements read from {self.of}"
            )


class BoundedParts:
    """One Office archive's XML parts, read within a :class:`PartBudget` (see the module).

    The bytes read through :meth:`chunks` are added up: past the budget's total, the file is
    refused.
    """

    def __init__(
        self,
        archive: zipfile.ZipFile,
        path: Path,
        budget: PartBudget,
        elements: ElementBudget | None = None,
    ) -> None:
        self.archive, self.path, self.budget = archive, path, budget
        self.elements = elements
        self.read_total = 0

    def check_declared(self) -> None:
        """Refuse the file if an XML part's declared size, or their sum, is past the budget.

        Raises:
            LoaderError: A part, or all of them together, would unpack to too much.
        """
        declared = 0
        for info in self.archive.infolist():
            if not is_xml_part(info.filename):
                continue
            allowance = self.budget.of(info.filename)
            if info.file_size > allowance.bytes:
                size = f"would unpack to {info.file_size:,} bytes, more than"
                raise too_large(self.path, info.filename, size, allowance)
            declared += info.file_size
            if declared > self.budget.total.bytes:
                raise self._past_total(
                    info.filename, f"would unpack to {declared:,} bytes, more than"
                )

    def chunks(self, info: zipfile.ZipInfo) -> Iterator[bytes]:
        """The part ``info``'s bytes, counted against its allowance and the file's total.

        Raises:
            LoaderError: The part, or the parts read so far, unpack to more than allowed.
        """
        allowance = self.budget.of(info.filename)
        with self.archive.open(info) as member:
            for chunk in read_bounded(
                member, info.filename, self.path, allowance.bytes, allowance.of
            ):
                self.read_total += len(chunk)
                if self.read_total > self.budget.total.bytes:
                    raise self._past_total(info.filename, "unpack to more than")
                yield chunk

    def parsed(self, info: zipfile.ZipInfo) -> Iterator[Any]:
        """The part ``info``'s elements (:func:`xml_elements`), each counted in :attr:`elements`.

        Raises:
            LoaderError: As :meth:`chunks`, or the file's elements pass :attr:`elements`.
            etree.LxmlError: The part is not well-formed XML.
        """
        for element in xml_elements(self.chunks(info)):
            if self.elements is not None:
                self.elements.take(info.filename)
            yield element

    def read_all(self, skip: frozenset[str] = frozenset()) -> None:
        """Read every XML part but those named in ``skip`` (already read), and forget the bytes.

        With :attr:`elements`, each part's elements are counted as well; a part that is not
        well-formed XML is counted no further (the library that parses it refuses it).

        Raises:
            LoaderError: As :meth:`chunks` and :meth:`parsed`; zipfile's errors for a damaged
                member.
        """
        for info in self.archive.infolist():
            if is_xml_part(info.filename) and info.filename not in skip:
                self._read(info)

    def _read(self, info: zipfile.ZipInfo) -> None:
        if self.elements is None:
            for _ in self.chunks(info):
                pass
            return
        try:
            for _ in self.parsed(info):
                pass
        except etree.LxmlError as exc:
            logger.debug("%s: part %s not counted past %r", self.path, info.filename, exc)

    def _past_total(self, name: str, size: str) -> LoaderError:
        total = self.budget.total
        return LoaderError(
            f"{self.path}: refused: its XML parts, up to its part {name}, {size} the "
            f"{total.bytes:,} bytes of XML read from {total.of}"
        )


BudgetOf = Callable[[zipfile.ZipFile, Path], PartBudget]
"""A format's budget, made once its archive is open (from its content types, say): it reads
what it needs through a :class:`BoundedParts` of its own."""


def check_parts(
    stream: IO[bytes],
    path: Path,
    budget: PartBudget | BudgetOf,
    elements: ElementBudget | None = None,
) -> None:
    """Refuse the Office file in ``stream`` if its XML parts are past ``budget``, before parsing.

    The declared sizes first (nothing unpacked), then every XML part read through
    :func:`read_bounded` (and, given ``elements``, its elements counted against it, all parts
    together). ``budget`` may be made from the open archive (:data:`BudgetOf`). ``stream`` is
    left at its start.

    Raises:
        LoaderError: A part or the parts' total is past the budget (one sentence naming the
            file and the part), or the archive is damaged (a member unreadable, a CRC wrong).
    """
    try:
        with zipfile.ZipFile(stream) as archive:
            if not isinstance(budget, PartBudget):
                budget = budget(archive, path)
            parts = BoundedParts(archive, path, budget, elements)
            parts.check_declared()
            parts.read_all()
    except LoaderError:
        raise
    except _DAMAGED as exc:
        raise LoaderError(f"{path}: not a valid {path.suffix.lower()} file ({exc})") from exc
    finally:
        stream.seek(0)
