"""With batching on, the shipped generator's answer does not depend on what else it decodes.

The served generator (``generator_batch_size`` above 1, ``make serve``: 8) decodes the requests
of overlapping runs together. Its dtype is ``auto``, so it computes in float32 then, and each
answer below, decoded in a batch with the others, equals the same prompt decoded alone: by the
batcher with nothing else in it (how a lone served run is decoded) and by ``generate`` with
batching off. The prompts are the generator's own, over the bundled summaries that answer
``crag-bench server``'s questions, and two of them closed book.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from crag.generator.local import LocalChatModel
from crag.prompts.generate import CLOSED_BOOK_SYSTEM, GENERATE_HUMAN, GENERATE_SYSTEM, NO_ANSWER

QUESTIONS = {
    "Mona Lisa": "Who painted the Mona Lisa?",
    "Hamlet": "Who wrote Hamlet?",
    "Mount Everest": "What is the highest mountain on Earth?",
    "Penicillin": "Who discovered penicillin?",
}


def _prompts() -> list[list[BaseMessage]]:
    from crag.vectorstore.corpus import load_corpus

    pages = {d.title: d.text for d in load_corpus() if d.title in QUESTIONS}
    grounded: list[list[BaseMessage]] = [
        [
            SystemMessage(GENERATE_SYSTEM.format(no_answer=NO_ANSWER)),
            HumanMessage(GENERATE_HUMAN.format(knowledge=f"[1] {pages[t]}", question=q)),
        ]
        for t, q in QUESTIONS.items()
    ]
    closed: list[list[BaseMessage]] = [
        [SystemMessage(CLOSED_BOOK_SYSTEM), HumanMessage(q)] for q in list(QUESTIONS.values())[:2]
    ]
    return grounded + closed


@pytest.fixture(scope="module")
def generator() -> LocalChatModel:
    """The shipped SmolLM2, its own instance (batching is turned on and off here)."""
    from crag.generator.smollm2 import ensure_smollm2

    return LocalChatModel(model_path=str(ensure_smollm2()), max_new_tokens=24)


def test_batched_answers_equal_the_answers_decoded_alone(generator: LocalChatModel) -> None:
    import torch

    prompts = _prompts()
    generator.enable_batching(8)  # as the served setting does, after loading
    assert generator._model.dtype == torch.float32
    with ThreadPoolExecutor(len(prompts)) as pool:
        together = list(pool.map(lambda p: generator.invoke(p).text, prompts))
    assert generator._batcher is not None
    assert max(generator._batcher.step_sizes) > 2, "the answers shared decoding steps"
    lone_in_batcher = [generator.invoke(p).text for p in prompts]
    generator.enable_batching(1)
    by_generate = [generator.invoke(p).text for p in prompts]
    assert together == lone_in_batcher == by_generate
    assert all(together), "every prompt got an answer"
    assert "Leonardo" in together[0]
