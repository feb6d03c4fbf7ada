"""Read documents from disk: text, Markdown, HTML, JSON Lines, CSV, PDF, Office, EPUB.

This module picks the reader by the file's extension (the readers of binary formats are in
:mod:`crag.documents.formats`). A file is one document, except a JSON Lines file (one per line);
a document may carry sections with their locations (pages, slides, sheet rows, heading paths:
see :class:`~crag.documents.document.Section`) that chunks and citations keep.

Every failure (unreadable file, not a regular file, a symbolic link loop, a path with a NUL
character, bytes that are not UTF-8 or not text at all, unsupported extension, malformed JSON
line, an encrypted, scanned or damaged PDF, a password-protected or damaged Office file)
raises :class:`LoaderError` with a message naming the file and what to do.
"""

from __future__ import annotations

import errno
import hashlib
import importlib
import json
import logging
import os
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from crag.documents.document import LoadedDocument, LoaderError, Section, join_sections
from crag.documents.limits import FileLimits, operator_limits

__all__ = [
    "SUPPORTED_EXTENSIONS",
    "FileLimits",
    "LoadedDocument",
    "LoaderError",
    "Section",
    "iter_paths",
    "load_file",
    "not_text_reason",
    "real_path",
    "shown_path",
]

logger = logging.getLogger(__name__)

TEXT_EXTENSIONS = frozenset({".txt"})
MARKDOWN_EXTENSIONS = frozenset({".md"})
HTML_EXTENSIONS = frozenset({".html", ".htm"})
JSONL_EXTENSIONS = frozenset({".jsonl"})
CSV_EXTENSIONS = frozenset({".csv"})
BINARY_EXTENSIONS = frozenset({".pdf", ".docx", ".pptx", ".xlsx", ".epub"})
"""Formats read from bytes by a reader of :mod:`crag.documents.formats`."""
SUPPORTED_EXTENSIONS: tuple[str, ...] = tuple(
    sorted(
        TEXT_EXTENSIONS
        | MARKDOWN_EXTENSIONS
        | HTML_EXTENSIONS
        | JSONL_EXTENSIONS
        | CSV_EXTENSIONS
        | BINARY_EXTENSIONS
    )
)
"""File extensions :func:`load_file` understands (lower case, with the dot)."""

JSONL_TEXT_FIELDS: tuple[str, ...] = ("text", "contents", "extract")
"""Fields of a JSON line holding the document text, first match wins."""

BINARY_CONTROL_SHARE = 0.1
"""Text whose share of control characters (other than tab, newlines, form feed) is above this
is binary data, not text. Real text has almost none; ANSI colour codes stay far below it."""

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")
_READERS: dict[str, tuple[str, str]] = {
    ".pdf": ("crag.documents.formats.pdf", "read_pdf"),
    ".docx": ("crag.documents.formats.docx", "read_docx"),
    ".pptx": ("crag.documents.formats.pptx", "read_pptx"),
    ".xlsx": ("crag.documents.formats.spreadsheet", "read_xlsx"),
}
"""Module and function reading each binary format but EPUB (which also gives a title)."""

Reader = Callable[[bytes, Path, FileLimits], list[Section]]
"""A binary format's reader: the file's bytes, its path (for messages) and the limits."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def shown_path(path: str | Path) -> str:
    r"""``path`` as it can be printed and stored: bytes of a name that are not UTF-8 as ``\xff``.

    Such a name decodes to lone surrogates, which no UTF-8 text (a message, the store's
    SQLite, JSON) can hold; every other path is returned as it is.
    """
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _check_name(path: Path) -> None:
    r"""Refuse a path no file can have, or whose name cannot be stored as a source.

    A NUL character makes the OS raise ``ValueError`` deep inside; a name that is not UTF-8
    (``bad\xff.txt`` from a Latin-1 system) cannot be written to the store or printed.
    """
    if "\0" in str(path):
        raise LoaderError(f"{str(path)!r}: not a valid path (it contains a NUL character)")
    shown = shown_path(path)
    if shown != str(path):
        raise LoaderError(
            f"{shown}: skipped: its name is not valid UTF-8; rename it, e.g. "
            "`convmv -f latin1 -t utf-8 --notest FILE`"
        )


def _loop(path: Path) -> LoaderError:
    return LoaderError(
        f"{path}: symbolic link loop (following its links leads back to itself, never to a file)"
    )


def real_path(path: Path) -> Path:
    """The path with every symbolic link followed (a missing file: where it would be).

    Raises:
        LoaderError: The path contains a NUL character, or its links form a loop.
    """
    _check_name(path)
    try:
        return Path(os.path.realpath(path, strict=True))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _loop(path) from None
    # Missing or unreadable: the path as far as it resolves (``load_file`` says what is wrong).
    return Path(os.path.realpath(path))


def unreadable(path: Path, exc: OSError) -> LoaderError:
    """The one line that says why ``path`` could not be looked at or opened (``exc``)."""
    if isinstance(exc, FileNotFoundError):
        if path.is_symlink():
            return LoaderError(f"{path}: broken symbolic link (its target does not exist)")
        return LoaderError(f"{path}: file does not exist")
    if exc.errno == errno.ELOOP:
        return _loop(path)
    return LoaderError(f"{path}: cannot read file ({exc.strerror or exc})")


def _read_bytes(path: Path, limits: FileLimits, text: bool) -> bytes:
    """The file's bytes; a file too large for ``limits`` is refused unread.

    Every file is checked against ``limits.file_bytes``; a ``text`` file against the
    characters ``limits`` allow as well.
    """
    try:
        info = path.stat()
    except OSError as exc:
        raise unreadable(path, exc) from exc
    if stat.S_ISDIR(info.st_mode):
        raise LoaderError(f"{path}: is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        # Opening a FIFO waits for a writer, forever; a device may never end: never open them.
        raise LoaderError(f"{path}: skipped: {_file_kind(info.st_mode)}, not a regular file")
    limits.check_file_bytes(path, info.st_size)
    if text:
        limits.check_text_bytes(path, info.st_size)
    try:
        return path.read_bytes()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise LoaderError(f"{path}: cannot read file ({reason})") from exc


def _decode(data: bytes, path: Path) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LoaderError(
            f"{path}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "convert the file to UTF-8, e.g. `iconv -f latin1 -t utf-8 FILE > FILE.utf8`"
        ) from exc
    return text.removeprefix("\ufeff")


def not_text_reason(text: str) -> str | None:
    """Why ``text`` is binary data rather than text, or ``None`` when it is text.

    Valid UTF-8 is not enough: a file of NUL bytes decodes, and would be split into a hundred
    identical chunks of nothing. Text has no NUL and (almost) no other control characters.
    """
    nuls = text.count("\0")
    if nuls:
        return f"binary data, not text ({nuls:,} NUL characters)"
    controls = sum(1 for _ in _CONTROL.finditer(text))
    if text and controls / len(text) > BINARY_CONTROL_SHARE:
        return f"binary data, not text ({controls / len(text):.0%} control characters)"
    return None


def _jsonl_documents(data: bytes, path: Path, source: str) -> list[LoadedDocument]:
    docs: list[LoadedDocument] = []
    content = _decode(data, path)
    for number, line in enumerate(content.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            record: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LoaderError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})") from exc
        except RecursionError:
            # json parses nested arrays and objects recursively: 100k "[" exhaust the stack
            raise LoaderError(f"{where}: JSON nested too deeply to read") from None
        if not isinstance(record, dict):
            raise LoaderError(f"{where}: expected a JSON object, got {type(record).__name__}")
        text = next((record[f] for f in JSONL_TEXT_FIELDS if isinstance(record.get(f), str)), None)
        if text is None:
            raise LoaderError(
                f"{where}: no text field; each object needs a string field "
                + " or ".join(repr(f) for f in JSONL_TEXT_FIELDS)
            )
        title_value = record.get("title")
        title = (
            title_value.strip() if isinstance(title_value, str) and title_value.strip() else None
        )
        body = text.strip()
        if title and not body.startswith(title):
            body = f"{title}\n{body}"
        docs.append(
            LoadedDocument(
                source=f"{source}#line{number}",
                text=body,
                sha256=_sha256(line.encode()),
                title=title,
                file=source,
            )
        )
    return docs


def _read_binary(
    suffix: str, data: bytes, path: Path, limits: FileLimits
) -> tuple[list[Section], str | None]:
    """The sections (and title) of a PDF, Office or EPUB file, by its reader.

    The readers are imported on first use: their libraries take a while to import.
    """
    if suffix == ".epub":
        from crag.documents.formats.epub import read_epub

        book = read_epub(data, path, limits)
        return book.sections, book.title
    module, name = _READERS[suffix]
    reader: Reader = getattr(importlib.import_module(module), name)
    return reader(data, path, limits), None


def _text_sections(
    suffix: str, text: str, path: Path, limits: FileLimits
) -> tuple[str, str | None, list[Section]]:
    """The text, title and sections of a text file (no sections: plain text)."""
    from crag.documents.formats.markup import html_text, markdown_sections
    from crag.documents.formats.spreadsheet import read_csv

    if suffix in HTML_EXTENSIONS:
        page = html_text(text)
        return page.text, page.title, page.sections
    if suffix in MARKDOWN_EXTENSIONS:
        return text, None, markdown_sections(text)
    if suffix in CSV_EXTENSIONS:
        sections = read_csv(text, path, limits)
        return join_sections(sections), None, sections
    return text, None, []


def _checked_bytes(path: Path, limits: FileLimits, data: bytes | None, *, text: bool) -> bytes:
    """The file's bytes within ``limits``: ``data`` as given (already read), else read."""
    if data is None:
        return _read_bytes(path, limits, text=text)
    limits.check_file_bytes(path, len(data))
    if text:
        limits.check_text_bytes(path, len(data))
    return data


def load_file(
    path: Path, limits: FileLimits | None = None, *, data: bytes | None = None
) -> list[LoadedDocument]:
    """Load one file into documents (one per file, one per line for JSON Lines).

    Args:
        path: A file with one of :data:`SUPPORTED_EXTENSIONS`.
        limits: The most pages, paragraphs and characters read from the file (see
            :mod:`crag.documents.limits`); default: the operator's settings.
        data: Its bytes, already read from a descriptor checked to lie in the ingest root
            (:mod:`crag.documents.confined`); ``None`` reads ``path``.

    Returns:
        The documents; ``source`` is the absolute path (``path#lineN`` for JSON lines). A
        document's sections carry their locations (PDF pages, slides, sheets and rows,
        heading paths); a text file without headings has none.

    Raises:
        LoaderError: The file is missing or unreadable, not a regular file (a FIFO, socket or
            device, which is never opened), a symbolic link loop, not UTF-8, binary data, of an
            unsupported type, a JSON line is malformed, or the path has a NUL character; a PDF
            is encrypted, scanned (no text layer) or damaged; an Office file or e-book is
            password-protected or damaged; the file is past one of ``limits``.
    """
    limits = limits or operator_limits()
    path = Path(path)
    _check_name(path)
    suffix = _supported_suffix(path)
    binary = suffix in BINARY_EXTENSIONS
    data = _checked_bytes(path, limits, data, text=not binary)
    source = str(path.expanduser().absolute())
    if binary:
        sections, title = _read_binary(suffix, data, path, limits)
        text = join_sections(sections)
        limits.check_chars(path, len(text))
    else:
        text = _decode(data, path)
        limits.check_chars(path, len(text))  # before parsing: markup is longer than its text
        if suffix in JSONL_EXTENSIONS:
            return _jsonl_documents(data, path, source)
        reason = not_text_reason(text)
        if reason is not None:
            raise LoaderError(f"{path}: {reason}")
        text, title, sections = _text_sections(suffix, text, path, limits)
    return [_document(source, text, data, title, sections)]


def _supported_suffix(path: Path) -> str:
    """The file's extension, lower-cased, when it is one of :data:`SUPPORTED_EXTENSIONS`.

    Raises:
        LoaderError: It is not (or the file has none).
    """
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_EXTENSIONS:
        kind = f"extension {suffix!r}" if suffix else "no extension"
        raise LoaderError(
            f"{path}: unsupported file type ({kind}); supported: {', '.join(SUPPORTED_EXTENSIONS)}"
        )
    return suffix


def _document(
    source: str, text: str, data: bytes, title: str | None, sections: list[Section]
) -> LoadedDocument:
    """The file's one document, its sections kept only where they carry locations.

    Sections without a location say nothing the text does not: plain text stays one piece.
    """
    located = tuple(sections) if any(s.location for s in sections) else ()
    return LoadedDocument(
        source=source, text=text.strip(), sha256=_sha256(data), title=title, sections=located
    )


def _is_folder(path: Path) -> bool:
    """Whether ``path`` is a directory.

    One that cannot be looked at is not: :func:`load_file` then says why it cannot be read.
    """
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _entry_is_folder(entry: os.DirEntry[str]) -> bool | None:
    """Whether ``entry`` is a real directory (``None``: a link to one, never followed)."""
    try:
        if entry.is_dir(follow_symlinks=False):
            return True
        return None if entry.is_dir() else False
    except OSError:
        return False  # cannot be looked at: kept as a file, for load_file to say why


def _walk(top: Path) -> list[Path]:
    """The entries with a supported extension under ``top``, hidden ones skipped.

    Iterative, so a tree thousands of levels deep cannot exhaust the stack; a folder that
    cannot be read (no permission, a path too long for the system) is skipped with a warning.
    """
    found: list[Path] = []
    folders = [top]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as exc:
            logger.warning(
                "%s: cannot read folder (%s); its files were skipped",
                shown_path(folder),
                exc.strerror or exc,
            )
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            kind = _entry_is_folder(entry)
            if kind:
                folders.append(Path(entry.path))
            elif kind is False and Path(entry.name).suffix.lower() in SUPPORTED_EXTENSIONS:
                found.append(Path(entry.path))
    return found


def iter_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Expand files and directories into the files to ingest.

    Directories are walked recursively for entries with a supported extension (hidden entries
    skipped, symbolic links to directories not followed), sorted for a deterministic order.
    Entries that are not regular files (FIFOs, sockets, devices, broken links) are kept, as are
    paths named explicitly even when missing or unsupported, so that :func:`load_file` reports
    the problem. Duplicates are dropped.

    Args:
        paths: Files and/or directories.

    Returns:
        The files, in order.
    """
    seen: set[Path] = set()
    result: list[Path] = []

    def add(candidate: Path) -> None:
        key = candidate.absolute()
        if key not in seen:
            seen.add(key)
            result.append(candidate)

    for item in paths:
        path = Path(item).expanduser()
        if not _is_folder(path):
            add(path)
            continue
        found = sorted(_walk(path))
        if not found:
            logger.warning(
                "%s: no supported files (%s)", shown_path(path), ", ".join(SUPPORTED_EXTENSIONS)
            )
        for p in found:
            add(p)
    return result
