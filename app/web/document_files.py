"""The file behind a citation, where the server shares it: the chat page's document links.

A cited passage's ``source`` is, in a served run, the name of the file it was read from
(``upload:...`` or ``shared:...``, :mod:`crag.core.public_names`; ``#lineN`` for a line of a
JSON Lines file; an absolute path is read as well), ``wikipedia:Title`` for the bundled corpus,
or what an inline document was given (``inline:...``). :func:`served_file` gives the file only
if its real path, every symbolic link followed, is a regular file inside the upload folder
(:func:`crag.app.web.uploads.upload_folder`) or inside ``ingest_root`` when that is set: the files
the server's callers may upload or ingest anyway; and only a document file (a type crag
ingests, no dot name on its way down from that folder: never ``.env``, a database, a
checkpoint, an upload still arriving) whose document is still stored in a collection runs may
read (a removed document's file is no longer served). Any other file stays unseen, whatever the
source names, and :func:`unserved_reason` says why in one sentence (the same one for a file
that is missing and one that is not shared: the answer tells nothing about other files).

How a file is answered (:func:`served_as`): a PDF inline, as ``application/pdf``, in a sandbox
(:data:`PDF_POLICY`: an opaque origin, never the server's); every other type as an attachment
under ``Content-Security-Policy: sandbox; default-src 'none'`` (:data:`ATTACHMENT_POLICY`), so
that an uploaded HTML file can never run in the server's origin; all with
``X-Content-Type-Options: nosniff``.

Pure logic: no Starlette here.
"""

from __future__ import annotations

import contextlib
import logging
import mimetypes
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from crag.app.web.uploads import UploadRefusedError, upload_folder
from crag.core.public_names import SHARED_SCHEME, UPLOAD_SCHEME, ServedFolders, server_path
from crag.documents.loaders import SUPPORTED_EXTENSIONS
from crag.settings.deployment import DeploymentSettings

logger = logging.getLogger(__name__)

__all__ = [
    "ServedAs",
    "served_as",
    "served_file",
    "shared_folders",
    "still_stored",
    "unserved_reason",
]


@dataclass(frozen=True)
class ServedAs:
    """How a shared file is answered: its media type, inline or attachment, extra headers."""

    media_type: str
    disposition: str
    headers: dict[str, str] = field(default_factory=dict)


def shared_folders(settings: DeploymentSettings) -> list[Path]:
    """The folders whose files are served, real paths: the upload folder, ``ingest_root``.

    The upload folder is left out when the settings refuse every upload (``upload_dir``
    outside ``ingest_root``); ``ingest_root`` only when it is set.
    """
    folders: list[Path] = []
    with contextlib.suppress(UploadRefusedError):
        folders.append(upload_folder(settings))
    if settings.ingest_root.strip():
        folders.append(Path(settings.ingest_root).expanduser())
    return [Path(os.path.realpath(folder)) for folder in folders]


def _hidden_inside(real: Path, folder: Path) -> bool:
    """Whether any part of ``real`` below ``folder`` is a dot name (``.env``, ``.upload-*``)."""
    return any(part.startswith(".") for part in real.relative_to(folder).parts)


def _shared(path: str, folders: list[Path]) -> Path | None:
    """``path``'s real path if it is absolute and names a document file inside ``folders``.

    A document file: a regular file of a type crag ingests (never a database, a checkpoint,
    a log), with no dot name on its way down from the folder (never ``.env``, ``.crag/``, an
    upload still arriving).
    """
    if "\0" in path or not os.path.isabs(path):
        return None
    try:
        real = Path(os.path.realpath(path, strict=True))
        is_file = stat.S_ISREG(os.stat(real).st_mode)
    except (OSError, ValueError):  # missing, unreadable, a link loop
        return None
    if not is_file or real.suffix.lower() not in SUPPORTED_EXTENSIONS:
        return None
    for folder in folders:
        if real.is_relative_to(folder) and not _hidden_inside(real, folder):
            return real
    return None


def still_stored(source: str, settings: DeploymentSettings, member: str | None = None) -> bool:
    """Whether a document of ``source`` is still stored where the caller may read it.

    In a collection runs may read, and, for a ``member``, shared or their own (never another
    member's private document). A file whose document was removed (``crag remove``) is no
    longer served.
    """
    from crag.settings.scope_settings import readable_collections
    from crag.vectorstore.embeddings import locked_embeddings
    from crag.vectorstore.records import stored_records
    from crag.vectorstore.store import StoreError, open_store

    for name in readable_collections(settings.collection, settings.readable_collections):
        try:
            store = open_store(
                settings.store_path,
                name,
                locked_embeddings(settings.embedder),
                create=False,
                host=settings.chroma_host,
                port=settings.chroma_port,
                ssl=settings.chroma_ssl,
            )
            record = stored_records(store, [source]).get(source)
            if record is not None and (
                member is None
                or not record.metadata.get("private")
                or record.metadata.get("owner") == member
            ):
                return True
        except StoreError as exc:
            logger.info("cannot look up %r in collection %s: %s", source[:200], name, exc)
    return False


def served_file(
    source: str,
    settings: DeploymentSettings,
    is_stored: Callable[[str, DeploymentSettings, str | None], bool] = still_stored,
    member: str | None = None,
) -> Path | None:
    """The file a citation's ``source`` names, if the server shares it (see the module).

    ``source`` is tried as it is, then without its ``#...`` suffix (``path#line3``);
    ``is_stored`` says whether its document is still stored where ``member`` (``None``: an
    admin) may read it (default: the store is asked).

    Returns:
        The file's real path (every link followed), or ``None``.
    """
    folders = shared_folders(settings)
    named = ServedFolders.of(settings.upload_dir, settings.ingest_root, settings.store_path)
    source = server_path(source, named) or source  # a served run's name: upload:..., shared:...
    candidates = [source]
    head, hash_sign, _ = source.rpartition("#")
    if hash_sign and head:
        candidates.append(head)
    for candidate in candidates:
        found = _shared(candidate, folders)
        if found is not None:
            return found if is_stored(source, settings, member) else None
    return None


def unserved_reason(source: str) -> str:
    """Why the file of ``source`` is not served, in one sentence."""
    if source.startswith("wikipedia:"):
        return (
            "this document is a summary of the bundled Wikipedia corpus, not a file: the server "
            "has no file to show for it"
        )
    if not source.startswith((UPLOAD_SCHEME, SHARED_SCHEME)) and not os.path.isabs(
        source.rpartition("#")[0] or source
    ):
        return (
            "this document's source is not a file's path (it was sent as text): the server has "
            "no file to show for it"
        )
    return (
        "the server does not share this document's file: it serves only the stored documents' "
        "files in its upload folder or under its ingest_root"
    )


PDF_POLICY = "sandbox allow-scripts"
"""The ``Content-Security-Policy`` of a PDF shown inline: a sandbox, so that the document (and
anything a hostile PDF makes its viewer run) has an opaque origin, never the server's: no
cookie, no storage, no same-origin request, no form, popup or navigation of the page. Scripts
are allowed inside it because the browsers' viewers need them (pdf.js in Firefox, Safari's);
``allow-same-origin`` is never given, and ``default-src 'none'`` is left out, as it blanks
Chromium's viewer."""

ATTACHMENT_POLICY = "sandbox; default-src 'none'"
"""The ``Content-Security-Policy`` of every other file, sent as an attachment: should a browser
show it anyway (an uploaded HTML file), it runs nothing and loads nothing."""


def served_as(path: Path) -> ServedAs:
    """How ``path`` is answered: a PDF inline, anything else an attachment, all sandboxed."""
    if path.suffix.lower() == ".pdf":
        return ServedAs(
            "application/pdf",
            "inline",
            {"Content-Security-Policy": PDF_POLICY, "X-Content-Type-Options": "nosniff"},
        )
    guessed, _ = mimetypes.guess_type(path.name)
    return ServedAs(
        guessed or "application/octet-stream",
        "attachment",
        {"Content-Security-Policy": ATTACHMENT_POLICY, "X-Content-Type-Options": "nosniff"},
    )
