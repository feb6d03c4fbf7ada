"""What one ingestion may cost: pages, paragraphs and characters per file; chunks per run.

A small file can stand for a huge document: a 600 KB PDF whose page tree names one page 100,000
times is 100,000 pages, a 220 KB Word file holds 1.5 million empty paragraphs. The readers count
as they go and stop at the operator's limits (deployment settings ``max_file_pages``,
``max_file_paragraphs``, ``max_file_chars``: :class:`FileLimits`) with a
:class:`~crag.documents.document.LoaderError` naming the file and the setting, so that the
ingestion lists that file in ``failed`` and goes on with the others. These limits bind every
ingestion, the operator's too.

A served run (the ``ingest`` graph) may also embed at most ``ingest_max_chunks`` chunks: its
:class:`ChunkBudget` counts them as documents are split, and refuses the run before anything
past the limit is embedded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from crag.documents.document import LoaderError
from crag.settings.deployment import DeploymentSettings, deployment_settings
from crag.settings.setting_checks import env_name

PAGES_SETTING = "max_file_pages"
PARAGRAPHS_SETTING = "max_file_paragraphs"
CHARS_SETTING = "max_file_chars"
BYTES_SETTING = "max_file_bytes"
DEFAULT_FILE_BYTES = 256 << 20
"""``max_file_bytes``'s default, for limits made without a deployment (see
:class:`~crag.settings.deployment.DeploymentSettings`)."""
MAX_CHUNKS = "ingest_max_chunks"


def _setting(name: str) -> str:
    return f"setting {name}, environment variable {env_name(name)}"


@dataclass(frozen=True)
class FileLimits:
    """The most pages (or slides), paragraphs (or rows) and characters read from one file.

    ``file_bytes`` is the largest file read at all, whatever its format (checked before it is read).
    """

    pages: int
    paragraphs: int
    chars: int
    file_bytes: int = DEFAULT_FILE_BYTES

    @classmethod
    def configured(cls, deployment: DeploymentSettings | None = None) -> FileLimits:
        """The limits ``deployment`` sets (default: the operator's)."""
        deployment = deployment or deployment_settings()
        return cls(
            deployment.max_file_pages,
            deployment.max_file_paragraphs,
            deployment.max_file_chars,
            deployment.max_file_bytes,
        )

    def check_pages(self, path: Path, pages: int, what: str = "pages") -> None:
        """Refuse a file of more than :attr:`pages` pages (or slides: ``what``)."""
        if pages > self.pages:
            raise LoaderError(
                f"{path}: refused: {pages:,} {what}, more than the {self.pages:,} read from one "
                f"file ({_setting(PAGES_SETTING)})"
            )

    def check_paragraphs(self, path: Path, paragraphs: int, what: str = "paragraphs") -> None:
        """Refuse a file past :attr:`paragraphs` paragraphs (or rows: ``what``).

        Called while counting: ``paragraphs`` is how many were met so far, so the message says
        "more than" without a total that was never counted.
        """
        if paragraphs > self.paragraphs:
            raise LoaderError(
                f"{path}: refused: more than {self.paragraphs:,} {what}, the most read from "
                f"one file ({_setting(PARAGRAPHS_SETTING)})"
            )

    def check_chars(self, path: Path, chars: int) -> None:
        """Refuse a file once more than :attr:`chars` characters of text were extracted."""
        if chars > self.chars:
            raise LoaderError(
                f"{path}: refused: more than {self.chars:,} characters of text, the most read "
                f"from one file ({_setting(CHARS_SETTING)})"
            )

    def check_file_bytes(self, path: Path, size: int) -> None:
        """Refuse, unread, a file of ``size`` bytes past :attr:`file_bytes` (any format).

        PDF and Office readers hold the whole file and more: a 1.5 GB (sparse) file took 5 GB
        before it was found not to be a PDF.
        """
        if size > self.file_bytes:
            raise LoaderError(
                f"{path}: refused: {size:,} bytes, more than the {self.file_bytes:,} bytes "
                f"read from one file ({_setting(BYTES_SETTING)})"
            )

    def check_text_bytes(self, path: Path, size: int) -> None:
        """Refuse, unread, a text file of ``size`` bytes that must hold too many characters.

        A character is at most 4 bytes of UTF-8, so a file of more than ``4 * chars`` bytes
        holds more than ``chars`` characters (the others are counted once decoded).
        """
        if size > 4 * self.chars:
            raise LoaderError(
                f"{path}: refused: {size:,} bytes of text, more than the {self.chars:,} "
                f"characters read from one file ({_setting(CHARS_SETTING)})"
            )


def operator_limits() -> FileLimits:
    """The operator's limits (environment, else defaults)."""
    return FileLimits.configured(None)


class ChunkLimitError(ValueError):
    """A served run would embed more chunks than the operator lets one run embed."""


class ChunkBudget:
    """The chunks one served run may still embed (deployment setting ``ingest_max_chunks``).

    Chunks are counted as documents are split, before anything is embedded or written, and
    across the run's files and inline documents (ingested one after the other).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, chunks: int) -> None:
        """Count a document's ``chunks``; refuse the run once the total passes the limit.

        Raises:
            ChunkLimitError: past the limit (one line naming the setting).
        """
        self.used += chunks
        if self.used > self.limit:
            raise ChunkLimitError(
                f"refused: this run would embed more than {self.limit:,} chunks (at least "
                f"{self.used:,}), the most one run of this server may ({_setting(MAX_CHUNKS)}); "
                "send fewer documents or a larger chunk_size"
            )
