"""What the format readers share: recognising content, Office containers, text clean-up."""

from __future__ import annotations

import io
import re
import unicodedata
import zipfile
from pathlib import Path

from crag.documents.document import LoaderError

CFB_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
"""A Compound File Binary container: a password-protected (encrypted) Office Open XML file,
or a legacy binary Office file (.doc, .xls, .ppt)."""

MAX_UNZIPPED_BYTES = 1 << 30
"""An archive (Office file, e-book) that would unpack to more than this is refused: a
decompression bomb, or nothing worth indexing whole."""

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SPACES = re.compile(r"[ \t\u00a0]+")
_HYPHENATED = re.compile(r"([^\W\d_])-[ \t]*\n[ \t]*([^\W\d_])")
_BLANK_LINES = re.compile(r"\n{3,}")


_KINDS: tuple[tuple[bytes, frozenset[str], str], ...] = (
    (b"%PDF", frozenset({".pdf"}), "a PDF"),
    (b"PK\x03\x04", frozenset({".docx", ".pptx", ".xlsx", ".epub"}), "a ZIP archive"),
    (CFB_MAGIC, frozenset(), "an encrypted or legacy (pre-2007) Office file"),
)
"""Leading bytes, the extensions whose files start with them, and what such a file is."""


def wrong_extension(data: bytes, extension: str) -> str:
    """A hint when the bytes are plainly not what ``extension`` says ("" otherwise)."""
    for magic, extensions, kind in _KINDS:
        if data.startswith(magic) and extension not in extensions:
            return f"; it looks like {kind}: is its extension wrong?"
    return ""


def office_archive(data: bytes, path: Path, extension: str) -> io.BytesIO:
    """The bytes of an Office Open XML file (or EPUB) as a stream, once they pass checks.

    Raises:
        LoaderError: The file is password-protected (a CFB container), a legacy binary Office
            file, not a ZIP archive, or one that unpacks to more than
            :data:`MAX_UNZIPPED_BYTES`.
    """
    if data.startswith(CFB_MAGIC):
        if extension in {".docx", ".xlsx", ".pptx"}:
            raise LoaderError(
                f"{path}: password-protected (encrypted) Office file; save an unencrypted copy"
            )
        raise LoaderError(f"{path}: not a valid {extension} file (it is a legacy Office file)")
    stream = io.BytesIO(data)
    try:
        with zipfile.ZipFile(stream) as archive:
            unpacked = sum(member.file_size for member in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise LoaderError(
            f"{path}: not a valid {extension} file ({exc}){wrong_extension(data, extension)}"
        ) from exc
    if unpacked > MAX_UNZIPPED_BYTES:
        raise LoaderError(
            f"{path}: refused: it would unpack to {unpacked:,} bytes "
            f"(at most {MAX_UNZIPPED_BYTES:,})"
        )
    stream.seek(0)
    return stream


def clean_text(text: str) -> str:
    r"""Text extracted from a file, normalised for indexing.

    NFKC folds ligatures and full-width forms ("ﬁ" to "fi"), words hyphenated at a line end are
    joined ("exam-\nple" to "example"), control characters dropped, runs of spaces made one,
    lines stripped, and at most one blank line kept in a row.
    """
    text = unicodedata.normalize("NFKC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    text = _HYPHENATED.sub(_join_hyphenated, text)
    lines = (_SPACES.sub(" ", line).strip() for line in text.split("\n"))
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()


def _join_hyphenated(match: re.Match[str]) -> str:
    """Join a word broken at a line end, unless the next line starts a capitalised word."""
    before, after = match.group(1), match.group(2)
    return before + after if after.islower() else match.group(0)


def table_row(cells: list[str]) -> str:
    """One table row as text: ``"a | b | c"`` (trailing empty cells dropped)."""
    values = [" ".join(cell.split()) for cell in cells]
    while values and not values[-1]:
        values.pop()
    return " | ".join(values)
