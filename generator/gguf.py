"""Turn a GGUF model file into a plain transformers folder, once, under the user's cache.

transformers reads GGUF files (``gguf_file=``, with the ``gguf`` package) by dequantising every
tensor, which takes seconds to minutes; the float weights are then saved as an ordinary folder
that reloads in well under a second. :class:`crag.generator.local.LocalChatModel` loads that folder.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_lock = threading.Lock()


def cache_dir() -> Path:
    """Where converted models are kept (``$CRAG_CACHE_DIR`` or ``~/.cache/crag``)."""
    root = os.environ.get("CRAG_CACHE_DIR") or Path.home() / ".cache" / "crag"
    return Path(root) / "models"


def converted_folder(gguf: Path) -> Path:
    """The cache folder of a GGUF file: its name and size, so a changed file converts anew."""
    return cache_dir() / f"{gguf.stem.lower()}-{gguf.stat().st_size}"


def ensure_converted(gguf: Path, target: Path | None = None) -> Path:
    """Return a transformers folder of the GGUF model ``gguf``, converting it the first time.

    Args:
        gguf: The ``.gguf`` file (a chat model with its tokenizer and chat template inside).
        target: Where the folder goes (default :func:`converted_folder`).

    Raises:
        ValueError: ``gguf`` is not a file, or transformers cannot read it.
    """
    if not gguf.is_file():
        raise ValueError(f"no GGUF model file at {gguf}")
    target = target or converted_folder(gguf)
    if (target / "config.json").is_file():
        return target
    with _lock:
        if (target / "config.json").is_file():
            return target
        from transformers import AutoModelForCausalLM, AutoTokenizer

        logger.info("converting %s to a transformers folder (once)", gguf.name)
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
        partial = target.with_name(target.name + ".partial")
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        partial.rename(target)
        return target
