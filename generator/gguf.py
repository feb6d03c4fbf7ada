"""Turn a GGUF model file into a plain transformers folder, once, under the user's cache.

transformers reads GGUF files (``gguf_file=``, with the ``gguf`` package) by dequantising every
tensor, which takes seconds to minutes; the float weights are then saved as an ordinary folder
that reloads in well under a second. :class:`crag.generator.local.LocalChatModel` loads that folder.
Made as :func:`crag.settings.model_cache.made_once` makes a folder: whole or not at all, also
when two processes convert at once.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from crag.settings.model_cache import cache_dir, made_once

__all__ = ["cache_dir", "converted_folder", "ensure_converted"]

logger = logging.getLogger(__name__)


def converted_folder(gguf: Path) -> Path:
    """The cache folder of a GGUF file: its name and size, so a changed file converts anew."""
    return cache_dir() / f"{gguf.stem.lower()}-{gguf.stat().st_size}"


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

    def convert(folder: Path) -> None:
        logger.info("converting %s to a transformers folder (once)", gguf.name)
        tokenizer, model = _read_gguf(gguf)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    return made_once(target or converted_folder(gguf), "config.json", convert)
