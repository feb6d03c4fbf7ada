"""Turn the ``generator`` setting into a LangChain chat model, once per process."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Literal

from langchain_core.language_models import BaseChatModel

from crag.generator.endpoint_config import EndpointConfig, endpoint_for_spec
from crag.generator.repetition import DEFAULT_NGRAM
from crag.settings.setting_checks import ENDPOINT_SPEC, generator_spec_problem

logger = logging.getLogger(__name__)


def load_chat_model(
    spec: str,
    max_new_tokens: int = 128,
    no_repeat_ngram_size: int = DEFAULT_NGRAM,
    endpoint: EndpointConfig | None = None,
    dtype: Literal["auto", "float32", "bfloat16"] = "auto",
    engine: Literal["onnxruntime", "torch"] | None = None,
) -> BaseChatModel:
    """Load the chat model named by ``spec`` (once per process for the same arguments).

    Args:
        spec: ``"smollm2"`` (shipped default), ``"endpoint"`` or ``"endpoint:MODEL"`` (the
            operator's OpenAI-compatible model server: :mod:`crag.generator.endpoint`),
            ``"local:/path"`` (a transformers folder with a
            chat template), ``"gguf:/path/model.gguf"`` (a GGUF chat model, converted once to
            a transformers folder under the cache: :mod:`crag.generator.gguf`) or
            ``"provider:model"`` for any LangChain chat model (``init_chat_model``; e.g.
            ``"openai:gpt-4o-mini"``, ``"ollama:llama3.1"``).
        max_new_tokens: Longest answer, in tokens.
        no_repeat_ngram_size: Local models: a reply never repeats an n-gram of its own tokens
            this long (:mod:`crag.generator.repetition`; 0: off). API models: not applied.
        endpoint: The model server of ``endpoint`` specs; default: the deployment settings
            (``CRAG_LLM_*``).
        dtype: Local models: their precision (:attr:`crag.generator.local.LocalChatModel.dtype`;
            the deployment setting ``generator_dtype``). API models: not applied.
        engine: Local models: what decodes a lone reply
            (:attr:`crag.generator.local.LocalChatModel.engine`; the deployment setting
            ``generator_engine``, which ``None`` reads). API models: not applied.

    Raises:
        ValueError: A spec of no known form.
        EndpointError: An ``endpoint`` spec without a server or model configured.
    """
    spec = spec.strip()
    problem = generator_spec_problem(spec)  # the check the settings make when they are built
    if problem is not None:
        raise ValueError(f"generator {spec!r} not understood: it {problem}")
    if spec == ENDPOINT_SPEC or spec.startswith(ENDPOINT_SPEC + ":"):
        config = endpoint_for_spec(spec, endpoint)
        return _endpoint_model(config, max_new_tokens)
    if engine is None:
        from crag.settings.deployment import deployment_settings

        engine = deployment_settings().generator_engine
    return _chat_model(spec, max_new_tokens, no_repeat_ngram_size, dtype, engine)


@functools.lru_cache(maxsize=8)
def _endpoint_model(config: EndpointConfig, max_new_tokens: int) -> BaseChatModel:
    """One chat model per endpoint, model and answer length."""
    from crag.generator.endpoint import EndpointChatModel

    logger.info("chat model %r on the model server %s", config.model, config.where)
    return EndpointChatModel.for_endpoint(config, max_new_tokens)


@functools.lru_cache(maxsize=4)
def _chat_model(
    spec: str,
    max_new_tokens: int,
    no_repeat_ngram_size: int,
    dtype: Literal["auto", "float32", "bfloat16"],
    engine: Literal["onnxruntime", "torch"],
) -> BaseChatModel:
    """A local model, or one ``init_chat_model`` makes (``provider:model``)."""
    from crag.generator.local import LocalChatModel

    folder = local_model_folder(spec)
    if folder is not None:
        return LocalChatModel(
            model_path=folder,
            max_new_tokens=max_new_tokens,
            no_repeat_ngram_size=no_repeat_ngram_size,
            dtype=dtype,
            engine=engine,
        )
    from langchain.chat_models import init_chat_model

    logger.info("generator %s via init_chat_model", spec)
    return init_chat_model(spec, temperature=0, max_tokens=max_new_tokens)


def local_model_folder(spec: str) -> str | None:
    """The transformers folder a local spec names (smollm2, local:, gguf:); None otherwise."""
    if spec in ("", "smollm2"):
        from crag.generator.smollm2 import ensure_smollm2

        return str(ensure_smollm2())
    if spec.startswith("local:"):
        return spec.removeprefix("local:")
    if spec.startswith("gguf:"):
        from crag.generator.gguf import ensure_converted

        return str(ensure_converted(Path(spec.removeprefix("gguf:")).expanduser()))
    return None


def preload_engine(spec: str, engine: Literal["onnxruntime", "torch"]) -> bool:
    """Open the onnxruntime session of ``spec``'s local model now; whether there was one to open.

    Only the session (onnxruntime and numpy; it lets go of the interpreter lock while it
    loads), never transformers: a thread importing transformers while another does breaks
    transformers' lazy imports ("cannot import name 'AutoModel'"). Only an ONNX model built
    already: a first use builds it when the run needs it.

    Raises:
        ValueError: onnxruntime cannot load the built model.
    """
    from crag.generator.onnx_build import MODEL_FILE, onnx_folder
    from crag.generator.onnx_decoding import open_decoder

    folder = built_model_folder(spec)
    if engine != "onnxruntime" or folder is None or not (folder / "config.json").is_file():
        return False
    model_file = onnx_folder(folder) / MODEL_FILE
    if not model_file.is_file():
        return False
    open_decoder(model_file)
    return True


def built_model_folder(spec: str) -> Path | None:
    """The transformers folder of a local spec, without converting anything; else None."""
    spec = spec.strip()
    if spec in ("", "smollm2"):
        from crag.generator.smollm2 import smollm2_folder

        return smollm2_folder()
    if spec.startswith("local:"):
        return Path(spec.removeprefix("local:")).expanduser()
    if spec.startswith("gguf:"):
        from crag.generator.gguf import converted_folder

        gguf = Path(spec.removeprefix("gguf:")).expanduser()
        return converted_folder(gguf) if gguf.is_file() else None
    return None
