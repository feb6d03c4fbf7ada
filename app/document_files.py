"""The file behind a citation, where the server shares it: the chat page's document links.

A cited passage's ``source`` is the absolute path of the file it was read from (``path#lineN``
for a line of a JSON Lines file), ``wikipedia:Title`` for the bundled corpus, or what an inline
document was given (``inline:...``). :func:`served_file` gives the file only if its real path,
every symbolic link followed, is a regular file inside the upload folder
(:func:`crag.app.uploads.upload_folder`) or inside ``ingest_root`` when that is set: the files
the server's callers may upload or ingest anyway. Any other file stays unseen, whatever the
source names, and :func:`unserved_reason` says why in one sentence (the same one for a file
that is missing and one that is not shared: the answer tells nothing about other files).

How a file is answered (:func:`served_as`): a PDF inline, as ``application/pdf``; every other
type as an attachment under ``Content-Security-Policy: sandbox``, so that an uploaded HTML
file can never run in the server's origin; all with ``X-Content-Type-Options: nosniff``.

Pure logic: no Starlette here.
"""

from __future__ import annotations

import contextlib
import mimetypes
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from crag.app.uploads import UploadRefusedError, upload_folder
from crag.core.deployment import DeploymentSettings

__all__ = ["ServedAs", "served_as", "served_file", "shared_folders", "unserved_reason"]


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


def _shared(path: str, folders: list[Path]) -> Path | None:
    """``path``'s real path if it is absolute and names a regular file inside ``folders``."""
    if "\0" in path or not os.path.isabs(path):
        return None
    try:
        real = Path(os.path.realpath(path, strict=True))
        is_file = stat.S_ISREG(os.stat(real).st_mode)
    except (OSError, ValueError):  # missing, unreadable, a link loop
        return None
    if is_file and any(real.is_relative_to(folder) for folder in folders):
        return real
    return None


def served_file(source: str, settings: DeploymentSettings) -> Path | None:
    """The file a citation's ``source`` names, if the server shares it (see the module).

    ``source`` is tried as it is, then without its ``#...`` suffix (``path#line3``).

    Returns:
        The file's real path (every link followed), or ``None``.
    """
    folders = shared_folders(settings)
    candidates = [source]
    head, hash_sign, _ = source.rpartition("#")
    if hash_sign and head:
        candidates.append(head)
    for candidate in candidates:
        found = _shared(candidate, folders)
        if found is not None:
            return found
    return None


def unserved_reason(source: str) -> str:
    """Why the file of ``source`` is not served, in one sentence."""
    if source.startswith("wikipedia:"):
        return (
            "this document is a summary of the bundled Wikipedia corpus, not a file: the server "
            "has no file to show for it"
        )
    if not os.path.isabs(source.rpartition("#")[0] or source):
        return (
            "this document's source is not a file's path (it was sent as text): the server has "
            "no file to show for it"
        )
    return (
        "the server does not share this document's file: it serves only files in its upload "
        "folder or under its ingest_root"
    )


def served_as(path: Path) -> ServedAs:
    """How ``path`` is answered: a PDF inline, anything else an attachment in a sandbox."""
    if path.suffix.lower() == ".pdf":
        return ServedAs("application/pdf", "inline", {"X-Content-Type-Options": "nosniff"})
    guessed, _ = mimetypes.guess_type(path.name)
    return ServedAs(
        guessed or "application/octet-stream",
        "attachment",
        {"Content-Security-Policy": "sandbox", "X-Content-Type-Options": "nosniff"},
    )
