"""A transformers model folder's tokenizer and configurations, read without importing torch.

``AutoTokenizer`` and ``AutoConfig`` import transformers' model registry, which imports torch:
about 2.5 s of a cold ``crag ask`` on two cores, for a generator that onnxruntime runs without
torch. A folder whose ``tokenizer_config.json`` names ``TokenizersBackend`` (SmolLM2's, and
what ``AutoTokenizer`` would build for it) gets that class directly; ``config.json`` and
``generation_config.json`` are read as JSON (only the position limits and the end-of-sequence
ids are used). Any other tokenizer class goes through ``AutoTokenizer``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

DIRECT_TOKENIZER = "TokenizersBackend"
"""The tokenizer class loaded without ``AutoTokenizer`` (``tokenizers``' own file, wrapped)."""


def json_object(path: Path) -> dict[str, Any]:
    """A JSON object file; an empty dict when it is absent or not an object.

    Raises:
        OSError: The file is there but cannot be read.
        ValueError: It is not JSON.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


def load_tokenizer(path: Path) -> Any:
    """The folder's tokenizer, as ``AutoTokenizer.from_pretrained(path)`` gives it."""
    if json_object(path / "tokenizer_config.json").get("tokenizer_class") == DIRECT_TOKENIZER:
        from transformers.tokenization_utils_tokenizers import TokenizersBackend

        return TokenizersBackend.from_pretrained(path)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def model_config(path: Path) -> SimpleNamespace:
    """``config.json``'s fields as attributes (what :func:`model_context_length` reads).

    Raises:
        ValueError: The file is not JSON.
    """
    return SimpleNamespace(**json_object(path / "config.json"))


def generation_eos_token_id(path: Path) -> Any:
    """The end-of-sequence id (or ids) ``GenerationConfig.from_pretrained(path)`` would give.

    ``generation_config.json`` is read as JSON (its ``eos_token_id`` is taken as it is, as
    transformers takes it); a folder without one gets transformers' config from ``config.json``.
    """
    if (path / "generation_config.json").is_file():
        return json_object(path / "generation_config.json").get("eos_token_id")
    from transformers import AutoConfig  # a rare folder: the model registry, torch and all
    from transformers.generation.configuration_utils import GenerationConfig

    return GenerationConfig.from_model_config(AutoConfig.from_pretrained(path)).eos_token_id
