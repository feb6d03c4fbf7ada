"""PDF: the text layer of each page, with its number and printed label (pypdf)."""

from __future__ import annotations

import io
import logging
from pathlib import Path

from pypdf import PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError, PdfReadError

from crag.core.cancellation import raise_if_cancelled
from crag.documents.document import LoaderError, Section
from crag.documents.formats.common import clean_text, wrong_extension
from crag.documents.limits import FileLimits

logger = logging.getLogger(__name__)

PROGRESS_EVERY = 50
"""Pages between two progress lines (at INFO) while a long PDF is read."""

ENCRYPTED = "encrypted PDF; it needs a password: save a decrypted copy"
NO_TEXT = "no text layer (a scanned PDF?): OCR is not supported"


def read_pdf(data: bytes, path: Path, limits: FileLimits) -> list[Section]:
    """One section per page that has text: ``page`` (1-based) and ``page_label``.

    A PDF encrypted with an empty user password (one that only restricts printing or copying)
    opens as any other. Pages without a text layer are left out, with a warning saying how many.
    The pages are counted before any is read, and the text's characters as the pages are.

    Raises:
        LoaderError: The PDF is encrypted with a password, unreadable (corrupt, truncated, not
            a PDF), has no text layer at all, or is past one of ``limits``.
    """
    try:
        return _pages(PdfReader(io.BytesIO(data)), path, limits)
    except FileNotDecryptedError as exc:
        raise LoaderError(f"{path}: {ENCRYPTED}") from exc
    except DependencyError as exc:
        raise LoaderError(
            f"{path}: encrypted PDF that needs the 'cryptography' package to open "
            f"(pip install cryptography), or save a decrypted copy ({exc})"
        ) from exc
    except LoaderError:
        raise
    except PdfReadError as exc:
        raise LoaderError(
            f"{path}: not a readable PDF ({exc}){wrong_extension(data, '.pdf')}"
        ) from exc
    except Exception as exc:  # pypdf raises many types for damaged files
        raise LoaderError(
            f"{path}: not a readable PDF ({type(exc).__name__}: {exc})"
            f"{wrong_extension(data, '.pdf')}"
        ) from exc


def _pages(reader: PdfReader, path: Path, limits: FileLimits) -> list[Section]:
    """The sections of the pages with text; logs progress on long documents.

    The page count is that of the flattened page tree (what pypdf would read), not the
    tree's ``/Count``, which a hostile file may set to anything.
    """
    total = len(reader.pages)
    limits.check_pages(path, total)
    labels = reader.page_labels
    sections: list[Section] = []
    chars = 0
    for index, page in enumerate(reader.pages):
        raise_if_cancelled()
        text = clean_text(page.extract_text())
        chars += len(text)
        limits.check_chars(path, chars)
        if text:
            label = labels[index] if index < len(labels) else ""
            sections.append(Section(text, page=index + 1, page_label=label or None))
        if total > PROGRESS_EVERY and (index + 1) % PROGRESS_EVERY == 0:
            logger.info("%s: read %d of %d pages", path, index + 1, total)
    if not sections:
        raise LoaderError(f"{path}: {NO_TEXT}" if total else f"{path}: the PDF has no pages")
    if len(sections) < total:
        logger.warning(
            "%s: %d of %d pages have no text layer (scanned?) and are left out: OCR is not "
            "supported",
            path,
            total - len(sections),
            total,
        )
    return sections
