"""Asked for, a lone reply is decoded on the faster thread count; by default on torch's threads.

The choice's rule is checked with given step times; its hooks with a tiny bfloat16 Llama (which
thread count each forward pass ran on, the count given back afterwards, the tokens unchanged,
float32 left alone); and that it is off unless asked for, since on some CPUs (an Intel Xeon
with AMX) SmolLM2's bfloat16 logits differ between one thread and two (docs/models.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage

from crag.generator import local
from crag.generator.local import LocalChatModel
from crag.generator.thread_choice import ThreadChoice
from tests.tiny_causal_lm import build_tiny_causal_lm

MESSAGES = [
    SystemMessage("answer the question"),
    HumanMessage("who painted the mona lisa leonardo da vinci paris louvre"),
]


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny_lm"))


@pytest.fixture
def two_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Torch on two threads (the suite's workers run one), on a CPU taken as native bfloat16."""
    import torch

    monkeypatch.setattr(local, "cpu_has_native_bfloat16", lambda: True)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _threads_per_forward(model: Any) -> tuple[list[int], Any]:
    """Record torch's thread count inside each forward pass (at the first layer)."""
    import torch

    seen: list[int] = []
    layer = model.model.layers[0]
    handle = layer.register_forward_pre_hook(lambda *_: seen.append(torch.get_num_threads()))
    return seen, handle


def test_each_count_is_timed_first_then_the_faster_is_used() -> None:
    choice = ThreadChoice(probe_every=100)
    assert choice.prompt_threads((2, 1)) == 2  # nothing timed: the process's count
    assert choice.step_threads((2, 1)) == 2
    choice.record(2, 0.080)
    assert choice.step_threads((2, 1)) == 1
    choice.record(1, 0.040)
    assert [choice.step_threads((2, 1)) for _ in range(3)] == [1, 1, 1]
    assert choice.prompt_threads((2, 1)) == 1


def test_the_choice_follows_the_latest_step_and_tries_the_other_periodically() -> None:
    choice = ThreadChoice(probe_every=4)
    choice.record(2, 0.030)
    choice.record(1, 0.040)
    assert [choice.step_threads((2, 1)) for _ in range(3)] == [2, 2, 2]
    assert choice.step_threads((2, 1)) == 1  # the fourth step tries the slower count again
    choice.record(1, 0.045)
    assert choice.step_threads((2, 1)) == 2
    choice.record(2, 0.190)  # the second core became busy: two threads now lose
    assert choice.step_threads((2, 1)) == 1
    assert choice.prompt_threads((2, 1)) == 1


def test_probe_every_must_be_positive() -> None:
    with pytest.raises(ValueError, match="probe_every"):
        ThreadChoice(probe_every=0)


def _clock(step_seconds: list[float]) -> Any:
    """A clock under which the decoding steps take ``step_seconds``, one after the other."""

    def readings() -> Iterator[float]:
        now = 0.0
        for seconds in step_seconds:
            yield now
            now += seconds
            yield now

    return readings().__next__


def test_forward_passes_run_on_their_choice_and_the_count_is_given_back(
    tiny_path: Path, two_threads: None
) -> None:
    import torch

    model = LocalChatModel(
        model_path=str(tiny_path), max_new_tokens=6, dtype="bfloat16", choose_threads=True
    )
    # the first step (two threads) takes 50 ms, the second (one) 20 ms, the next ones 20 ms
    model._threads = ThreadChoice(probe_every=100, clock=_clock([0.05] + [0.02] * 9))
    seen, handle = _threads_per_forward(model._model)
    try:
        model.invoke(MESSAGES)
        assert seen == [2, 2, 1, 1, 1, 1]  # the prompt, then five decoding steps
        assert torch.get_num_threads() == 2
        model.invoke(MESSAGES)  # the next reply reads its prompt on the faster count too
    finally:
        handle.remove()
    assert seen[6:] == [1] * 6
    assert torch.get_num_threads() == 2


def test_a_reply_is_the_same_with_the_choice_on_one_thread_and_on_two(
    tiny_path: Path, two_threads: None
) -> None:
    import torch

    model = LocalChatModel(
        model_path=str(tiny_path), max_new_tokens=12, dtype="bfloat16", choose_threads=True
    )
    model._threads = ThreadChoice(probe_every=2)  # switches often
    reply = model.invoke(MESSAGES)
    chosen = reply.text
    streamed = "".join(chunk.text for chunk in model.stream(MESSAGES))
    model.choose_threads = False
    fixed = {}
    for count in (2, 1):
        torch.set_num_threads(count)
        fixed[count] = model.invoke(MESSAGES).text
    torch.set_num_threads(2)
    assert chosen == streamed == fixed[2] == fixed[1]
    assert reply.usage_metadata is not None
    assert reply.usage_metadata["output_tokens"] == 12


def test_float32_and_one_thread_are_left_alone(tiny_path: Path, two_threads: None) -> None:
    import torch

    model = LocalChatModel(
        model_path=str(tiny_path), max_new_tokens=4, dtype="float32", choose_threads=True
    )
    model._threads = ThreadChoice(probe_every=1, clock=_clock([0.05, 0.01] * 10))
    seen, handle = _threads_per_forward(model._model)
    try:
        model.invoke(MESSAGES)
        torch.set_num_threads(1)
        model.invoke(MESSAGES)
    finally:
        handle.remove()
        torch.set_num_threads(2)
    assert seen == [2, 2, 2, 2, 1, 1, 1, 1]


def test_the_choice_is_off_unless_asked_for(tiny_path: Path, two_threads: None) -> None:
    """A bfloat16 model made with the defaults reads and decodes on torch's threads throughout,
    even when one thread would be timed faster: its answer cannot depend on the CPU's kernels."""
    model = LocalChatModel(model_path=str(tiny_path), max_new_tokens=4, dtype="bfloat16")
    assert model.choose_threads is False
    model._threads = ThreadChoice(probe_every=1, clock=_clock([0.05, 0.01] * 10))
    seen, handle = _threads_per_forward(model._model)
    try:
        model.invoke(MESSAGES)
        model.invoke(MESSAGES)
    finally:
        handle.remove()
    assert seen == [2] * 8
