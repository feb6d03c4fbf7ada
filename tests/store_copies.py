"""Stores the tests build once per session and hand out as copies.

Building a small store embeds every passage with the real embedder (seconds each time); several
modules want the same one. The first request builds it into a folder of this module's own, and
every request, the first included, gets a copy of that folder: a test that writes into its store
changes its copy alone, and no test ever opens the folder the copies come from.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

_built: dict[str, Path] = {}
_root: list[Path] = []


def _masters() -> Path:
    """The folder holding the built stores, removed when the process ends."""
    if not _root:
        folder = Path(tempfile.mkdtemp(prefix="crag-test-stores-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _root.append(folder)
    return _root[0]


def store_copy(path: Path, key: str, build: Callable[[Path], object]) -> Path:
    """A copy, at ``path``, of the store ``build`` writes; built the first time ``key`` is asked.

    ``key`` names what ``build`` builds: the same key must always mean the same store.
    """
    master = _built.get(key)
    if master is None:
        master = _masters() / key
        build(master)
        _built[key] = master
    shutil.copytree(master, path, dirs_exist_ok=True)
    return path
