"""Folders made once from a model and kept under the user's cache (converted GGUF, ONNX builds).

Two processes may make one at once (two ``crag`` commands on first use): each writes a folder of
its own beside the target and moves it into place in one rename, so the target is either absent
or whole; the one that finds it already made uses it and deletes its own copy.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

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
    with _lock:
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
