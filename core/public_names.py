"""The names a served run gives the server's files: never the server's own folders.

A stored chunk's ``source`` is the absolute path of its file (``crag ingest`` and the Python
API are the operator's, on the operator's machine, and show it as it is). A caller of the
served graphs sees the server's files by names instead, so that no reply, source, citation or
report tells a caller where the server keeps its data:

* ``upload:REL`` for a file in the chat page's upload folder (``REL`` below that folder, a
  member's ``members/NAME/...`` included);
* ``shared:REL`` for a file under the operator's ``ingest_root``;
* the file's name alone for any other file (the operator's documents stored from elsewhere,
  which the server never serves), with a JSON Lines file's ``#lineN`` kept.

A member's inline documents are stored under ``member:NAME/`` and the source they were sent
with (:func:`member_source`): no member's name can meet another's, or the operator's, so
none learns what another stored by being refused, and the same text sent by two members is
two documents, each its sender's. A member sees their own without the prefix.

Sources that are not paths (``wikipedia:Title``, ``inline:...``, a web page's URL) are
names already and stay as they are. :func:`server_path` reads a ``upload:`` or ``shared:``
name back into the path it stands for (what the served ingest graph reads, and what the file
route serves), never outside its folder.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "MEMBERS_FOLDER",
    "MEMBER_SCHEME",
    "SHARED_SCHEME",
    "UPLOAD_SCHEME",
    "ServedFolders",
    "member_source",
    "public_name",
    "public_text",
    "server_path",
    "uploads_folder",
]

UPLOAD_SCHEME = "upload:"
"""The name of a file in the upload folder: ``upload:`` and its path below that folder."""
SHARED_SCHEME = "shared:"
"""The name of a file under ``ingest_root``: ``shared:`` and its path below that folder."""

MEMBER_SCHEME = "member:"
"""A member's inline document: ``member:NAME/`` and the source it was sent with."""

_LINE = re.compile(r"#line\d+$")

MEMBERS_FOLDER = "members"
"""The part of the upload folder that holds each member's own uploads (``members/NAME``)."""


def uploads_folder(
    upload_dir: str, ingest_root: str, store_path: str, *, member: str | None = None
) -> Path:
    """Where the chat page keeps uploads, absolute, links resolved (setting ``upload_dir``).

    ``upload_dir``; else ``uploads`` in ``ingest_root`` when that is set; else ``uploads``
    beside the store (``.crag/uploads`` by default). A member's uploads go to
    ``members/NAME`` in it. The served ingest graph reads files by path only there when
    ``ingest_root`` is unset.
    """
    if upload_dir.strip():
        folder = Path(upload_dir).expanduser().resolve()
    elif ingest_root.strip():
        folder = Path(ingest_root).expanduser().resolve() / "uploads"
    else:
        folder = (Path(store_path).expanduser().parent / "uploads").resolve()
    return folder / MEMBERS_FOLDER / member if member else folder


def _spellings(folder: Path) -> tuple[Path, ...]:
    """A folder as named (absolute) and as its real path: stored sources use either."""
    named = Path(os.path.abspath(os.path.expanduser(folder)))
    real = Path(os.path.realpath(named))
    return (named,) if real == named else (named, real)


@dataclass(frozen=True)
class ServedFolders:
    """The folders whose files a served run names by ``upload:`` and ``shared:``."""

    uploads: Path
    root: Path | None

    @classmethod
    def of(cls, upload_dir: str, ingest_root: str, store_path: str) -> ServedFolders:
        """The folders of these deployment settings (``upload_dir``, ``ingest_root``...)."""
        root = Path(ingest_root).expanduser().resolve() if ingest_root.strip() else None
        return cls(uploads_folder(upload_dir, ingest_root, store_path), root)

    def schemes(self) -> list[tuple[str, Path]]:
        """Each scheme with its folder, the upload folder first (it may lie in the root)."""
        found = [(UPLOAD_SCHEME, self.uploads)]
        if self.root is not None:
            found.append((SHARED_SCHEME, self.root))
        return found


def member_source(source: str, member: str) -> str:
    """Where ``member``'s inline document sent as ``source`` is stored (see the module)."""
    return f"{MEMBER_SCHEME}{member}/{source}"


def public_name(source: str, folders: ServedFolders, member: str | None = None) -> str:
    """What a served run shows for ``source`` (see the module); not a path: unchanged.

    ``member``'s own inline documents show the source they were sent with.
    """
    own = member_source("", member) if member else None
    if own is not None and source.startswith(own):
        return source[len(own) :]
    if not source.startswith("/"):
        return source
    line = _LINE.search(source)
    path = source[: line.start()] if line else source
    suffix = line.group() if line else ""
    for scheme, folder in folders.schemes():
        for spelling in _spellings(folder):
            if Path(path).is_relative_to(spelling) and Path(path) != spelling:
                return scheme + Path(path).relative_to(spelling).as_posix() + suffix
    return Path(path).name + suffix


def server_path(name: str, folders: ServedFolders) -> str | None:
    """The path a ``upload:`` or ``shared:`` name stands for; ``None`` for any other name.

    The part after the scheme is a relative path; one that leaves its folder (``..``, an
    absolute part) stands for nothing and is ``None`` too.
    """
    for scheme, folder in folders.schemes():
        if not name.startswith(scheme):
            continue
        line = _LINE.search(name)
        relative = name[len(scheme) : line.start() if line else None]
        parts = Path(relative).parts
        if not parts or relative.startswith("/") or ".." in parts or "\0" in relative:
            return None
        return str(folder / relative) + (line.group() if line else "")
    return None


def public_text(text: str, folders: ServedFolders) -> str:
    """``text`` (an error sentence, a note) with each path in the folders given its name.

    ``cannot read /srv/crag/.crag/uploads/ab/x.pdf: ...`` reads ``cannot read upload:ab/x.pdf:
    ...``; the folders' own paths, named alone, read as the scheme (``upload:``).
    """
    spellings = [
        (str(spelling), scheme)
        for scheme, folder in folders.schemes()
        for spelling in _spellings(folder)
    ]
    for prefix, scheme in sorted(spellings, key=lambda item: -len(item[0])):
        text = text.replace(prefix + "/", scheme).replace(prefix, scheme)
    return text
