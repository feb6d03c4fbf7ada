"""Folders made once from a model and kept under the user's cache (converted GGUF, ONNX builds).

Two processes may want one at once (two ``crag`` commands on first use, or a run and the
generator's preparation started beside it, :mod:`crag.generator.prepare`): the first takes a
lock file beside the target (``filelock``: an ``flock`` the system drops if its holder dies),
the others wait for it and then find the target made, so a model is made once, not once per
process. The maker writes a folder of its own and moves it into place in one rename, so the
target is either absent or whole, even where the lock cannot be taken (a file system without
``flock``): then each makes its own and the one that finds the target already made uses it and
deletes its copy.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock

logger = logging.getLogger(__name__)

_lock = threading.Lock()


def cache_dir() -> Path:
    """Where made models are kept: ``models/`` in setting ``cache_dir`` (``~/.cache/crag``)."""
    from crag.settings.deployment import deployment_settings

    root = deployment_settings().cache_dir.strip()
    return Path(root).expanduser() / "models" if root else Path.home() / ".cache/crag/models"


def _publish(folder: Path, target: Path, marker: str) -> Path:
    """Rename the finished ``folder`` to ``target``, unless another process was first.

    Raises:
        ValueError: ``target`` exists but is not a finished folder, or the rename failed.
    """
    try:
        folder.rename(target)
    except OSError as exc:
        if not (target / marker).is_file():
            raise ValueError(f"cannot put the model at {target}: {exc.strerror or exc}") from exc
        logger.info("%s was made meanwhile by another process: using it", target)
    return target


def made_once(target: Path, marker: str, make: Callable[[Path], None]) -> Path:
    """``target``, made by ``make(folder)`` the first time (finished when it holds ``marker``).

    ``make`` writes into an empty folder of this process's own, renamed to ``target`` whole.

    Raises:
        ValueError: ``make`` raised it, or the folder cannot be written or put in place.
    """
    if (target / marker).is_file():
        return target
    with _lock, _other_processes_waiting(target):
        if (target / marker).is_file():
            return target
        own = target.with_name(f"{target.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            own.mkdir(parents=True)
            make(own)
            return _publish(own, target, marker)
        except OSError as exc:
            raise ValueError(f"cannot write the model to {own}: {exc}") from exc
        finally:
            shutil.rmtree(own, ignore_errors=True)  # gone if renamed; else a copy not needed


@contextlib.contextmanager
def _other_processes_waiting(target: Path) -> Iterator[None]:
    """Hold ``TARGET.lock`` while making ``target``: another process waits, then finds it made.

    Where the lock file cannot be made or locked (a read-only parent, a file system without
    locks), nothing is held: the rename in :func:`made_once` still keeps the target whole.
    """
    lock = FileLock(str(target.with_name(target.name + ".lock")))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except OSError as exc:
        logger.debug("making %s without a lock: %s", target, exc)
        yield
        return
    try:
        yield
    finally:
        lock.release()
