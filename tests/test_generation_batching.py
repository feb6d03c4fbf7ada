"""Overlapping generation requests share one padded ``generate`` call, each getting its own.

The batcher is checked with a scripted batch runner (which requests ran together, in what
order, errors); the local chat model with a tiny Llama built from a config: prompts of
different lengths decoded in one batch give the tokens each gives alone.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage, SystemMessage

from generator.batching import GenerationBatcher, GenerationRequest
from generator.local import LocalChatModel
from tests.tiny_causal_lm import build_tiny_causal_lm


class ScriptedRunner:
    """Answers each request with its prompt reversed; the first batch waits to be released."""

    def __init__(self) -> None:
        self.batches: list[list[list[int]]] = []
        self.first_started = threading.Event()
        self.release_first = threading.Event()

    def __call__(self, requests: Sequence[GenerationRequest]) -> list[list[int]]:
        self.batches.append([r.input_ids for r in requests])
        if len(self.batches) == 1:
            self.first_started.set()
            assert self.release_first.wait(10)
        return [list(reversed(r.input_ids)) for r in requests]


def _submit_while_busy(
    batcher: GenerationBatcher, runner: ScriptedRunner, later: list[GenerationRequest]
) -> list[list[int]]:
    """Run one request, queue ``later`` while it runs, then let everything finish."""
    with ThreadPoolExecutor(len(later) + 1) as pool:
        first = pool.submit(batcher.generate, GenerationRequest([0], 8))
        assert runner.first_started.wait(10)
        futures = [pool.submit(batcher.generate, r) for r in later]
        for _ in range(1000):  # until every later request waits in the queue
            if len(batcher._pending) == len(later):
                break
            threading.Event().wait(0.01)
        runner.release_first.set()
        assert first.result(10) == [0]
        return [f.result(10) for f in futures]


def test_requests_that_queue_while_the_model_is_busy_run_as_one_batch() -> None:
    runner = ScriptedRunner()
    batcher = GenerationBatcher(runner, max_batch_size=8)
    later = [GenerationRequest([i, i + 1, i + 2], 8) for i in range(1, 6)]
    outputs = _submit_while_busy(batcher, runner, later)
    assert outputs == [[i + 2, i + 1, i] for i in range(1, 6)]
    assert batcher.batch_sizes == [1, 5]
    assert sorted(runner.batches[1]) == sorted(r.input_ids for r in later)


def test_batches_hold_at_most_the_batch_size_and_only_equal_settings() -> None:
    runner = ScriptedRunner()
    batcher = GenerationBatcher(runner, max_batch_size=2)
    later = [
        GenerationRequest([1], 8),
        GenerationRequest([2], 16),
        GenerationRequest([3], 8),
        GenerationRequest([4], 8),
        GenerationRequest([5], 8, stop=("\n",)),
    ]
    outputs = _submit_while_busy(batcher, runner, later)
    assert outputs == [[1], [2], [3], [4], [5]]
    assert max(batcher.batch_sizes) == 2
    assert sum(batcher.batch_sizes) == 6
    for batch in runner.batches[1:]:
        keys = {next(r.key for r in later if r.input_ids == ids) for ids in batch}
        assert len(keys) == 1, f"settings mixed in one batch: {batch}"


def test_prompts_of_very_different_lengths_are_not_padded_into_one_batch() -> None:
    runner = ScriptedRunner()
    batcher = GenerationBatcher(runner, max_batch_size=8)
    short = [GenerationRequest([i] * 10, 8) for i in range(1, 4)]
    long = [GenerationRequest([i] * 1000, 8) for i in range(4, 6)]
    outputs = _submit_while_busy(batcher, runner, [short[0], long[0], short[1], long[1], short[2]])
    assert outputs == [r.input_ids for r in (short[0], long[0], short[1], long[1], short[2])]
    assert sorted(len(b) for b in runner.batches[1:]) == [2, 3]
    for batch in runner.batches[1:]:
        lengths = {len(ids) for ids in batch}
        assert len(lengths) == 1, f"a short prompt was padded to a long one: {lengths}"


def test_a_lone_request_runs_at_once_as_a_batch_of_one() -> None:
    calls: list[int] = []

    def run(requests: Sequence[GenerationRequest]) -> list[list[int]]:
        calls.append(len(requests))
        return [[7] for _ in requests]

    batcher = GenerationBatcher(run)
    assert batcher.generate(GenerationRequest([1, 2], 4)) == [7]
    assert batcher.generate(GenerationRequest([3], 4)) == [7]
    assert calls == [1, 1]


def test_an_error_reaches_every_request_of_its_batch_and_the_batcher_goes_on() -> None:
    failing = True

    def run(requests: Sequence[GenerationRequest]) -> list[list[int]]:
        if failing:
            raise RuntimeError("out of memory")
        return [[1] for _ in requests]

    batcher = GenerationBatcher(run)
    with pytest.raises(RuntimeError, match="out of memory"):
        batcher.generate(GenerationRequest([1], 4))
    failing = False
    assert batcher.generate(GenerationRequest([1], 4)) == [1]


def test_batch_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_batch_size must be at least 1"):
        GenerationBatcher(lambda requests: [], max_batch_size=0)


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny_lm"))


def test_prompts_decoded_together_get_the_answers_they_get_alone(tiny_lm: Path) -> None:
    model = LocalChatModel(model_path=str(tiny_lm), max_new_tokens=6, dtype="float32")
    questions = [
        "who painted the mona lisa",
        "who",
        "was it leonardo da vinci in paris in the louvre",
        "the louvre is in paris",
    ]
    prompts = [[SystemMessage("answer the question"), HumanMessage(q)] for q in questions]
    alone = [model.invoke(p).text for p in prompts]
    assert model._batcher is not None
    requests = [GenerationRequest(model._encode(p)["input_ids"][0].tolist(), 6) for p in prompts]
    together = model._generate_batch(requests)
    decoded = [model._tokenizer.decode(t, skip_special_tokens=True).strip() for t in together]
    assert decoded == alone
    assert all(len(t) == 6 for t in together)  # no end token: each row runs to the limit


def test_concurrent_invokes_are_batched_and_each_gets_its_own_answer(tiny_lm: Path) -> None:
    model = LocalChatModel(model_path=str(tiny_lm), max_new_tokens=6, dtype="float32")
    assert model.max_batch_size == 1, "batching is off unless asked for"
    prompts = [[HumanMessage(f"who painted the {w}")] for w in ("mona lisa", "louvre", "it")] * 4
    alone = [model.invoke(p).text for p in prompts]
    assert model._batcher is not None
    model.enable_batching(8)
    assert model._batcher.max_batch_size == 8
    with pytest.raises(ValueError, match="at least 1"):
        model.enable_batching(0)
    before = len(model._batcher.batch_sizes)
    with ThreadPoolExecutor(len(prompts)) as pool:
        together = list(pool.map(lambda p: model.invoke(p).text, prompts))
    assert together == alone
    assert sum(model._batcher.batch_sizes[before:]) == len(prompts)
