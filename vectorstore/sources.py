"""How the store names its documents' sources and writers (no store code: cheap to import).

A source has one spelling (:func:`normalise_source`, :func:`normalise_path`), given at every
door (``crag ingest``, the Python API, the served ``ingest`` graph, ``crag remove``): else a
served run could store ``wikipedia:Pelé`` in another Unicode form, or ``/srv/docs/./a.txt``,
beside the operator's document, and be cited as if it were the operator's.

A name with no file behind it (``wikipedia:Pelé``, ``Mona Lisa``) is text: its Unicode forms
and spaces are one name. A path is a file's name, and the file system decides what it names:
on Linux ``café.md`` composed (NFC) and decomposed (NFD) are two files, and so are ``a b.md``
and ``a  b.md``. A path keeps its characters; only ``.``, ``..`` and repeated slashes go. Two
paths that differ only in such characters are look-alikes (:func:`lookalike_key`): different
documents, shown distinguishably (:func:`crag.app.cli.terminal_text.terminal_text`).
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

REPLACE_SETTING = "setting ingest_run_replace, environment variable CRAG_INGEST_RUN_REPLACE"
"""The operator's setting that says what served runs may replace and remove."""

SOURCE_PREFIX = "wikipedia:"
"""Source of a bundled Wikipedia summary: this prefix and the page title."""

OPERATOR = "operator"
"""The ``writer`` of documents stored by the operator (CLI, Python API, bundled corpus)."""
SERVED = "served"
"""The ``writer`` of documents stored by runs of the served ``ingest`` graph."""


RUN_REPLACE = ("none", "served", "all")
"""What runs of the served ``ingest`` graph may replace or remove (deployment setting
``ingest_run_replace``): nothing already stored, what served runs stored, or anything."""


@dataclass(frozen=True)
class Writer:
    """Who is writing, recorded on every chunk it writes (metadata ``writer``).

    Attributes:
        name: :data:`OPERATOR` or :data:`SERVED`.
        may_replace: The writers whose documents it may replace or remove; ``None``: anyone's
            (the operator, or served runs under ``ingest_run_replace="all"``).
    """

    name: str
    may_replace: frozenset[str] | None = None
    unlocked: bool = False
    """Writing to a store no lock guards across processes (a Chroma server): see
    :func:`unlocked_writer`."""
    owner: str = ""
    """The member whose private documents these are (a member's served run); empty: shared."""

    def refuses(self, stored_by: str, stored_owner: str) -> bool:
        """Whether a document ``stored_by`` wrote, private to ``stored_owner``, is out of reach.

        ``stored_owner`` is :func:`owner_of` the document's chunks (empty: shared). A served
        run never changes a document that is not its caller's, whatever
        ``ingest_run_replace`` says: a member's run only that member's own documents, an
        admin's (shared) run only shared ones. Else a member could relabel another's file as
        their own, or hide a shared one from everyone by taking it private.
        """
        if not self.owns(stored_owner):
            return True
        return self.may_replace is not None and stored_by not in self.may_replace

    def owns(self, stored_owner: str) -> bool:
        """Whether a document private to ``stored_owner`` (empty: shared) is this writer's kind.

        The operator may change anything; a served run only what its own caller owns.
        """
        return self.name == OPERATOR or stored_owner == self.owner


OPERATOR_WRITER = Writer(OPERATOR)
"""The operator: may replace and remove any document."""

_RUN_MAY_REPLACE: dict[str, frozenset[str] | None] = {
    "none": frozenset(),
    "served": frozenset({SERVED}),
    "all": None,
}


def served_writer(run_replace: str, owner: str = "") -> Writer:
    """A run of the served ``ingest`` graph; the operator decides what it may replace.

    Args:
        run_replace: One of :data:`RUN_REPLACE`: ``"none"`` (add new documents only),
            ``"served"`` (also replace and remove what served runs stored, never the
            operator's) or ``"all"`` (replace and remove anything).
        owner: The member who started the run: what it stores is theirs alone to search.

    Raises:
        ValueError: ``run_replace`` is not one of :data:`RUN_REPLACE`.
    """
    if run_replace not in _RUN_MAY_REPLACE:
        listed = ", ".join(repr(choice) for choice in RUN_REPLACE)
        raise ValueError(f"run_replace must be one of {listed}, not {run_replace!r}")
    return Writer(SERVED, may_replace=_RUN_MAY_REPLACE[run_replace], owner=owner)


def unlocked_writer(writer: Writer) -> Writer:
    """``writer`` on a store no lock guards across processes: a served run may only add.

    On a Chroma server the check "may this run replace that document?" and the write are two
    requests, and nothing stops another process (``crag ingest``, another server) writing the
    same source between them; so a served run replaces, removes and relabels nothing there,
    whatever ``ingest_run_replace`` says, and each new document is looked up once more just
    before each batch of its chunks is written. The operator is returned as it is.
    """
    if writer.name == OPERATOR:
        return writer
    return Writer(writer.name, may_replace=frozenset(), unlocked=True, owner=writer.owner)


def writer_of(metadata: Mapping[str, Any]) -> str:
    """Who stored a chunk; chunks older than the ``writer`` field are the operator's."""
    value = metadata.get("writer")
    return value if isinstance(value, str) and value else OPERATOR


def owner_of(metadata: Mapping[str, Any]) -> str:
    """The member a chunk is private to (metadata ``owner`` with ``private``); empty: shared."""
    owner = metadata.get("owner")
    return owner if metadata.get("private") is True and isinstance(owner, str) else ""


_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u2060\ufeff"))
"""Zero-width space, word joiner, byte order mark: never part of a name, only of a look-alike."""


def normalise_name(text: str) -> str:
    r"""A source name as text: Unicode NFC, every run of whitespace one space, trimmed.

    ``wikipedia:Pele\u0301`` (decomposed) and ``wikipedia:Pelé`` are one name, and so are
    ``Mona\u00a0Lisa`` (a non-breaking space) and ``Mona Lisa``; zero-width spaces, word
    joiners and byte order marks are dropped. Python's ``str.split`` splits on every Unicode
    space (no-break, en, em, ideographic...).
    """
    return " ".join(unicodedata.normalize("NFC", text).translate(_INVISIBLE).split())


def _lexical_path(path: str) -> str:
    """An absolute path with ``.``, ``..`` and repeated slashes collapsed, by its text alone."""
    normal = os.path.normpath(path)
    # POSIX keeps a leading "//" (it may mean something to some systems; not to Linux)
    return "/" + normal.lstrip("/") if normal.startswith("//") else normal


def normalise_source(source: str) -> str:
    """The one spelling of a source given as text (an inline document's, a name to remove).

    An absolute path keeps its characters and loses only its ``.``, ``..`` and repeated
    slashes (``/srv/docs/./a.txt``, ``/srv//docs/a.txt``, ``/srv/docs/../docs/a.txt`` are
    ``/srv/docs/a.txt``), by the text alone: nothing on disk is looked at. Any other name is
    :func:`normalise_name`'s (NFC, whitespace). Idempotent.
    """
    if source.startswith("/"):
        return _lexical_path(source)
    name = normalise_name(source)
    return _lexical_path(name) if name.startswith("/") else name


def lookalike_key(source: str) -> str:
    r"""What ``source`` looks like: equal for names a reader cannot tell apart.

    :func:`normalise_name` applied to paths too, so ``/docs/café.md`` in NFC and in NFD
    (``/docs/cafe\u0301.md``) have one key, though they name two files. Used to say "you may
    mean that one", never to decide which document a name is.
    """
    name = normalise_name(source)
    return _lexical_path(name) if name.startswith("/") else name


def normalise_path(path: str | os.PathLike[str]) -> str:
    """The source of a file named by ``path``: absolute, ``.`` and repeated slashes dropped.

    ``..`` is collapsed by the text (``docs/../docs/a.txt`` is ``docs/a.txt``) when that names
    the same file the system opens; when it does not (a symbolic link to a directory before
    the ``..``), the real path is taken. Other symbolic links are kept as named, as for the
    ``folders`` of scoped search (:func:`crag.settings.scope_settings.normal_folder`). The name's
    characters are kept as they are: on Linux ``Pelé.txt`` in NFC and in NFD are two files.
    """
    given = os.path.expanduser(os.fspath(path))
    lexical = _lexical_path(os.path.abspath(given))
    if ".." not in PurePath(given).parts:
        return lexical
    try:
        physical = os.path.realpath(given)
    except ValueError:
        return lexical  # a NUL character: the loader says so, naming the path
    try:
        same = os.path.samefile(lexical, physical)
    except (OSError, ValueError):
        same = False
    return lexical if same else physical
