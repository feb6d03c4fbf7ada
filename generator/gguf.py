"""Turn a GGUF model file into a plain transformers folder, once, under the user's cache.

transformers reads GGUF files (``gguf_file=``, with the ``gguf`` package) by dequantising every
tensor, which takes seconds to minutes; the float weights are then saved as an ordinary folder
that reloads in well under a second. :class:`crag.generator.local.LocalChatModel` loads that folder.

Two processes may convert at once (two ``crag`` commands on first use): each writes a folder of
its own beside the target and moves it into place in one rename, so the target is either absent
or whole; the one that finds it already made uses it and deletes its own copy.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_lock = threading.Lock()


def cache_dir() -> Path:
    """Where converted models are kept: ``models/`` in setting ``cache_dir`` (``~/.cache/crag``)."""
    from crag.settings.deployment import deployment_settings

    root = deployment_settings().cache_dir.strip()
    return Path(root).expanduser() / "models" if root else Path.home() / ".cache/crag/models"


def converted_folder(gguf: Path) -> Path:
    """The cache folder of a GGUF file: its name and size, so a changed file converts anew."""
    return cache_dir() / f"{gguf.stem.lower()}-{gguf.stat().st_size}"


def _is_complete(folder: Path) -> bool:
    """Whether ``folder`` is a finished conversion (it only ever appears whole, by a rename)."""
    return (folder / "config.json").is_file()


def _read_gguf(gguf: Path) -> tuple[Any, Any]:
    """The tokenizer and the dequantised float model of ``gguf``.

    Raises:
        ValueError: transformers cannot read it.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model: Any = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"transformers cannot read {gguf} as a GGUF model: {exc}") from exc
    # The weights are dequantised already; drop the quantiser so the folder saves and
    # reloads as a plain float model.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return tokenizer, model


def _publish(folder: Path, target: Path) -> Path:
    """Rename the finished ``folder`` to ``target``, unless another process was first.

    Raises:
        ValueError: ``target`` exists but is not a converted model, or the rename failed.
    """
    try:
        folder.rename(target)
    except OSError as exc:
        if not _is_complete(target):
            raise ValueError(
                f"cannot put the converted model at {target}: {exc.strerror or exc}"
            ) from exc
        logger.info("%s was converted meanwhile by another process: using it", target)
    return target


def ensure_converted(gguf: Path, target: Path | None = None) -> Path:
    """Return a transformers folder of the GGUF model ``gguf``, converting it the first time.

    Args:
        gguf: The ``.gguf`` file (a chat model with its tokenizer and chat template inside).
        target: Where the folder goes (default :func:`converted_folder`).

    Raises:
        ValueError: ``gguf`` is not a file, transformers cannot read it, or the folder cannot
            be written.
    """
    if not gguf.is_file():
        raise ValueError(f"no GGUF model file at {gguf}")
    target = target or converted_folder(gguf)
    if _is_complete(target):
        return target
    with _lock:
        if _is_complete(target):
            return target
        logger.info("converting %s to a transformers folder (once)", gguf.name)
        tokenizer, model = _read_gguf(gguf)
        # This process's own folder: another one converting at once writes to its own.
        own = target.with_name(f"{target.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            own.mkdir(parents=True)
            model.save_pretrained(own)
            tokenizer.save_pretrained(own)
            return _publish(own, target)
        except OSError as exc:
            raise ValueError(f"cannot write the converted model to {own}: {exc}") from exc
        finally:
            shutil.rmtree(own, ignore_errors=True)  # gone if renamed; else a copy not needed
