"""What a scoped search may name: tags, a folder, file types, and the collections it may read.

Checked here, with the settings, so that a bad tag or a collection the operator does not allow
is refused when the settings are built
(:meth:`crag.settings.run_settings.RunSettings.check_together`), and by the same code that checks
the tags given at ingestion (:mod:`crag.vectorstore.scope`). Each check raises ``ValueError``
with a message naming the value; the settings turn it into an
:class:`~crag.settings.setting_checks.InvalidSettingError`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from crag.core.public_names import SHARED_SCHEME, UPLOAD_SCHEME

MAX_TAG_CHARS = 64
"""Longest tag, in characters."""
MAX_TAGS = 32
"""Most tags one ingestion gives its documents, or one run searches for."""
MAX_FILE_TYPES = 32
"""Most file types one run searches for."""

SERVED_SCHEMES = (UPLOAD_SCHEME, SHARED_SCHEME)
"""How a served run names a folder of the server's (``shared:docs``): never its path."""

_FILE_TYPE = re.compile(r"[a-z0-9][a-z0-9_+-]{0,15}")


def check_tags(tags: Iterable[str], what: str = "tags") -> list[str]:
    """``tags`` stripped, repeats dropped, in order; each checked.

    A tag is case-sensitive text of 1 to :data:`MAX_TAG_CHARS` printable characters without a
    comma (a comma separates tags on the command line).

    Raises:
        ValueError: a tag is empty, too long, has a comma or a character that is not printable,
            or there are more than :data:`MAX_TAGS`; the message starts with ``what``.
    """
    checked: list[str] = []
    for raw in tags:
        if not isinstance(raw, str):
            raise ValueError(f"{what}: a tag must be a string, not {type(raw).__name__}")
        tag = raw.strip()
        if not tag:
            raise ValueError(f"{what}: a tag may not be empty")
        if len(tag) > MAX_TAG_CHARS:
            raise ValueError(
                f"{what}: tag {tag[:20]!r}... is {len(tag)} characters long; the limit is "
                f"{MAX_TAG_CHARS}"
            )
        if "," in tag or not tag.isprintable():
            raise ValueError(
                f"{what}: tag {tag!r} may hold printable characters only, and no comma"
            )
        if tag not in checked:
            checked.append(tag)
    if len(checked) > MAX_TAGS:
        raise ValueError(f"{what}: {len(checked)} tags given; the limit is {MAX_TAGS}")
    return checked


def normal_folder(folder: str, what: str = "scope_folder") -> str:
    """An absolute folder path: ``~`` expanded, ``.``/``..`` resolved, no trailing slash.

    A served run's name of a server folder (``shared:docs``, ``upload:...``) stays a name,
    without its trailing slash; the retrieve node reads it back into its path.

    Symbolic links are not followed: stored documents record the paths they were ingested
    from. Empty stays empty (no folder scope).

    Raises:
        ValueError: the path has a NUL character.
    """
    if not folder.strip():
        return ""
    if "\0" in folder:
        raise ValueError(f"{what}: a path may not hold a NUL character")
    if folder.strip().startswith(SERVED_SCHEMES):  # a served run's name: read back by retrieve
        return folder.strip().rstrip("/")
    return os.path.abspath(os.path.expanduser(folder.strip()))


def check_served_folder(folder: str, what: str = "scope_folder") -> None:
    """Refuse a folder a served run gives unless it is absolute, or a name (``shared:docs``).

    A served run cannot name the caller's working directory or home: the server's would be
    silently used instead (and finding it is a blocking ``os.getcwd`` in the server's event
    loop). Command-line and Python runs resolve a relative folder as :func:`normal_folder` says.

    Raises:
        ValueError: ``folder`` is relative (``docs``, ``.``, ``~/docs``).
    """
    stripped = folder.strip()
    if stripped and not os.path.isabs(stripped) and not stripped.startswith(SERVED_SCHEMES):
        raise ValueError(
            f"{what}: a served run must name an absolute folder, not {stripped!r}: the server "
            "cannot know which directory it is relative to"
        )


def normal_file_types(file_types: Iterable[str], what: str = "scope_file_types") -> list[str]:
    """File types in lower case without a leading dot (``".PDF"``: ``"pdf"``), checked.

    Raises:
        ValueError: a type is not 1-16 letters, digits, ``_``, ``+`` or ``-``, or there are
            more than :data:`MAX_FILE_TYPES`.
    """
    checked: list[str] = []
    for raw in file_types:
        kind = raw.strip().lower().removeprefix(".")
        if not _FILE_TYPE.fullmatch(kind):
            raise ValueError(
                f"{what}: {raw!r} is not a file type (an extension such as 'pdf' or 'md', or "
                "'wikipedia' or 'inline')"
            )
        if kind not in checked:
            checked.append(kind)
    if len(checked) > MAX_FILE_TYPES:
        raise ValueError(f"{what}: {len(checked)} file types given; the limit is {MAX_FILE_TYPES}")
    return checked


def readable_collections(collection: str, readable: str) -> list[str]:
    """The collections a run may search: ``collection`` first, then the operator's list.

    ``readable`` is the deployment setting ``readable_collections``: comma-separated names.
    """
    names = [collection.strip(), *(name.strip() for name in readable.split(","))]
    return list(dict.fromkeys(name for name in names if name))


def searched_collection(collection: str, readable: str, wanted: str) -> str:
    """The collection a run searches: ``wanted``, or ``collection`` when it is empty.

    Raises:
        ValueError: ``wanted`` is not one of :func:`readable_collections`.
    """
    name = wanted.strip()
    if not name:
        return collection
    allowed = readable_collections(collection, readable)
    if name not in allowed:
        raise ValueError(
            f"setting search_collection: collection {name!r} is not readable on this server; "
            f"readable: {', '.join(allowed)}"
        )
    return name
