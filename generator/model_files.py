"""A transformers model folder's tokenizer and configurations, read without importing torch.

``AutoTokenizer`` and ``AutoConfig`` import transformers' model registry, which imports torch:
about 2.5 s of a cold ``crag ask`` on two cores, for a generator that onnxruntime runs without
torch. A folder whose ``tokenizer_config.json`` names ``TokenizersBackend`` (SmolLM2's, and
what ``AutoTokenizer`` would build for it) gets that class directly; ``config.json`` is read as
JSON (only its position limits are used); the generation configuration is transformers' own
class, which does not need torch. Any other tokenizer class goes through ``AutoTokenizer``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

DIRECT_TOKENIZER = "TokenizersBackend"
"""The tokenizer class loaded without ``AutoTokenizer`` (``tokenizers``' own file, wrapped)."""


def _json(path: Path) -> dict[str, Any]:
    """A JSON object file; an empty dict when it is absent or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


def load_tokenizer(path: Path) -> Any:
    """The folder's tokenizer, as ``AutoTokenizer.from_pretrained(path)`` gives it."""
    if _json(path / "tokenizer_config.json").get("tokenizer_class") == DIRECT_TOKENIZER:
        from transformers.tokenization_utils_tokenizers import TokenizersBackend

        return TokenizersBackend.from_pretrained(path)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def model_config(path: Path) -> SimpleNamespace:
    """``config.json``'s fields as attributes (what :func:`model_context_length` reads).

    Raises:
        ValueError: The file is not JSON.
    """
    return SimpleNamespace(**_json(path / "config.json"))


def generation_config(path: Path) -> Any:
    """The folder's ``GenerationConfig``: its ``generation_config.json``, else config.json's."""
    from transformers.generation.configuration_utils import GenerationConfig

    if (path / "generation_config.json").is_file():
        return GenerationConfig.from_pretrained(path)
    from transformers import AutoConfig  # a rare folder: the model registry, torch and all

    return GenerationConfig.from_model_config(AutoConfig.from_pretrained(path))
