"""A run cancelled while the generator reads its prompt lets go of the model within one layer.

A prompt is read in one forward pass, and the stopping criteria that stop a cancelled run are
only asked between generated tokens; so a run cancelled during a long prompt read kept the
model until the read was over (8.6-9.2 s for the next run with SmolLM2 on 2 CPU cores).
:func:`crag.generator.step_decoding.stop_when_cancelled` checks the run's token before each of the
model's layers. The tiny model here has two layers; hooks make its prompt read slow.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from crag.core.cancellation import CancelToken, RunCancelledError, cancellation_scope
from crag.generator.batching import GenerationBatcher, GenerationRequest
from crag.generator.local import LocalChatModel
from crag.generator.step_decoding import StepDecoder, stop_when_cancelled
from tests.tiny_causal_lm import build_tiny_causal_lm

LAYER_SECONDS = 1.5
"""How long each of the tiny model's two layers takes to read a prompt (a hook sleeps)."""

QUESTION = "who painted the mona lisa"


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny_lm"))


@pytest.fixture
def chat(tiny_lm: Path) -> LocalChatModel:
    return LocalChatModel(model_path=str(tiny_lm), max_new_tokens=4, dtype="float32")


def _layers(chat: LocalChatModel) -> list[Any]:
    layers = list(chat._model.model.layers)
    assert len(layers) == 2
    return layers


def _prompt(chat: LocalChatModel, question: str = QUESTION) -> list[int]:
    ids: list[int] = chat._encode([HumanMessage(question)])["input_ids"][0].tolist()
    return ids


@pytest.fixture
def layer_calls(chat: LocalChatModel) -> Iterator[list[tuple[int, int]]]:
    """(layer, positions) of every layer of the tiny model that ran, in order."""
    calls: list[tuple[int, int]] = []
    handles = [
        layer.register_forward_hook(
            lambda module, args, output, i=index: calls.append((i, args[0].shape[1]))
        )
        for index, layer in enumerate(_layers(chat))
    ]
    yield calls
    for handle in handles:
        handle.remove()


def _after_layer(chat: LocalChatModel, index: int, action: Callable[[int], None]) -> Any:
    """Run ``action(positions)`` after layer ``index`` of every forward pass; returns the hook."""
    return _layers(chat)[index].register_forward_hook(
        lambda module, args, output: action(args[0].shape[1])
    )


# -- the check before each layer -----------------------------------------------------------------


def test_a_prompt_read_stops_before_the_next_layer_once_cancelled(
    chat: LocalChatModel, layer_calls: list[tuple[int, int]]
) -> None:
    prompt = _prompt(chat)
    token = CancelToken()
    _after_layer(chat, 0, lambda positions: token.cancel())  # cancelled mid-read
    decoder = StepDecoder(chat._model, chat._tokenizer)
    with pytest.raises(RunCancelledError):
        decoder.admit(GenerationRequest(prompt, 4, token=token))
    assert layer_calls == [(0, len(prompt))], "layer 1 read the prompt of a cancelled run"
    assert decoder.size == 0


def test_generate_stops_mid_read_too(
    chat: LocalChatModel, layer_calls: list[tuple[int, int]]
) -> None:
    """What ``LocalChatModel.generate`` needs to stop alike: its ``generate`` inside the check."""
    import torch

    prompt = _prompt(chat)
    token = CancelToken()
    _after_layer(chat, 0, lambda positions: token.cancel())
    ids = torch.tensor([prompt])
    with pytest.raises(RunCancelledError), stop_when_cancelled(chat._model, token):
        chat._model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=4)
    assert layer_calls == [(0, len(prompt))]


def test_the_check_changes_nothing_and_goes_away(
    chat: LocalChatModel, layer_calls: list[tuple[int, int]]
) -> None:
    prompt = _prompt(chat)
    alone = chat._generate_alone(GenerationRequest(prompt, 4))
    decoder = StepDecoder(chat._model, chat._tokenizer)
    request = GenerationRequest(prompt, 4, token=CancelToken())  # never cancelled
    decoder.admit(request)
    while decoder.size:
        decoder.step()
        decoder.take_finished()
    assert request.output == alone
    assert all(not layer._forward_pre_hooks for layer in _layers(chat)), "checks left behind"


# -- the batcher ---------------------------------------------------------------------------------


def test_a_row_cancelled_mid_read_ends_alone_and_the_batch_goes_on(chat: LocalChatModel) -> None:
    kept_prompt, cancelled_prompt = _prompt(chat), _prompt(chat, "who")
    assert len(kept_prompt) != len(cancelled_prompt)
    alone = chat._generate_alone(GenerationRequest(kept_prompt, 4))
    kept = GenerationRequest(kept_prompt, 4, token=CancelToken())
    cancelled = GenerationRequest(cancelled_prompt, 4, token=CancelToken())

    def cancel_while_reading(positions: int) -> None:
        if positions == len(cancelled_prompt):
            assert cancelled.token is not None
            cancelled.token.cancel()

    _after_layer(chat, 0, cancel_while_reading)
    batcher = GenerationBatcher(StepDecoder(chat._model, chat._tokenizer), max_batch_size=2)
    outputs: dict[str, list[int]] = {}
    threads = [
        threading.Thread(target=lambda r=r, n=n: outputs.__setitem__(n, batcher.generate(r)))
        for r, n in ((kept, "kept"), (cancelled, "cancelled"))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert outputs == {"kept": alone, "cancelled": []}


def test_cancelling_during_a_long_prompt_read_frees_the_generator_promptly(
    chat: LocalChatModel,
) -> None:
    """The prompt read takes 3 s; cancelled just after it began, the run ends within ~1.5 s."""
    chat.enable_batching(2)
    reading = threading.Event()

    def slow_read(positions: int) -> None:
        if positions > 1:  # the prompt, not a decoding step
            reading.set()
            time.sleep(LAYER_SECONDS)

    for index in (0, 1):
        _after_layer(chat, index, slow_read)
    outcome: list[BaseException | None] = []
    tokens: list[CancelToken] = []

    def ask() -> None:
        with cancellation_scope() as token:
            tokens.append(token)
            try:
                chat.invoke([HumanMessage(QUESTION)])
                outcome.append(None)
            except RunCancelledError as exc:
                outcome.append(exc)

    run = threading.Thread(target=ask)
    run.start()
    assert reading.wait(30)
    cancelled_at = time.monotonic()
    tokens[0].cancel()
    run.join(timeout=30)
    elapsed = time.monotonic() - cancelled_at
    assert len(outcome) == 1 and isinstance(outcome[0], RunCancelledError)
    assert elapsed < LAYER_SECONDS + 0.5, f"the cancelled prompt read went on for {elapsed:.1f} s"
    # the decoding thread hands the request back just before it lets go of the model
    assert chat._lock.acquire(timeout=1.0), "the model's lock was not released"
    chat._lock.release()
