"""Overlapping generation requests are decoded as one changing batch, each getting its own.

The batcher is checked with a scripted decoder (which rows shared each step, who joined when,
errors, cancellation); the step decoder and the local chat model with a tiny Llama built from a
config: prompts of different lengths, joining the batch at different steps, get the tokens
each gets alone from ``generate``.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from crag.core.cancellation import CancelToken
from crag.generator import decode_attention
from crag.generator.batching import GenerationBatcher, GenerationRequest
from crag.generator.decode_attention import crag_sdpa_attention
from crag.generator.local import LocalChatModel
from crag.generator.step_decoding import StepDecoder
from crag.settings.deployment import deployment_with
from tests.tiny_causal_lm import build_tiny_causal_lm


class ScriptedDecoder:
    """Each row writes its prompt back, a token a step; the first step waits to be released."""

    def __init__(self, fail_on_step: int | None = None) -> None:
        self.rows: list[tuple[GenerationRequest, list[int]]] = []
        self.steps: list[list[list[int]]] = []
        self.admitted: list[list[int]] = []
        self.first_started = threading.Event()
        self.release_first = threading.Event()
        self.fail_on_step = fail_on_step
        self.threads: set[int] = set()

    @property
    def size(self) -> int:
        return len(self.rows)

    def admit(self, request: GenerationRequest) -> None:
        self.admitted.append(request.input_ids)
        self.rows.append((request, []))

    def step(self) -> None:
        self.threads.add(threading.get_ident())
        self.steps.append([request.input_ids for request, _ in self.rows])
        if len(self.steps) == 1:
            self.first_started.set()
            assert self.release_first.wait(10)
        if self.fail_on_step == len(self.steps):
            raise RuntimeError("out of memory")
        for request, written in self.rows:
            written.append(request.input_ids[len(written)])

    def take_finished(self) -> list[GenerationRequest]:
        ended = [(r, w) for r, w in self.rows if len(w) == min(len(r.input_ids), r.max_new_tokens)]
        for request, written in ended:
            request.output = written
        self.rows = [row for row in self.rows if row not in ended]
        return [request for request, _ in ended]

    def fail_all(self) -> list[GenerationRequest]:
        requests = [request for request, _ in self.rows]
        self.rows = []
        return requests


def _submit_while_busy(
    batcher: GenerationBatcher,
    decoder: ScriptedDecoder,
    first: GenerationRequest,
    later: list[GenerationRequest],
) -> list[list[int]]:
    """Run ``first``, queue ``later`` while its first step runs, then let everything finish."""
    with ThreadPoolExecutor(len(later) + 1) as pool:
        first_future = pool.submit(batcher.generate, first)
        assert decoder.first_started.wait(10)
        futures = [pool.submit(batcher.generate, r) for r in later]
        for _ in range(1000):  # until every later request waits in the queue
            if len(batcher._pending) == len(later):
                break
            threading.Event().wait(0.01)
        decoder.release_first.set()
        return [first_future.result(10)] + [f.result(10) for f in futures]


def test_requests_that_arrive_while_decoding_join_the_running_batch() -> None:
    decoder = ScriptedDecoder()
    batcher = GenerationBatcher(decoder, max_batch_size=8)
    first = GenerationRequest([9, 9, 9, 9, 9], 8)
    later = [GenerationRequest(list(range(i, i + 1 + i)), 8) for i in range(1, 4)]
    outputs = _submit_while_busy(batcher, decoder, first, later)
    assert outputs == [[9, 9, 9, 9, 9]] + [r.input_ids for r in later]
    # the first row decoded alone for one step, then all four together; rows left as they ended
    assert batcher.step_sizes == [1, 4, 4, 3, 2]
    assert all(r.input_ids in decoder.steps[1] for r in later)


def test_one_thread_of_its_own_decodes_whoever_asks() -> None:
    """Not the callers: the cache's memory then comes from one thread's malloc arena."""
    decoder = ScriptedDecoder()
    batcher = GenerationBatcher(decoder, max_batch_size=2)
    first = GenerationRequest([7, 7, 7], 8)
    later = [GenerationRequest([i, i], 8) for i in range(1, 5)]
    callers: set[int] = set()

    def generate(request: GenerationRequest) -> list[int]:
        callers.add(threading.get_ident())
        return batcher.generate(request)

    with ThreadPoolExecutor(len(later) + 1) as pool:
        futures = [pool.submit(generate, first)]
        assert decoder.first_started.wait(10)
        futures += [pool.submit(generate, r) for r in later]
        decoder.release_first.set()
        assert [f.result(10) for f in futures] == [[7, 7, 7]] + [r.input_ids for r in later]
    assert len(decoder.threads) == 1
    assert not decoder.threads & callers
    for _ in range(1000):  # the decoding thread ends once nothing is left
        if batcher._driver is None:
            break
        threading.Event().wait(0.01)
    assert batcher._driver is None


def test_rows_never_exceed_the_batch_size_and_the_queue_joins_as_rows_leave() -> None:
    decoder = ScriptedDecoder()
    batcher = GenerationBatcher(decoder, max_batch_size=2)
    first = GenerationRequest([7, 7, 7], 8)
    later = [GenerationRequest([i], 8) for i in range(1, 5)]
    outputs = _submit_while_busy(batcher, decoder, first, later)
    assert outputs == [[7, 7, 7], [1], [2], [3], [4]]
    assert max(batcher.step_sizes) == 2
    assert decoder.admitted == [[7, 7, 7], [1], [2], [3], [4]]  # oldest first


def test_each_row_keeps_its_own_token_limit() -> None:
    decoder = ScriptedDecoder()
    batcher = GenerationBatcher(decoder, max_batch_size=8)
    first = GenerationRequest([5, 6, 7, 8], 2)
    later = [GenerationRequest([1, 2, 3], 3), GenerationRequest([4, 4, 4, 4], 1)]
    assert _submit_while_busy(batcher, decoder, first, later) == [[5, 6], [1, 2, 3], [4]]


def test_a_lone_request_runs_at_once() -> None:
    decoder = ScriptedDecoder()
    decoder.release_first.set()
    batcher = GenerationBatcher(decoder)
    assert batcher.generate(GenerationRequest([1, 2], 4)) == [1, 2]
    assert batcher.generate(GenerationRequest([3], 4)) == [3]
    assert batcher.step_sizes == [1, 1, 1]


def test_an_error_reaches_every_row_of_the_batch_and_the_batcher_goes_on() -> None:
    decoder = ScriptedDecoder(fail_on_step=2)
    batcher = GenerationBatcher(decoder, max_batch_size=8)
    first = GenerationRequest([1, 2, 3], 8)
    later = [GenerationRequest([4, 5], 8), GenerationRequest([6, 7], 8)]
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(batcher.generate, first)]
        assert decoder.first_started.wait(10)
        futures += [pool.submit(batcher.generate, r) for r in later]
        for _ in range(1000):
            if len(batcher._pending) == len(later):
                break
            threading.Event().wait(0.01)
        decoder.release_first.set()
        for future in futures:
            with pytest.raises(RuntimeError, match="out of memory"):
                future.result(10)
    assert decoder.size == 0
    assert batcher.generate(GenerationRequest([8, 9], 4)) == [8, 9]


def test_a_request_cancelled_while_queued_is_never_read() -> None:
    decoder = ScriptedDecoder()
    batcher = GenerationBatcher(decoder, max_batch_size=8)
    token = CancelToken()
    cancelled = GenerationRequest([4, 4, 4], 8, token=token)
    token.cancel()
    outputs = _submit_while_busy(batcher, decoder, GenerationRequest([1, 2], 8), [cancelled])
    assert outputs == [[1, 2], []]
    assert [4, 4, 4] not in decoder.admitted


def test_batch_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_batch_size must be at least 1"):
        GenerationBatcher(ScriptedDecoder(), max_batch_size=0)


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny_lm"))


QUESTIONS = [
    "who painted the mona lisa",
    "who",
    "was it leonardo da vinci in paris in the louvre",
    "the louvre is in paris",
    "is this the mona lisa in the louvre in paris and was it painted by leonardo da vinci",
]


def _prompts() -> list[list[BaseMessage]]:
    return [[SystemMessage("answer the question"), HumanMessage(q)] for q in QUESTIONS]


def _decode_staggered(model: LocalChatModel, requests: list[GenerationRequest]) -> None:
    """Admit one request per step, so that rows join a batch already decoding."""
    decoder = StepDecoder(
        model._model, model._tokenizer, no_repeat_ngram_size=model.no_repeat_ngram_size
    )
    waiting = list(requests)
    while waiting or decoder.size:
        if waiting:
            decoder.admit(waiting.pop(0))
        decoder.take_finished()
        if decoder.size:
            decoder.step()
            decoder.take_finished()


def test_rows_that_join_a_running_batch_get_the_tokens_they_get_alone(tiny_lm: Path) -> None:
    model = LocalChatModel(model_path=str(tiny_lm), max_new_tokens=6, dtype="float32")
    encoded = [model._encode(p)["input_ids"][0].tolist() for p in _prompts()]
    limits = [6, 3, 6, 1, 5]
    pairs = list(zip(encoded, limits, strict=True))
    alone = [model._generate_alone(GenerationRequest(ids, n)) for ids, n in pairs]
    requests = [GenerationRequest(ids, n) for ids, n in pairs]
    _decode_staggered(model, requests)
    assert [r.output for r in requests] == alone
    assert [len(tokens) for tokens in alone] == limits  # no end token: each runs to its limit


def test_a_row_ends_at_the_end_token_as_generate_ends_it(tiny_lm: Path) -> None:
    model = LocalChatModel(model_path=str(tiny_lm), max_new_tokens=8, dtype="float32")
    encoded = [model._encode(p)["input_ids"][0].tolist() for p in _prompts()]
    unlimited = model._generate_alone(GenerationRequest(encoded[0], 8))
    model._model.generation_config.eos_token_id = unlimited[2]  # its third token ends it now
    alone = [model._generate_alone(GenerationRequest(ids, 8)) for ids in encoded]
    assert alone[0] == unlimited[:2]
    requests = [GenerationRequest(ids, 8) for ids in encoded]
    _decode_staggered(model, requests)
    assert [r.output for r in requests] == alone


def test_concurrent_invokes_are_batched_and_each_gets_its_own_answer(tiny_lm: Path) -> None:
    model = LocalChatModel(model_path=str(tiny_lm), max_new_tokens=6, dtype="float32")
    assert model.max_batch_size == 1, "batching is off unless asked for"
    prompts = [[HumanMessage(f"who painted the {w}")] for w in ("mona lisa", "louvre", "it")] * 4
    alone = [model.invoke(p).text for p in prompts]
    assert model._batcher is not None
    assert model._batcher.step_sizes == [], "alone, generate decodes without the batcher"
    model.enable_batching(8)
    assert model._batcher.max_batch_size == 8
    with pytest.raises(ValueError, match="at least 1"):
        model.enable_batching(0)
    with ThreadPoolExecutor(len(prompts)) as pool:
        together = list(pool.map(lambda p: model.invoke(p).text, prompts))
    assert together == alone
    assert max(model._batcher.step_sizes) > 1
    assert not model._lock.locked()


def test_the_deployment_setting_turns_batching_on_for_the_served_model(tiny_lm: Path) -> None:
    """``generator_batch_size`` reaches the loaded model (crag.app.wiring), once, never undoing
    more."""
    from crag.app.wiring import DefaultComponents
    from crag.settings.run_settings import RunSettings

    components = DefaultComponents()
    spec = f"local:{tiny_lm}"
    model = components.chat_model(RunSettings(deployment=deployment_with(generator=spec)))
    assert isinstance(model, LocalChatModel)
    assert model.max_batch_size == 1, "the default (1) leaves batching off"
    assert (
        components.chat_model(
            RunSettings(deployment=deployment_with(generator=spec, generator_batch_size=8))
        )
        is model
    )
    assert model.max_batch_size == 8
    assert model._batcher is not None and model._batcher.max_batch_size == 8
    model.enable_batching(16)  # as `crag-bench eval --workers 16` does after loading it
    components.chat_model(
        RunSettings(deployment=deployment_with(generator=spec, generator_batch_size=8))
    )
    components.chat_model(RunSettings(deployment=deployment_with(generator=spec)))
    assert model.max_batch_size == 16, "a later run does not undo its owner's batching"
    components.chat_model(
        RunSettings(deployment=deployment_with(generator=spec, generator_batch_size=4))
    )
    assert model.max_batch_size == 4, "a changed setting is applied"

    class ApiModel:  # no enable_batching: the setting is ignored
        pass

    components.apply_batch_size(ApiModel(), 8)  # type: ignore[arg-type]


def test_decode_attention_matches_sdpa_over_a_padded_cache() -> None:
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    torch.manual_seed(0)
    rows, heads, key_heads, positions, dim = 3, 6, 2, 9, 8
    query = torch.randn(rows, heads, 1, dim)
    key = torch.randn(rows, key_heads, positions, dim)
    value = torch.randn(rows, key_heads, positions, dim)
    mask = torch.ones(rows, 1, 1, positions, dtype=torch.bool)
    mask[1, :, :, :4] = False  # left padding of a shorter row
    mask[2, :, :, :1] = False

    class GroupedAttention(torch.nn.Module):
        num_key_value_groups = heads // key_heads
        is_causal = True

    module = GroupedAttention()
    expected, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.3)
    got, weights = crag_sdpa_attention(
        module, query, key, value, mask, scaling=0.3, decode_step=True
    )
    assert weights is None
    assert got.shape == expected.shape
    assert torch.allclose(got, expected, atol=1e-5)
    unflagged, _ = crag_sdpa_attention(module, query, key, value, mask, scaling=0.3)
    assert torch.equal(unflagged, expected)  # without the flag: transformers' SDPA as it is


def test_the_step_decoder_decodes_with_the_decode_attention(
    tiny_lm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = LocalChatModel(model_path=str(tiny_lm), max_new_tokens=4, dtype="float32")
    calls: list[int] = []
    original = decode_attention._decode_attention

    def counting(query: Any, *args: Any) -> Any:
        calls.append(query.shape[0])
        return original(query, *args)

    monkeypatch.setattr(decode_attention, "_decode_attention", counting)
    alone = model._generate_alone(GenerationRequest([5, 6, 7], 4))
    assert calls == [], "generate keeps transformers' attention"
    requests = [GenerationRequest([5, 6, 7], 4), GenerationRequest([8, 9], 4)]
    _decode_staggered(model, requests)
    assert model._model.config._attn_implementation == decode_attention.IMPLEMENTATION
    assert calls and max(calls) == 2  # both rows in one call, once per layer and step
    assert requests[0].output == alone
