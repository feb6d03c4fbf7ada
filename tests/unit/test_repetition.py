"""The reply n-gram guard: no reply repeats an n-gram of its own, the prompt may be copied."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from langchain_core.messages import BaseMessage, HumanMessage

from crag.generator.batching import GenerationRequest
from crag.generator.local import LocalChatModel
from crag.generator.repetition import ReplyNGramBlocker, banned_tokens, block_repeats
from crag.generator.step_decoding import StepDecoder
from crag_bench.answers import is_looping
from tests.tiny_causal_lm import build_tiny_causal_lm


def test_banned_tokens_complete_a_repeated_ngram_only() -> None:
    assert banned_tokens([5, 6, 7, 5, 6], 3) == {7}
    assert banned_tokens([5, 6, 7, 5, 6], 4) == set()
    assert banned_tokens([1, 1, 1], 2) == {1}
    assert banned_tokens([1, 2], 3) == set() and banned_tokens([1, 2, 1], 0) == set()


def test_the_prompt_is_not_counted() -> None:
    prompt = [5, 6, 7, 5, 6]
    scores = torch.zeros((1, 10))
    guarded = ReplyNGramBlocker(prompt_length=len(prompt), size=3)(
        torch.tensor([[*prompt, 5, 6]]), scores.clone()
    )
    assert torch.isfinite(guarded).all()  # 5 6 7 is in the prompt, not in the reply
    guarded = ReplyNGramBlocker(prompt_length=2, size=3)(torch.tensor([[*prompt, 5, 6]]), scores)
    # the reply is 7 5 6 5 6: after "5 6" came "5" once, so "5" may not come again
    assert guarded[0, 5] == float("-inf") and torch.isfinite(guarded[0, 6:]).all()
    rows = block_repeats(torch.zeros((2, 4)), [[1, 2, 1], [3]], 2)
    assert rows[0, 2] == float("-inf") and torch.isfinite(rows[1]).all()


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny_lm"))


def _has_repeat(tokens: list[int], size: int) -> bool:
    grams = [tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1)]
    return len(grams) != len(set(grams))


def test_a_looping_model_no_longer_loops_alone_or_in_a_batch(tiny_lm: Path) -> None:
    """The tiny random model loops without the guard; with it neither decoding path repeats."""
    prompt: list[BaseMessage] = [HumanMessage("who painted the mona lisa")]
    loose = LocalChatModel(
        model_path=str(tiny_lm), max_new_tokens=40, dtype="float32", no_repeat_ngram_size=0
    )
    ids = loose._encode(prompt)["input_ids"][0].tolist()
    looping = loose._generate_alone(GenerationRequest(ids, 40))
    assert _has_repeat(looping, 4), "the tiny model should loop unguarded"
    guarded = LocalChatModel(model_path=str(tiny_lm), max_new_tokens=40, dtype="float32")
    alone = guarded._generate_alone(GenerationRequest(ids, 40))
    assert not _has_repeat(alone, 4) and len(alone) == 40
    decoder = StepDecoder(guarded._model, guarded._tokenizer, no_repeat_ngram_size=4)
    request = GenerationRequest(ids, 40)
    decoder.admit(request)
    while decoder.size:
        decoder.step()
        decoder.take_finished()
    assert request.output == alone  # both paths guard the same way
    streamed = "".join(chunk.text for chunk in guarded.stream(prompt))
    assert streamed.split() == guarded.invoke(prompt).text.split()


def test_looping_answers_are_recognised() -> None:
    assert is_looping("The Grapes of Wrath: The Grapes of Wrath: The Grapes of Wrath:")
    assert not is_looping("Jane Austen wrote Pride and Prejudice, published in 1813.")
    assert not is_looping("")
