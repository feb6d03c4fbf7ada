"""Turn the ``generator`` setting into a LangChain chat model, once per process."""

from __future__ import annotations

import functools
import logging

from langchain_core.language_models import BaseChatModel

from crag.core.setting_checks import generator_spec_problem
from crag.generator.repetition import DEFAULT_NGRAM

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=4)
def load_chat_model(
    spec: str, max_new_tokens: int = 128, no_repeat_ngram_size: int = DEFAULT_NGRAM
) -> BaseChatModel:
    """Load the chat model named by ``spec``.

    Args:
        spec: ``"smollm2"`` (shipped default), ``"local:/path"`` (a transformers folder with a
            chat template), ``"gguf:/path/model.gguf"`` (a GGUF chat model, converted once to
            a transformers folder under the cache: :mod:`crag.generator.gguf`) or
            ``"provider:model"`` for any LangChain chat model (``init_chat_model``; e.g.
            ``"openai:gpt-4o-mini"``, ``"ollama:llama3.1"``).
        max_new_tokens: Longest answer, in tokens.
        no_repeat_ngram_size: Local models: a reply never repeats an n-gram of its own tokens
            this long (:mod:`crag.generator.repetition`; 0: off). API models: not applied.
    """
    from crag.generator.local import LocalChatModel

    spec = spec.strip()
    problem = generator_spec_problem(spec)  # the check the settings make when they are built
    if problem is not None:
        raise ValueError(f"generator {spec!r} not understood: it {problem}")
    folder = _local_model_folder(spec)
    if folder is not None:
        return LocalChatModel(
            model_path=folder,
            max_new_tokens=max_new_tokens,
            no_repeat_ngram_size=no_repeat_ngram_size,
        )
    from langchain.chat_models import init_chat_model

    logger.info("generator %s via init_chat_model", spec)
    return init_chat_model(spec, temperature=0, max_tokens=max_new_tokens)


def _local_model_folder(spec: str) -> str | None:
    """The transformers folder a local spec names (smollm2, local:, gguf:); None otherwise."""
    if spec in ("", "smollm2"):
        from crag.generator.smollm2 import ensure_smollm2

        return str(ensure_smollm2())
    if spec.startswith("local:"):
        return spec.removeprefix("local:")
    if spec.startswith("gguf:"):
        from pathlib import Path

        from crag.generator.gguf import ensure_converted

        return str(ensure_converted(Path(spec.removeprefix("gguf:")).expanduser()))
    return None
