"""The chat page's uploads: a file sent to the server, stored where the ingest graph reads it.

The chat page (:mod:`crag.app.web.chat_page`) posts a file's bytes; :func:`store_upload` (or
:func:`receive_upload`, reading a request's stream) checks them and writes them to
``<upload folder>/<first 16 hex digits of their SHA-256>/<safe name>``. The same bytes under
the same name land at the same path, so ingesting them again is skipped; different bytes land
in another folder, so no upload overwrites another's file. The bytes go to a temporary file in
the upload folder, which is then renamed into place through directory descriptors: a symbolic
link planted at the file's folder is refused, one planted at the file itself is replaced, and
neither is followed.

The upload folder (:func:`upload_folder`) is the deployment setting ``upload_dir``; else
``uploads`` in ``ingest_root`` (the served ingest graph reads only there); else ``uploads``
beside the store (``.crag/uploads`` by default). An upload is refused with one sentence and an
HTTP status (:class:`UploadRefusedError`) for a name with nothing usable in it (400), an
extension the ingestion does not read (415), bytes that are not what the extension says where
that is cheap to see (a PDF that does not start with ``%PDF-``, an Office file or e-book that
is not a ZIP archive, text that is not UTF-8 or holds a NUL byte: 415), an empty file (400),
more than ``upload_max_bytes`` bytes (413: counted as they arrive, and reading stops there),
uploads kept past ``upload_quota_bytes`` or ``upload_max_files`` (413: the bytes declared and
a file are held for each upload before its body is read, :class:`QuotaReservation`, so that
uploads sent at once cannot all pass), a body slower than ``upload_seconds`` (408: a
caller dripping bytes holds no temporary file for longer), a full disk (507), and, every
upload, when ``upload_dir`` lies outside ``ingest_root`` (500).

Pure logic: no Starlette here.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import errno
import hashlib
import logging
import os
import tempfile
import threading
import unicodedata
from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crag.core.public_names import MEMBERS_FOLDER, ServedFolders, public_name, uploads_folder
from crag.documents.loaders import SUPPORTED_EXTENSIONS
from crag.settings.deployment import DeploymentSettings

__all__ = [
    "StoredUpload",
    "UploadRefusedError",
    "receive_upload",
    "safe_name",
    "store_upload",
    "upload_folder",
]

logger = logging.getLogger(__name__)

MAX_NAME_CHARS = 120
"""Most characters of a stored file's name, its extension included."""
MAX_NAME_BYTES = 255
"""Most bytes of a stored file's name in UTF-8: what most file systems allow in one name."""
HASH_DIGITS = 16
"""Hex digits of the bytes' SHA-256 that name the folder a file is stored in."""

_TEMP_PREFIX = ".upload-"
"""How the temporary file of an upload being received is named (never counted as kept)."""
_ZIP_EXTENSIONS = frozenset({".docx", ".pptx", ".xlsx", ".epub"})
_MAGIC = {".pdf": b"%PDF-", **dict.fromkeys(_ZIP_EXTENSIONS, b"PK\x03\x04")}
"""How the files of each binary type start."""
_DROPPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Control and format characters (a right-to-left override can disguise an extension),
surrogates, line and paragraph separators: never kept in a stored name."""
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


class UploadRefusedError(ValueError):
    """An upload the server does not store: one sentence, and the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class StoredUpload:
    """A stored file: its path (absolute), its stored name, its size and its SHA-256 (hex)."""

    path: Path
    name: str
    bytes: int
    sha256: str

    def as_json(self, settings: DeploymentSettings) -> dict[str, Any]:
        """The upload as the chat page receives it: ``path`` is its name (``upload:...``).

        The name is what the served ingest graph reads back into the file; the server's
        folders stay unseen (:mod:`crag.core.public_names`).
        """
        folders = ServedFolders.of(settings.upload_dir, settings.ingest_root, settings.store_path)
        return {
            "path": public_name(str(self.path), folders),
            "name": self.name,
            "bytes": self.bytes,
            "sha256": self.sha256,
        }


def _resolved(path: str | Path) -> Path:
    return Path(path).expanduser().resolve()


def upload_folder(settings: DeploymentSettings, member: str | None = None) -> Path:
    """Where uploads are stored: absolute, symbolic links resolved.

    ``upload_dir``; else ``uploads`` in ``ingest_root`` when that is set; else ``uploads``
    beside the store (``.crag/uploads`` by default); a member's in ``members/NAME`` there.

    Raises:
        UploadRefusedError: ``upload_dir`` lies outside ``ingest_root`` (status 500): the
            ingest graph could not read what would be uploaded.
    """
    root = _resolved(settings.ingest_root) if settings.ingest_root.strip() else None
    folder = uploads_folder(
        settings.upload_dir, settings.ingest_root, settings.store_path, member=member
    )
    if root is not None and not folder.is_relative_to(root):
        logger.error("upload_dir %s is outside ingest_root %s: no uploads", folder, root)
        raise UploadRefusedError(
            "the server takes no uploads: its setting upload_dir (CRAG_UPLOAD_DIR) is not "
            "inside its setting ingest_root (CRAG_INGEST_ROOT), the only directory its "
            "ingest graph reads, so the operator must move upload_dir into ingest_root or "
            "leave it empty",
            status=500,
        )
    return folder


def _shortened(name: str, extension: str) -> str:
    """``name`` cut to :data:`MAX_NAME_CHARS` characters and :data:`MAX_NAME_BYTES` bytes.

    The stem is cut, the extension kept.
    """
    if len(name) <= MAX_NAME_CHARS and len(name.encode("utf-8")) <= MAX_NAME_BYTES:
        return name
    stem = name[: len(name) - len(extension)][: MAX_NAME_CHARS - len(extension)]
    while len((stem + extension).encode("utf-8")) > MAX_NAME_BYTES:
        stem = stem[:-1]
    return stem.rstrip() + extension


def safe_name(name: str) -> str:
    r"""The name an upload is stored under: the last part of ``name``, cleaned, of a read type.

    NFC; the part after the last ``/`` or ``\``; control and format characters dropped; no
    leading dots or spaces, no trailing spaces; at most :data:`MAX_NAME_CHARS` characters (and
    :data:`MAX_NAME_BYTES` bytes), the extension kept.

    Raises:
        UploadRefusedError: nothing usable is left of the name (400), or the ingestion does
            not read files with its extension (415).
    """
    base = unicodedata.normalize("NFC", name).replace("\\", "/").rsplit("/", 1)[-1]
    kept = "".join(c for c in base if unicodedata.category(c) not in _DROPPED_CATEGORIES)
    kept = kept.strip().lstrip(". ")
    if not kept:
        raise UploadRefusedError(
            f"the file name {name[:200]!r} has nothing a stored file can be named after: "
            "rename the file (letters or digits, and an extension such as .pdf)"
        )
    extension = Path(kept).suffix.lower()
    if extension not in SUPPORTED_EXTENSIONS:
        kind = f"{extension} files" if extension else "files without an extension"
        raise UploadRefusedError(
            f"{kept[:200]}: the ingestion does not read {kind}; it reads "
            f"{', '.join(SUPPORTED_EXTENSIONS)}",
            status=415,
        )
    return _shortened(kept, Path(kept).suffix)


class _ContentCheck:
    """Whether the bytes are what the name's extension says, chunk by chunk as they arrive."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.extension = Path(name).suffix.lower()
        self.magic = _MAGIC.get(self.extension)
        self.head = b""
        self.text = codecs.getincrementaldecoder("utf-8")()

    def _not_binary_type(self) -> UploadRefusedError:
        if self.extension == ".pdf":
            why = "it is not a PDF: its bytes do not start with %PDF- as a PDF file's do"
        else:
            why = (
                f"it is not a {self.extension} file: a {self.extension} file is a ZIP archive, "
                "and its bytes do not start like one"
            )
        return UploadRefusedError(f"{self.name}: {why}", status=415)

    def _not_text(self, what: str) -> UploadRefusedError:
        return UploadRefusedError(
            f"{self.name}: {what}, not the UTF-8 text a {self.extension} file must hold: "
            "save it as UTF-8 text and upload it again",
            status=415,
        )

    def feed(self, chunk: bytes) -> None:
        """Check the next ``chunk``; refuse as soon as the bytes cannot be of the type."""
        if self.magic is not None:
            if len(self.head) < len(self.magic):
                self.head += chunk[: len(self.magic) - len(self.head)]
                if not self.magic.startswith(self.head):
                    raise self._not_binary_type()
            return
        if b"\0" in chunk:
            raise self._not_text("it holds binary data (a NUL byte)")
        try:
            self.text.decode(chunk)
        except UnicodeDecodeError:
            raise self._not_text("its bytes are not UTF-8") from None

    def finish(self) -> None:
        """Check what only the end tells: a binary file's start was whole, the text ended whole."""
        if self.magic is not None:
            if self.head != self.magic:
                raise self._not_binary_type()
            return
        try:
            self.text.decode(b"", final=True)
        except UnicodeDecodeError:
            raise self._not_text("its bytes are not UTF-8 (they end inside a character)") from None


def _too_large(limit: int) -> UploadRefusedError:
    return UploadRefusedError(
        f"the file is larger than {limit:,} bytes, the most this server accepts "
        "(setting upload_max_bytes)",
        status=413,
    )


def _storage_error(exc: OSError) -> UploadRefusedError:
    if exc.errno in _NO_SPACE:
        logger.error("no room left to store an upload: %s", exc)
        return UploadRefusedError("the server has no room left to store the file", status=507)
    logger.error("could not store an upload: %s", exc)
    reason = exc.strerror or "an error of its file system"
    return UploadRefusedError(f"the server could not store the file ({reason})", status=500)


def _place(temp: Path, folder: Path, subfolder: str, name: str) -> Path:
    """Rename ``temp`` (in ``folder``) to ``folder/subfolder/name``, following no link there.

    ``subfolder`` is opened without following a symbolic link (one planted there is refused);
    a link planted at ``name`` is replaced by the rename, never followed.
    """
    folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(subfolder, dir_fd=folder_fd)
        try:
            sub_fd = os.open(
                subfolder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder_fd
            )
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            logger.error("upload folder %s: %s is not a directory", folder, subfolder)
            raise UploadRefusedError(
                "the server could not store the file: its upload folder holds something "
                "other than a folder where the file's folder goes",
                status=500,
            ) from None
        try:
            os.replace(temp.name, name, src_dir_fd=folder_fd, dst_dir_fd=sub_fd)
        finally:
            os.close(sub_fd)
    finally:
        os.close(folder_fd)
    return folder / subfolder / name


class _PendingUpload:
    """An upload being received: counted, checked and hashed as it goes to a temporary file."""

    def __init__(self, folder: Path, name: str, limit: int, reservation: QuotaReservation) -> None:
        self.folder, self.name, self.limit = folder, name, limit
        self.reservation = reservation
        self.size = 0
        self.digest = hashlib.sha256()
        self.check = _ContentCheck(name)
        self.placed = False
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=_TEMP_PREFIX, suffix=".part", dir=folder)
        except OSError as exc:
            raise _storage_error(exc) from exc
        self.temp = Path(temp)
        self.file = os.fdopen(fd, "wb")

    def write(self, chunk: bytes) -> None:
        """Count, check, hash and write the next ``chunk``; refuse it past the limit, unwritten."""
        self.size += len(chunk)
        if self.size > self.limit:
            raise _too_large(self.limit)
        self.reservation.grow(self.size)
        self.check.feed(chunk)
        self.digest.update(chunk)
        try:
            self.file.write(chunk)
        except OSError as exc:
            raise _storage_error(exc) from exc

    def finish(self) -> StoredUpload:
        """Refuse an empty or truncated file, else move the file into place."""
        if self.size == 0:
            raise UploadRefusedError(f"{self.name} is empty: there is nothing in it to ingest")
        self.check.finish()
        sha256 = self.digest.hexdigest()
        try:
            self.file.close()
            path = _place(self.temp, self.folder, sha256[:HASH_DIGITS], self.name)
        except OSError as exc:
            raise _storage_error(exc) from exc
        self.placed = True
        return StoredUpload(path=path, name=self.name, bytes=self.size, sha256=sha256)

    def discard(self) -> None:
        """Remove the temporary file, unless it was moved into place; release the quota held."""
        try:
            self.file.close()
            if not self.placed:
                with contextlib.suppress(FileNotFoundError):
                    self.temp.unlink()
        finally:
            self.reservation.release()


def _checked_before_reading(
    name: str,
    settings: DeploymentSettings,
    declared_bytes: int | None = None,
    member: str | None = None,
) -> tuple[Path, str, QuotaReservation]:
    """The upload folder, the stored name and the quota held for the upload.

    After the checks made before any byte is read.
    """
    stored_name = safe_name(name)
    folder = upload_folder(settings, member)
    if declared_bytes is not None and declared_bytes > settings.upload_max_bytes:
        raise _too_large(settings.upload_max_bytes)
    reservation = QuotaReservation.take(folder, settings, declared_bytes or 1, member=member)
    return folder, stored_name, reservation


def kept_uploads(folder: Path, *, leave_out: str = "") -> tuple[int, int]:
    """Bytes and number of the uploads kept in ``folder`` (regular files, links not followed).

    ``leave_out``: a folder directly in ``folder`` not counted (the members' uploads, when
    the operator's own are counted). The temporary files of uploads being received are not
    counted: their :class:`QuotaReservation` is.
    """
    total = files = 0
    pending = [folder]
    while pending:
        current = pending.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            if current == folder and leave_out and entry.name == leave_out:
                continue
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False) and not entry.name.startswith(
                    _TEMP_PREFIX
                ):
                    total += entry.stat(follow_symlinks=False).st_size
                    files += 1
    return total, files


def stored_bytes(folder: Path, *, leave_out: str = "") -> int:
    """Bytes of the uploads kept in ``folder`` (:func:`kept_uploads`)."""
    return kept_uploads(folder, leave_out=leave_out)[0]


_QUOTA_LOCK = threading.Lock()
_HELD: dict[Path, list[int]] = {}
"""Per uploader's folder: the bytes and the files held by the uploads being received there."""


class QuotaReservation:
    """Bytes and a file of an uploader's quotas, held for one upload while it is received.

    Taken before the body is read (:meth:`take`, the request's ``Content-Length``, else one
    byte), grown as more bytes arrive than were declared (:meth:`grow`), and released when the
    upload is stored or refused (:meth:`release`). The check and the hold are one step under
    a lock, so that uploads arriving together cannot all pass a quota that has room for a few:
    each counts the bytes and files kept on disk and those the others hold.
    """

    def __init__(self, key: Path, settings: DeploymentSettings, member: str | None) -> None:
        self.key, self.settings, self.member = key, settings, member
        self.bytes = 0
        self.released = False

    @classmethod
    def take(
        cls, folder: Path, settings: DeploymentSettings, incoming: int, *, member: str | None
    ) -> QuotaReservation:
        """Hold ``incoming`` bytes and one file in ``folder``'s quotas, or refuse (413)."""
        reservation = cls(folder, settings, member)
        with _QUOTA_LOCK:
            held = _HELD.setdefault(folder, [0, 0])
            used, files = kept_uploads(folder, leave_out="" if member else MEMBERS_FOLDER)
            _check_quota(used + held[0], settings.upload_quota_bytes, incoming)
            _check_files(files + held[1], settings.upload_max_files)
            held[0] += incoming
            held[1] += 1
            reservation.bytes = incoming
        return reservation

    def grow(self, size: int) -> None:
        """Hold ``size`` bytes in all (more than declared arrived), or refuse (413)."""
        if size <= self.bytes:
            return
        with _QUOTA_LOCK:
            held = _HELD[self.key]
            used, _ = kept_uploads(self.key, leave_out="" if self.member else MEMBERS_FOLDER)
            _check_quota(used + held[0], self.settings.upload_quota_bytes, size - self.bytes)
            held[0] += size - self.bytes
            self.bytes = size

    def release(self) -> None:
        """Give back what is held (once): the upload is stored (and counted on disk) or gone."""
        with _QUOTA_LOCK:
            if self.released:
                return
            self.released = True
            held = _HELD[self.key]
            held[0] -= self.bytes
            held[1] -= 1
            if held == [0, 0]:
                del _HELD[self.key]


def _check_quota(used: int, quota: int, incoming: int) -> None:
    """Refuse an upload that would take its uploader's uploads past ``quota`` bytes (413).

    ``used``: the bytes kept and held by the uploads being received.
    """
    if used + incoming > quota:
        raise UploadRefusedError(
            f"the uploads kept already take {used:,} bytes of the {quota:,} allowed (setting "
            "upload_quota_bytes): remove some documents before uploading more",
            status=413,
        )


def _check_files(files: int, most: int) -> None:
    """Refuse an upload that would keep more than ``most`` files for its uploader (413)."""
    if files + 1 > most:
        raise UploadRefusedError(
            f"the uploads kept already number {files:,} files, the most allowed (setting "
            "upload_max_files): remove some documents before uploading more",
            status=413,
        )


def _begin(
    name: str,
    settings: DeploymentSettings,
    declared_bytes: int | None = None,
    member: str | None = None,
) -> _PendingUpload:
    """Check the upload, hold its quota and make its temporary file (see the module).

    Raises:
        UploadRefusedError: The checks made before any byte is read refuse it; nothing is
            then held.
    """
    folder, stored_name, reservation = _checked_before_reading(
        name, settings, declared_bytes, member
    )
    try:
        return _PendingUpload(folder, stored_name, settings.upload_max_bytes, reservation)
    except BaseException:
        reservation.release()
        raise


async def _begun(*args: Any) -> _PendingUpload:
    """:func:`_begin` in a worker thread; discarded there if the request is cancelled meanwhile.

    A cancelled ``await`` does not stop the thread: the upload it begins (its quota held, its
    temporary file made) is discarded once the thread is done, so that nothing stays held.
    """
    begun = asyncio.ensure_future(asyncio.to_thread(_begin, *args))
    try:
        return await asyncio.shield(begun)
    except asyncio.CancelledError:
        begun.add_done_callback(_discard_abandoned)
        raise


def _discard_abandoned(begun: asyncio.Future[_PendingUpload]) -> None:
    if not begun.cancelled() and begun.exception() is None:
        begun.result().discard()


def store_upload(
    name: str, body: bytes | Iterable[bytes], settings: DeploymentSettings
) -> StoredUpload:
    """Check and store one uploaded file (see the module).

    Args:
        name: The file's name as the client gave it: only its cleaned last part is kept.
        body: Its bytes, or an iterable of chunks, read only up to ``upload_max_bytes``.
        settings: The operator's settings: ``upload_dir``, ``ingest_root``, ``store_path``
            and ``upload_max_bytes``.

    Returns:
        Where the file lies, its stored name, its size and its SHA-256.

    Raises:
        UploadRefusedError: the file is refused (the message says why in one sentence, and
            ``status`` is the HTTP status to answer).
    """
    upload = _begin(name, settings)
    try:
        for chunk in [body] if isinstance(body, bytes) else body:
            upload.write(chunk)
        return upload.finish()
    finally:
        upload.discard()


async def receive_upload(
    name: str,
    chunks: AsyncIterable[bytes],
    settings: DeploymentSettings,
    *,
    declared_bytes: int | None = None,
    member: str | None = None,
) -> StoredUpload:
    """:func:`store_upload` for a request's stream, the file written from worker threads.

    ``declared_bytes`` (a request's ``Content-Length``) past ``upload_max_bytes`` is refused
    before any byte is read; without it, the bytes are counted as they arrive and reading
    stops at the limit. A ``member``'s upload goes to their own folder (``members/NAME``), and
    ``upload_quota_bytes`` counts their uploads alone.

    Raises:
        UploadRefusedError: as :func:`store_upload`.
    """
    upload = await _begun(name, settings, declared_bytes, member)
    try:
        async with asyncio.timeout(settings.upload_seconds):
            async for chunk in chunks:
                if chunk:
                    await asyncio.to_thread(upload.write, chunk)
        return await asyncio.to_thread(upload.finish)
    except TimeoutError:
        raise UploadRefusedError(
            f"{upload.name} did not arrive within {settings.upload_seconds:g} s (setting "
            "upload_seconds): nothing of it was kept",
            status=408,
        ) from None
    finally:
        await asyncio.to_thread(upload.discard)
