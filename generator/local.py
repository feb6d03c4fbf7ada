"""A LangChain chat model over a local transformers causal LM.

Why not ``langchain_huggingface.ChatHuggingFace`` over ``HuggingFacePipeline``: with a local
pipeline it ignores the ``pipeline_kwargs`` given at construction (answers come back with the
prompt prepended and no token limit) and its async path raises ``NotImplementedError``. This
class is a small, complete ``BaseChatModel``: chat template, greedy decoding, a token limit,
token streaming (so LangGraph's ``"messages"`` stream mode works) and a lock so that one model
instance is shared safely by concurrent runs. When the run it works for is cancelled
(:mod:`crag.core.cancellation`), generation stops at the next token and raises
``RunCancelledError``, so the model and its lock are free again at once.

A prompt never runs past the model's context: callers fit what they send (the generate node
counts its knowledge with this model's tokenizer against :attr:`LocalChatModel.context_length`),
and a prompt still too long loses its middle tokens, keeping the instructions at its start and
the question at its end.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import ConfigDict, PrivateAttr

from crag.core.cancellation import CancelToken, current_token, holding
from crag.core.devices import default_device
from crag.generator.batching import GenerationBatcher, GenerationRequest
from crag.generator.chat_tokenizer import ChatTokenizer, chat_tokenizer_for
from crag.generator.model_files import generation_eos_token_id, load_tokenizer, model_config
from crag.generator.onnx_decoding import (
    DecodingRules,
    OnnxDecoder,
    onnxruntime_applies,
    open_decoder,
)
from crag.generator.repetition import DEFAULT_NGRAM, ReplyNGramBlocker
from crag.generator.step_decoding import (
    StepDecoder,
    end_token_ids,
    generation_end_ids,
    stop_when_cancelled,
)
from crag.generator.thread_choice import ThreadChoice
from crag.generator.word_streamer import WordStreamer

logger = logging.getLogger(__name__)

_ROLES = {"system": "system", "human": "user", "ai": "assistant"}

_NO_LIMIT = 1_000_000
"""A tokenizer's ``model_max_length`` at or above this is transformers' "no limit" value."""


def model_context_length(config: Any, tokenizer: Any) -> int | None:
    """The most tokens (prompt and reply) the model attends to: its position limit, if known."""
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    value = getattr(tokenizer, "model_max_length", None)
    return value if isinstance(value, int) and 0 < value < _NO_LIMIT else None


def keep_ends(encoded: Mapping[str, Any], limit: int) -> dict[str, Any]:
    """``encoded`` (rows of token tensors) cut to ``limit`` tokens by dropping the middle.

    A chat prompt's instructions are at its start and its question and generation prompt at
    its end; the middle holds the knowledge or the history, which callers should have bounded.
    The rows are numpy arrays or torch tensors, and stay what they are.
    """
    head = limit // 2
    tail = limit - head

    def cut(value: Any) -> Any:
        ends = (value[:, :head], value[:, value.shape[1] - tail :])
        if isinstance(value, np.ndarray):
            return np.concatenate(ends, axis=1)
        import torch

        return torch.cat(ends, dim=1)

    return {key: cut(value) for key, value in encoded.items()}


def _first_token_ids(tokenizer: Any, candidate: str) -> set[int]:
    """First-token ids of a candidate's case and leading-space variants (whitespace skipped)."""
    base = candidate.strip()
    words = {base, base.lower(), base.capitalize()}
    ids: set[int] = set()
    for variant in sorted(words | {" " + word for word in words}):
        tokens = tokenizer.encode(variant, add_special_tokens=False)
        if tokens and tokenizer.decode(tokens[:1]).strip():
            ids.add(int(tokens[0]))
    return ids


def _cancel_criteria_rows(tokens: Sequence[CancelToken | None]) -> dict[str, Any]:
    """``generate`` arguments that stop each row at the next token once its run is cancelled.

    The tokens are read in the callers' threads and passed on, because decoding may run on
    another thread (``_stream``'s, a batch leader's), which does not see their context
    variables.
    """
    if all(token is None for token in tokens):
        return {}
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    row_tokens = list(tokens)

    class StopCancelledRows(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            flags = [token is not None and token.cancelled for token in row_tokens]
            return torch.tensor(flags, device=input_ids.device)

    return {"stopping_criteria": StoppingCriteriaList([StopCancelledRows()])}


def _softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities of float32 logits over the last axis (as ``torch.softmax``)."""
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    result: np.ndarray = shifted / shifted.sum(axis=-1, keepdims=True)
    return result


def cpu_has_native_bfloat16() -> bool:
    """Whether this CPU computes in bfloat16 natively (oneDNN's AVX512-BF16 / AMX check)."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def thread_invariant(model: Any) -> bool:
    """Whether ``model``'s results do not depend on torch's thread count.

    bfloat16 on a CPU with native bfloat16 arithmetic (AVX512-BF16 or AMX, where oneDNN runs
    it): the case measured (:mod:`crag.generator.thread_choice`), and a necessary condition
    only: on some such CPUs (AMX) long prompts' logits still differ, which is why
    :attr:`LocalChatModel.choose_threads` is off unless asked for. Elsewhere (float32, bfloat16
    emulated) the count is left alone.
    """
    import torch

    on_cpu = model.device.type == "cpu" and model.dtype == torch.bfloat16
    return bool(on_cpu and cpu_has_native_bfloat16())


def _torch_dtype(name: str, device: str, batching: bool = False) -> Any:
    """The torch dtype ``name`` resolves to (``auto``: see :attr:`LocalChatModel.dtype`)."""
    import torch

    if name == "float32":
        return torch.float32
    if name == "bfloat16":
        return torch.bfloat16
    if batching:
        return torch.float32
    if device.startswith("cuda") or (device == "cpu" and cpu_has_native_bfloat16()):
        return torch.bfloat16
    return torch.float32


class LocalChatModel(BaseChatModel):
    """Greedy chat generation with a local Hugging Face causal LM (CPU or CUDA)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    takes_max_new_tokens: ClassVar[bool] = True
    """A call may cap its reply with ``max_new_tokens`` (:mod:`crag.generator.reply_cap`)."""
    model_path: str
    """Directory holding a transformers model and tokenizer with a chat template."""
    max_new_tokens: int = 128
    """Longest reply, in tokens."""
    device: str | None = None
    """Torch device; CUDA when available, else CPU."""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Weights' precision. ``auto``: float32 once requests are decoded in batches
    (``max_batch_size`` above 1, :meth:`enable_batching`), else bfloat16 on CUDA and on CPUs
    with native bfloat16 arithmetic (AVX512-BF16 or AMX: about 1.4x faster prefill and
    decoding on 2 cores, answers nearly always identical) and float32 elsewhere. Why float32
    under batching: in float32 a row decoded in a batch gets the tokens it gets alone, so an
    answer does not depend on what else runs; in bfloat16 the batched matrix products round
    differently and some answers change wording. A model loaded in bfloat16 is loaded again in
    float32 when batching is turned on, and stays so. ``bfloat16`` or ``float32`` given
    explicitly are kept, batching or not."""

    context_length: int | None = None
    """Most tokens of prompt and reply together; ``None``: the model's own position limit
    (``max_position_embeddings``), read when it loads. A longer prompt loses its middle."""

    no_repeat_ngram_size: int = DEFAULT_NGRAM
    """A reply never repeats an n-gram of its own tokens this long
    (:mod:`crag.generator.repetition`; the prompt is not counted, so copying from the knowledge is
    free); 0: off."""

    max_batch_size: int = 1
    """Most requests decoded together when runs overlap (:mod:`crag.generator.batching`: rows join
    and leave the batch between decoding steps); 1 (the default) turns batching off, and each
    request is decoded alone by ``generate``. ``crag-bench eval --workers`` turns it on, and
    so does the deployment setting ``generator_batch_size``
    (:class:`crag.app.wiring.DefaultComponents`) for served runs; with ``dtype`` ``auto`` the
    model then computes in float32, where a batched answer equals the answer decoded alone."""

    engine: Literal["torch", "onnxruntime"] = "torch"
    """What decodes a lone request (batching off) and scores next tokens. ``onnxruntime``: an
    ONNX model of the folder, built once by onnxruntime-genai's builder
    (:mod:`crag.generator.onnx_build`) and run in float32 on the CPU
    (:mod:`crag.generator.onnx_decoding`): transformers float32's tokens, about twice as fast
    as transformers in bfloat16 on 2 cores. Batches (``max_batch_size`` above 1) are decoded
    by transformers in float32, which gives the same tokens; transformers loads then, not
    before. Used only on a CPU with ``dtype`` ``auto`` or ``float32``, and only for a model the
    builder takes; otherwise (logged) transformers decodes, as with ``torch``."""

    choose_threads: bool = False
    """Batching off, in bfloat16 on a CPU with native bfloat16: every decoding step runs on
    torch's threads or on one, whichever decodes faster now (:mod:`crag.generator.thread_choice`:
    on a busy 2-core machine one thread is several times faster, on a quiet one two are 1.4x
    faster). Off by default because whether the logits stay the same depends on the CPU: on an
    AMD EPYC (AVX512-BF16) they were equal bit for bit at every length tried; on an Intel Xeon
    with AMX a 300-token prompt's logits differ by up to 0.4 between one thread and two, which
    can change a greedy answer. Turn it on only where
    ``bench/scripts/profile_generation.py`` reports identical tokens across thread counts."""

    _model: Any = PrivateAttr(default=None)
    _tokenizer: Any = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _batcher: GenerationBatcher | None = PrivateAttr(default=None)
    _threads: ThreadChoice = PrivateAttr(default_factory=ThreadChoice)
    _onnx: OnnxDecoder | None = PrivateAttr(default=None)
    _end_ids: frozenset[int] = PrivateAttr(default=frozenset())

    def model_post_init(self, context: Any, /) -> None:
        """Load the tokenizer and the model once (transformers' only when it decodes).

        On onnxruntime neither torch nor, for a plain ``tokenizer.json`` such as SmolLM2's,
        transformers is imported (:mod:`crag.generator.model_files`,
        :mod:`crag.generator.chat_tokenizer`).
        """
        path = Path(self.model_path)
        if not (path / "config.json").is_file():
            raise ValueError(f"no transformers model at {path} (config.json missing)")
        self.device = self.device or default_device()
        self._onnx = self._open_onnx(path)
        if self._onnx is not None and self.max_batch_size == 1:
            self._tokenizer = chat_tokenizer_for(path)
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(path)
        if self._onnx is None or self.max_batch_size > 1:
            self._load_torch(_torch_dtype(self.dtype, self.device, self.max_batch_size > 1))
        config = model_config(path)
        configured_end = generation_eos_token_id(path)
        self._end_ids = frozenset(generation_end_ids(configured_end, self._tokenizer))
        if self.context_length is None:
            self.context_length = model_context_length(config, self._tokenizer)

    def _open_onnx(self, path: Path) -> OnnxDecoder | None:
        """The onnxruntime decoder of :attr:`engine` ``onnxruntime``; None: transformers."""
        from crag.generator.onnx_build import ensure_onnx_model

        if self.engine != "onnxruntime":
            return None
        if not onnxruntime_applies(self.engine, self.dtype, self.device or "cpu"):
            logger.info("generator %s: onnxruntime runs float32 on a CPU only", path.name)
            return None
        try:
            decoder = open_decoder(ensure_onnx_model(path))
        except (ValueError, ImportError) as exc:  # ImportError: onnxruntime-genai not installed
            logger.warning("generator %s decodes with transformers: %s", path.name, exc)
            return None
        logger.info("generator %s loaded in onnxruntime (float32)", path.name)
        return decoder

    def _load_torch(self, dtype: Any) -> None:
        """Load transformers' model in ``dtype`` and the batcher over it (lock held, or init)."""
        from transformers import AutoModelForCausalLM

        if isinstance(self._tokenizer, ChatTokenizer):  # transformers' decoding needs its own
            self._tokenizer = load_tokenizer(Path(self.model_path))
        model: Any = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=dtype)
        self._model = model.to(self.device).eval()
        decoder = StepDecoder(
            self._model, self._tokenizer, no_repeat_ngram_size=self.no_repeat_ngram_size
        )
        size = self.max_batch_size if self._batcher is None else self._batcher.max_batch_size
        self._batcher = GenerationBatcher(decoder, size, self._lock)
        name = Path(self.model_path).name
        logger.info("generator %s loaded on %s in %s", name, self.device, dtype)

    @property
    def decodes_on_onnxruntime(self) -> bool:
        """Whether onnxruntime decodes a lone request (see :attr:`engine`).

        Such a model serves overlapping requests faster each alone than in transformers'
        batches (docs/benchmark.md), so ``crag-bench eval --workers`` leaves it unbatched.
        """
        return self._onnx is not None

    @property
    def _llm_type(self) -> str:
        return "crag-local-transformers"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model_path": self.model_path,
            "max_new_tokens": self.max_new_tokens,
            "dtype": self.dtype,
            "no_repeat_ngram_size": self.no_repeat_ngram_size,
        }

    def _encode(self, messages: list[BaseMessage], reply_tokens: int = 0) -> Any:
        """The chat-templated prompt, within the context less ``reply_tokens`` (keep_ends).

        Numpy rows for onnxruntime, torch tensors on the model's device for transformers.
        """
        chat = [{"role": _ROLES.get(m.type, "user"), "content": m.text} for m in messages]
        tensors = "np" if self._onnx is not None else "pt"
        encoded = self._tokenizer.apply_chat_template(
            chat, add_generation_prompt=True, return_tensors=tensors, return_dict=True
        )
        length = int(encoded["input_ids"].shape[1])
        limit = None if self.context_length is None else self.context_length - reply_tokens
        if limit is not None and length > limit > 0:
            logger.warning(
                "prompt of %d tokens cut to %d in its middle (context %d, reply %d)",
                length,
                limit,
                self.context_length,
                reply_tokens,
            )
            encoded = keep_ends(encoded, limit)
        if tensors == "np":
            return dict(encoded)
        return {k: v.to(self.device) for k, v in encoded.items()}

    def _chosen_threads(self) -> AbstractContextManager[None]:
        """Forward passes of the lone model on their thread count (:attr:`choose_threads`).

        Entered on the thread that runs them.
        """
        if self._model is not None and self.choose_threads and thread_invariant(self._model):
            return self._threads.applied(self._model)
        return nullcontext()

    def get_token_ids(self, text: str) -> list[int]:
        """``text``'s tokens under this model's tokenizer (no special tokens)."""
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def get_num_tokens_from_messages(
        self, messages: list[BaseMessage], tools: Sequence[Any] | None = None
    ) -> int:
        """The prompt's tokens as this model reads it: chat template and generation prompt."""
        chat = [{"role": _ROLES.get(m.type, "user"), "content": m.text} for m in messages]
        ids = self._tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, Mapping):  # transformers versions that return a BatchEncoding
            ids = ids["input_ids"]
        return len(ids)

    def _reply_tokens(self, kwargs: Mapping[str, Any]) -> int:
        return int(kwargs.get("max_new_tokens", self.max_new_tokens))

    def _generation_kwargs(
        self, stop: list[str] | None, prompt_length: int, **kwargs: Any
    ) -> dict[str, Any]:
        from transformers import LogitsProcessorList

        guard = ReplyNGramBlocker(prompt_length, self.no_repeat_ngram_size)
        return {
            "logits_processor": LogitsProcessorList([guard]),
            "max_new_tokens": int(kwargs.get("max_new_tokens", self.max_new_tokens)),
            "do_sample": False,
            "pad_token_id": self._tokenizer.pad_token_id or self._tokenizer.eos_token_id,
            **({"stop_strings": stop, "tokenizer": self._tokenizer} if stop else {}),
        }

    def next_token_probabilities(
        self, messages: list[BaseMessage], candidates: Sequence[str]
    ) -> dict[str, float]:
        """Probability that the reply to ``messages`` starts with each candidate.

        Runs one forward pass over the chat-templated prompt (generation prompt added) and
        takes the softmax over the next token. A candidate's probability is the sum over the
        distinct first tokens of its variants: as given, lower case and capitalised, each with
        and without a leading space (``"yes"`` covers ``"yes"``, ``"Yes"``, ``" yes"``,
        ``" Yes"``). Only first tokens count, so a candidate of several tokens is approximated
        by its first one, and a first token shared by two candidates counts for both.

        Args:
            messages: The conversation, as for ``invoke``.
            candidates: Answers to score, e.g. ``("yes", "no")``.

        Returns:
            ``{candidate: probability}`` with values in [0, 1], keyed as given.
        """
        if self._onnx is not None:
            with holding(self._lock):
                prompt = self._encode(messages, 1)["input_ids"][0].tolist()
                logits = self._onnx.next_logits(prompt, current_token())
            probabilities: Any = _softmax(logits)
        else:
            import torch

            with (
                holding(self._lock),
                torch.inference_mode(),
                stop_when_cancelled(self._model, current_token()),
                self._chosen_threads(),
            ):
                inputs = self._encode(messages, 1)
                logits = self._model(**inputs).logits[0, -1].float()
                probabilities = torch.softmax(logits, dim=-1).cpu()
        result: dict[str, float] = {}
        for candidate in candidates:
            ids = sorted(_first_token_ids(self._tokenizer, candidate))
            total = float(probabilities[ids].sum()) if ids else 0.0
            result[candidate] = min(1.0, max(0.0, total))
        return result

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:

        token = current_token()
        prompt = self._encode(messages, self._reply_tokens(kwargs))["input_ids"][0].tolist()
        request = GenerationRequest(
            input_ids=prompt,
            max_new_tokens=int(kwargs.get("max_new_tokens", self.max_new_tokens)),
            stop=tuple(stop or ()),
            token=token,
        )
        if self.max_batch_size > 1:
            if self._batcher is None:
                raise RuntimeError("the generator was not loaded")
            new_tokens = self._batcher.generate(request)
        else:
            new_tokens = self._generate_alone(request)
        if token is not None:
            token.raise_if_cancelled()
        text = self._tokenizer.decode(new_tokens, skip_special_tokens=True).strip()
        message = AIMessage(
            content=text,
            usage_metadata={
                "input_tokens": len(prompt),
                "output_tokens": len(new_tokens),
                "total_tokens": len(prompt) + len(new_tokens),
            },
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def enable_batching(self, max_batch_size: int) -> None:
        """Decode up to ``max_batch_size`` overlapping requests together (1: off).

        Above 1, a model whose ``dtype`` is ``auto`` and was loaded in bfloat16 is loaded again
        in float32 first (see :attr:`dtype`; for SmolLM2 about 0.2 s), and stays in float32.

        Raises:
            ValueError: ``max_batch_size`` is below 1.
        """
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        if max_batch_size > 1 and self._model is None:  # onnxruntime decoded alone so far
            with holding(self._lock):
                if self._model is None:
                    self._load_torch(_torch_dtype(self.dtype, self.device or "cpu", True))
        elif max_batch_size > 1:
            self._batch_in_float32()
        if self._batcher is not None:
            self._batcher.max_batch_size = max_batch_size
        self.max_batch_size = max_batch_size

    def _batch_in_float32(self) -> None:
        """With ``dtype`` ``auto``, load the weights again in float32 before any batch.

        Only while batching is off does the model compute in bfloat16, so no batch is running:
        the lock keeps lone decoding and scoring off the model while it is swapped.
        """
        import torch

        if self.dtype != "auto" or self._model.dtype == torch.float32 or self._batcher is None:
            return
        with holding(self._lock):
            self._load_torch(torch.float32)
        logger.info("generator %s loaded again in float32 to decode in batches", self.model_path)

    def _generate_alone(self, request: GenerationRequest) -> list[int]:
        """Greedy-decode one prompt with ``generate`` (batching off: nothing else shares it).

        The row stops at its end-of-sequence token (left out, as the step decoder leaves it
        out), its stop string or cancellation.
        """
        if self._onnx is not None:
            rules = self._rules(request.max_new_tokens, request.stop)
            with holding(self._lock):
                return self._onnx.greedy(request.input_ids, rules, request.token)
        import torch

        kwargs = self._generation_kwargs(
            list(request.stop), len(request.input_ids), max_new_tokens=request.max_new_tokens
        )
        with (
            holding(self._lock),
            torch.inference_mode(),
            stop_when_cancelled(self._model, request.token),
            self._chosen_threads(),
        ):
            ids = torch.tensor([request.input_ids], device=self._model.device)
            output = self._model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                **kwargs,
                **_cancel_criteria_rows([request.token]),
            )
        tokens: list[int] = output[0, len(request.input_ids) :].tolist()
        ended = bool(tokens) and tokens[-1] in end_token_ids(self._model, self._tokenizer)
        return tokens[:-1] if ended else tokens

    def _rules(
        self,
        max_new_tokens: int,
        stop: Sequence[str] | None,
        on_token: Callable[[int], None] | None = None,
    ) -> DecodingRules:
        """How onnxruntime decodes a reply: as ``generate`` does with :meth:`_generation_kwargs`."""
        return DecodingRules(
            max_new_tokens=max_new_tokens,
            end_ids=self._end_ids,
            no_repeat_ngram_size=self.no_repeat_ngram_size,
            stop=tuple(stop or ()),
            decode=lambda ids: self._tokenizer.decode(ids, skip_special_tokens=True),
            on_token=on_token,
        )

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        token = current_token()
        with holding(self._lock):
            inputs = self._encode(messages, self._reply_tokens(kwargs))
            streamer = self._streamer()
            errors: list[BaseException] = []

            def generate() -> None:
                try:
                    if self._onnx is not None:
                        self._stream_onnx(inputs["input_ids"], streamer, stop, token, kwargs)
                        return
                    import torch

                    with (
                        torch.inference_mode(),
                        stop_when_cancelled(self._model, token),
                        self._chosen_threads(),
                    ):
                        self._model.generate(
                            **inputs,
                            streamer=streamer,
                            **self._generation_kwargs(
                                stop, int(inputs["input_ids"].shape[1]), **kwargs
                            ),
                            **_cancel_criteria_rows([token]),
                        )
                except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                    errors.append(exc)
                    streamer.end()

            worker = threading.Thread(target=generate, daemon=True)
            worker.start()
            first = True
            for piece in streamer:
                if not piece:
                    continue
                if first:
                    piece = piece.lstrip()
                    first = False
                chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
                if run_manager:
                    run_manager.on_llm_new_token(piece, chunk=chunk)
                yield chunk
            worker.join()
            if errors:
                raise errors[0]
            if token is not None:
                token.raise_if_cancelled()

    def _streamer(self) -> Any:
        """The reply's text pieces: transformers' streamer for its ``generate``, else ours."""
        if self._onnx is not None:
            return WordStreamer(
                lambda ids: self._tokenizer.decode(ids, skip_special_tokens=True), timeout=300.0
            )
        from transformers.generation.streamers import TextIteratorStreamer

        return TextIteratorStreamer(
            self._tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=300.0
        )

    def _stream_onnx(
        self,
        input_ids: Any,
        streamer: Any,
        stop: list[str] | None,
        token: CancelToken | None,
        kwargs: Mapping[str, Any],
    ) -> None:
        """Decode with onnxruntime into ``streamer`` as ``generate`` would (the lock held)."""
        if self._onnx is None:
            raise RuntimeError("the generator has no onnxruntime model")
        rules = self._rules(self._reply_tokens(kwargs), stop, lambda chosen: streamer.put([chosen]))
        self._onnx.greedy(input_ids[0].tolist(), rules, token)
        streamer.end()
