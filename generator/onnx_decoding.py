"""Greedy decoding of one prompt with onnxruntime, over a model onnxruntime-genai's builder made.

Why onnxruntime: SmolLM2-135M decodes a token in about 20 ms in float32 on 2 cores, against 38 ms
for transformers in bfloat16 and 56 ms in float32, and gives transformers float32's tokens
(docs/models.md, ``bench/scripts/onnx_generation_feasibility.py``). Why not onnxruntime-genai's
own generation loop (``og.Generator``): it holds Python's global interpreter lock while the
model runs (a thread ticking every 10 ms ticked twice during a 2.1 s prompt read), which would
stall every other run of a server; ``InferenceSession.run`` lets it go (109 ticks in 1.1 s).
So the builder makes the model (:mod:`crag.generator.onnx_build`), and this loop runs it with
crag's decoding rules: greedy, the reply n-gram blocker (:mod:`crag.generator.repetition`), the
end tokens, the stop strings and the run's cancellation.

The model takes ``input_ids``, ``attention_mask`` (ones over the past and the new tokens),
each layer's past keys and values and how many of the new tokens' logits to return (the
builder's ``prune_lm_head`` returned the last one only; :mod:`crag.generator.onnx_positions`
makes that a number), and returns those logits and the present keys and values, which are the
next step's past. After the prompt's read every call also reads tokens drafted from the prompt
(:mod:`crag.generator.prompt_lookup`) and keeps those greedy decoding would choose. A
prompt's read starts from the cache of a recent prompt it begins as
(:mod:`crag.generator.prefix_cache`): only the tokens after their shared start are read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crag.core.cancellation import CancelToken
from crag.core.onnx_sessions import intra_op_threads, session_options
from crag.generator.onnx_positions import POSITIONS_INPUT
from crag.generator.prefix_cache import PrefixCache
from crag.generator.prompt_lookup import DRAFT_TOKENS, drafted_tokens
from crag.generator.repetition import banned_tokens

logger = logging.getLogger(__name__)

CANCEL_POLL_SECONDS = 0.02
"""How often a prompt being read checks its run's cancellation (the read stops within this)."""


@dataclass(frozen=True)
class DecodingRules:
    """How one reply is decoded: its length, its ends and its repetition guard."""

    max_new_tokens: int
    end_ids: frozenset[int]
    no_repeat_ngram_size: int
    stop: tuple[str, ...] = ()
    decode: Callable[[list[int]], str] | None = None
    """Turns reply tokens into text, to find the stop strings (needed when ``stop`` is set)."""
    on_token: Callable[[int], None] | None = field(default=None, compare=False)
    """Called with every reply token as it is chosen (streaming)."""


def onnxruntime_applies(engine: str, dtype: str, device: str) -> bool:
    """Whether a local model with these settings decodes on onnxruntime: float32 on a CPU."""
    return engine == "onnxruntime" and device == "cpu" and dtype != "bfloat16"


_opened: dict[Path, OnnxDecoder] = {}
_opening = threading.Lock()


def open_decoder(model_file: Path) -> OnnxDecoder:
    """The process's decoder of ``model_file``, opened once (also by a preload on another thread).

    Raises:
        ValueError: onnxruntime cannot load the file.
    """
    key = model_file.resolve()
    with _opening:
        decoder = _opened.get(key)
        if decoder is None:
            decoder = _opened[key] = OnnxDecoder(key, intra_op_threads())
        return decoder


class OnnxDecoder:
    """One onnxruntime session of a causal LM, decoding one prompt at a time.

    Not thread-safe: the chat model's lock keeps one reply on it at a time.
    """

    def __init__(self, model_file: Path, threads: int) -> None:
        """Open ``model_file`` (the builder's ``model.onnx``) on ``threads`` CPU threads.

        Raises:
            ValueError: onnxruntime cannot load the file.
        """
        import onnxruntime as ort

        try:
            self._session = ort.InferenceSession(
                str(model_file), session_options(threads), providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own classes, not exported stably
            raise ValueError(f"onnxruntime cannot load {model_file}: {exc}") from exc
        names = [i.name for i in self._session.get_inputs()]
        self._past_names = [name for name in names if name.startswith("past_key_values.")]
        self._heads, self._head_size = _cache_shape(model_file.with_name("genai_config.json"))
        self._prefixes = PrefixCache()
        self._returns_positions = POSITIONS_INPUT in names
        self.checks_drafts = self._returns_positions
        """Whether replies read drafted tokens: where the model returns several positions'
        logits (off: one call a token, for comparison)."""

    def _empty_past(self) -> dict[str, Any]:
        import numpy as np

        shape = (1, self._heads, 0, self._head_size)
        return {name: np.zeros(shape, np.float32) for name in self._past_names}

    def _run(
        self,
        tokens: Sequence[int],
        past: dict[str, Any],
        total: int,
        token: CancelToken | None,
        positions: int = 1,
    ) -> tuple[Any, dict[str, Any]]:
        """The logits of the last ``positions`` new tokens (rows) and the cache after ``tokens``.

        ``total`` is the positions of the past and ``tokens`` together. A model without
        :data:`POSITIONS_INPUT` returns its last row only (``positions`` must then be 1).
        """
        import numpy as np

        feeds = {
            "input_ids": np.asarray([tokens], np.int64),
            "attention_mask": np.ones((1, total), np.int64),
            **past,
        }
        if self._returns_positions:
            feeds[POSITIONS_INPUT] = np.asarray([positions], np.int64)
        with _terminated_when_cancelled(token if len(tokens) > 1 else None) as options:
            try:
                outputs = self._session.run(None, feeds, options)
            except Exception:
                if token is not None:
                    token.raise_if_cancelled()  # the read was stopped for the cancellation
                raise
        present = dict(zip(self._past_names, outputs[1:], strict=True))
        return outputs[0][0], present

    def _read(self, prompt: Sequence[int], token: CancelToken | None) -> tuple[Any, dict[str, Any]]:
        """The logits after ``prompt`` and its cache, read from a kept prompt's where shared."""
        start, past = self._prefixes.shared_start(prompt)
        rows, present = self._run(
            prompt[start:], self._empty_past() if past is None else past, len(prompt), token
        )
        self._prefixes.keep(prompt, present)
        return rows[-1], present

    def next_logits(self, prompt: Sequence[int], token: CancelToken | None = None) -> Any:
        """The logits (a float32 vector) of the token after ``prompt``."""
        logits, _ = self._read(prompt, token)
        return logits

    def greedy(
        self, prompt: Sequence[int], rules: DecodingRules, token: CancelToken | None = None
    ) -> list[int]:
        """The reply to ``prompt``, greedily, by ``rules``; its end token left out.

        It stops at an end token, at ``rules.max_new_tokens``, after the token that completes
        a stop string, or (between calls) once ``token`` is cancelled, returning what it has:
        the caller raises the cancellation.

        Where the model returns several positions' logits, each call after the prompt's read
        also reads tokens drafted from the prompt (:mod:`crag.generator.prompt_lookup`): the
        rows are consumed in order, each token chosen from its row as it would be alone, and
        a row after a draft is used only while the drafts match the chosen tokens. So the
        tokens are those of one call a token; the cache is then cut back to the tokens kept.

        Raises:
            RunCancelledError: ``token`` was cancelled while the prompt was read.
        """
        reply: list[int] = []
        if rules.max_new_tokens < 1:
            return reply
        logits, past = self._read(prompt, token)
        rows, drafts = [logits], list[int]()
        while True:
            # invariant: the cache holds the prompt and every reply token but the last
            for index, row in enumerate(rows):
                chosen = _greedy_choice(row, reply, rules.no_repeat_ngram_size)
                if chosen in rules.end_ids:
                    return reply
                reply.append(chosen)
                if rules.on_token is not None:
                    rules.on_token(chosen)
                if len(reply) >= rules.max_new_tokens or _stopped(reply, rules):
                    return reply
                if index >= len(drafts) or drafts[index] != chosen:
                    break
            if token is not None and token.cancelled:
                return reply
            cached = len(prompt) + len(reply) - 1
            past = _cut(past, cached)
            room = rules.max_new_tokens - len(reply) - 1
            drafts = (
                drafted_tokens(prompt, reply, min(room, DRAFT_TOKENS)) if self.checks_drafts else []
            )
            rows, past = self._run(
                [reply[-1], *drafts], past, cached + 1 + len(drafts), token, len(drafts) + 1
            )


def _greedy_choice(logits: Any, reply: Sequence[int], no_repeat_ngram_size: int) -> int:
    """The most likely token of ``logits`` that the reply n-gram blocker allows after ``reply``."""
    import numpy as np

    banned = banned_tokens(list(reply), no_repeat_ngram_size)
    if banned:
        logits = np.array(logits, copy=True)
        logits[sorted(banned)] = -np.inf
    return int(np.argmax(logits))


def _cut(past: dict[str, Any], positions: int) -> dict[str, Any]:
    """``past`` holding its first ``positions`` positions (itself when it holds no more)."""
    import numpy as np

    if not past or next(iter(past.values())).shape[2] <= positions:
        return past
    return {name: np.ascontiguousarray(a[:, :, :positions, :]) for name, a in past.items()}


def _cache_shape(genai_config: Path) -> tuple[int, int]:
    """Key/value heads and head size, from the builder's ``genai_config.json``.

    Raises:
        ValueError: The file is missing or does not say.
    """
    import json

    try:
        decoder = json.loads(genai_config.read_text(encoding="utf-8"))["model"]["decoder"]
        return int(decoder["num_key_value_heads"]), int(decoder["head_size"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{genai_config} does not give the cache's shape: {exc}") from exc


def _stopped(reply: list[int], rules: DecodingRules) -> bool:
    """Whether the reply's text now holds one of the stop strings."""
    if not rules.stop or rules.decode is None:
        return False
    text = rules.decode(reply)
    return any(stop in text for stop in rules.stop)


@contextmanager
def _terminated_when_cancelled(token: CancelToken | None) -> Iterator[Any]:
    """``RunOptions`` for one ``run``, terminated from a watcher once ``token`` is cancelled.

    A prompt is read in one call, which may take seconds; onnxruntime lets go of the
    interpreter lock meanwhile, so a watcher thread can ask it to stop.
    """
    import onnxruntime as ort

    options = ort.RunOptions()
    if token is None:
        yield options
        return
    done = threading.Event()

    def watch() -> None:
        while not done.wait(CANCEL_POLL_SECONDS):
            if token.cancelled:
                options.terminate = True
                return

    watcher = threading.Thread(target=watch, name="onnx-cancel-watch", daemon=True)
    watcher.start()
    try:
        yield options
    finally:
        done.set()
        watcher.join()
