"""A cancelled run stops its model work early and frees the shared model within a second or two.

Under ``ainvoke``/``astream`` the sync nodes run on worker threads; cancelling the run's task
cancels its token, and scoring (between batches) and generation (at the next token) stop, which
releases the model's lock for the next run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage, HumanMessage

from crag.app.wiring import LockedEvaluator
from crag.core.cancellation import (
    CancelToken,
    RunCancelledError,
    cancellation_scope,
    current_token,
    holding,
    raise_if_cancelled,
)
from crag.evaluator.embedding import EmbeddingEvaluator
from crag.evaluator.llm import LLMEvaluator
from crag.generator.local import LocalChatModel
from crag.graph.builder import build_graph
from tests.fakes import (
    FakeComponents,
    FixedScoreEvaluator,
    ScriptedChatModel,
    StaticSearch,
    StaticStore,
    app_components,
    corpus_documents,
    scripted_chat,
)
from tests.tiny_causal_lm import build_tiny_causal_lm

QUESTION = "Who painted the Mona Lisa?"
FREED_WITHIN = 2.0
"""Seconds from cancelling a run until another run can take the model it was using."""


# -- the token, the scope and lock waits --------------------------------------------------------


def test_tokens_scopes_and_parents() -> None:
    assert current_token() is None
    raise_if_cancelled()  # outside a cancellable run: nothing to do
    with cancellation_scope() as outer:
        assert current_token() is outer
        with cancellation_scope() as inner:
            assert current_token() is inner and not inner.cancelled
            outer.cancel()
            assert inner.cancelled  # a child is cancelled with its parent
            with pytest.raises(RunCancelledError):
                raise_if_cancelled()
        assert current_token() is outer
    assert current_token() is None
    assert issubclass(RunCancelledError, BaseException)
    assert not issubclass(RunCancelledError, Exception)  # `except Exception` cannot swallow it


def test_a_cancelled_run_stops_waiting_for_a_lock() -> None:
    lock = threading.Lock()
    lock.acquire()  # another run holds the model
    outcome: list[BaseException | None] = []
    tokens: list[CancelToken] = []

    def wait_for_model() -> None:
        with cancellation_scope() as token:
            tokens.append(token)
            try:
                with holding(lock):
                    outcome.append(None)
            except RunCancelledError as exc:
                outcome.append(exc)

    waiter = threading.Thread(target=wait_for_model)
    waiter.start()
    time.sleep(0.2)
    started = time.monotonic()
    tokens[0].cancel()
    waiter.join(timeout=5)
    assert time.monotonic() - started < 1.0
    assert len(outcome) == 1 and isinstance(outcome[0], RunCancelledError)
    lock.release()
    with holding(lock):  # outside a cancellable run: a plain `with lock`
        assert lock.locked()
    assert not lock.locked()


# -- scoring ------------------------------------------------------------------------------------


class SlowEmbeddings(Embeddings):
    """Fixed 2-d vectors; every ``embed_documents`` call blocks its thread for ``delay`` s."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.calls = 0
        self.started = threading.Event()
        self.on_call: Callable[[], None] = lambda: None

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        self.started.set()
        self.on_call()
        time.sleep(self.delay)
        return [[1.0, float(len(text) % 3)] for text in texts]


def many_passages(count: int) -> list[Document]:
    return [
        Document(
            page_content=f"Passage {i}: Leonardo da Vinci painted the Mona Lisa{'.' * i}",
            metadata={"source": f"doc:{i}", "chunk": 0},
        )
        for i in range(count)
    ]


def test_embedding_evaluator_chunks_give_the_same_scores() -> None:
    passages = ["short", "a much longer passage " * 5, "", "medium length text", "x" * 40]
    chunked = EmbeddingEvaluator(SlowEmbeddings(0.0), chunk_size=2)
    whole = EmbeddingEvaluator(SlowEmbeddings(0.0), chunk_size=100)
    assert chunked.score(QUESTION, passages) == whole.score(QUESTION, passages)
    assert chunked.embeddings.calls == 2  # type: ignore[attr-defined]  # 4 non-empty, 2 a call


def test_cancelling_ainvoke_mid_grade_frees_the_evaluator_for_the_next_run() -> None:
    """Grading 10 passages takes 4 s here; a cancel frees the model after the chunk in progress."""
    embeddings = SlowEmbeddings(delay=0.4)
    lock = threading.Lock()
    evaluator = LockedEvaluator(EmbeddingEvaluator(embeddings, chunk_size=1), lock)
    components = FakeComponents(
        store=StaticStore(many_passages(10)), scorer=evaluator, chat=scripted_chat()
    )
    graph = build_graph(components=components)

    async def main() -> tuple[float, dict[str, Any]]:
        first = asyncio.create_task(graph.ainvoke({"question": QUESTION}))
        assert await asyncio.to_thread(embeddings.started.wait, 30)
        cancelled_at = time.monotonic()
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        embeddings.delay = 0.0  # the next run's scoring is quick: only the wait is measured
        second = await graph.ainvoke({"question": QUESTION})
        return time.monotonic() - cancelled_at, second

    elapsed, second = asyncio.run(main())
    assert elapsed < FREED_WITHIN, f"the next run waited {elapsed:.1f} s for the evaluator"
    assert second["answer"] == "Leonardo da Vinci."
    # The first run scored 1-2 of its 10 passages; the second run scored its 10 and refined.
    assert embeddings.calls < 10 + 10 + 10
    assert not lock.locked()


def test_llm_evaluator_stops_between_prompts() -> None:
    with cancellation_scope() as token:

        def respond(messages: list[BaseMessage]) -> str:
            token.cancel()
            return "Yes"

        chat = ScriptedChatModel(respond=respond, prompts=[])
        with pytest.raises(RunCancelledError):
            LLMEvaluator(chat).score(QUESTION, ["one", "two", "three"])
    assert len(chat.prompts) == 1


def test_t5_and_cross_encoder_stop_between_batches(tmp_path: Path) -> None:
    from crag.evaluator.cross_encoder import CrossEncoderEvaluator
    from crag.evaluator.t5 import T5Evaluator
    from tests.tiny_cross_encoder import build_tiny_cross_encoder
    from tests.tiny_t5 import build_tiny_t5

    passages = ["Leonardo da Vinci painted it.", "Paris is in France.", "The fox jumps."]
    t5 = T5Evaluator(str(build_tiny_t5(tmp_path / "t5")), batch_size=1)
    reference = t5.score(QUESTION, passages)
    calls: list[int] = []
    with cancellation_scope() as token:
        forward = t5._forward

        def t5_forward(batch: list[list[int]]) -> list[float]:
            calls.append(len(batch))
            token.cancel()
            return forward(batch)

        t5._forward = t5_forward  # type: ignore[method-assign]
        with pytest.raises(RunCancelledError):
            t5.score(QUESTION, passages)
    assert calls == [1]
    t5._forward = forward  # type: ignore[method-assign]
    assert t5.score(QUESTION, passages) == reference  # outside a cancellable run: all batches

    ce = CrossEncoderEvaluator(str(build_tiny_cross_encoder(tmp_path / "ce")), batch_size=1)
    reference = ce.score(QUESTION, passages)
    predict = ce._model.predict
    batches: list[int] = []
    with cancellation_scope() as token:

        def ce_predict(pairs: Sequence[Any], **kwargs: Any) -> Any:
            batches.append(len(pairs))
            token.cancel()
            return predict(pairs, **kwargs)

        ce._model.predict = ce_predict
        with pytest.raises(RunCancelledError):
            ce.score(QUESTION, passages)
    assert batches == [1]
    ce._model.predict = predict
    assert ce.score(QUESTION, passages) == pytest.approx(reference, abs=1e-6)


# -- generation ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny_lm"))


class CountingForwards:
    """Counts a model's forward passes (one per generated token after the prompt's)."""

    def __init__(self, chat: LocalChatModel) -> None:
        self.count = 0
        self.started = threading.Event()
        chat._model.register_forward_hook(self.hook)

    def hook(self, *args: Any) -> None:
        self.count += 1
        if self.count >= 3:
            self.started.set()


@pytest.mark.parametrize("mode", ["ainvoke", "astream"])
def test_cancelling_a_run_mid_generation_frees_the_generator(tiny_lm: Path, mode: str) -> None:
    """400 greedy tokens take well over ten seconds here; a cancel stops at the next token."""
    chat = LocalChatModel(model_path=str(tiny_lm), max_new_tokens=400, dtype="float32")
    forwards = CountingForwards(chat)
    components = FakeComponents(
        store=StaticStore(corpus_documents()),
        scorer=FixedScoreEvaluator({"Leonardo": 0.9}),
        chat=chat,
        web=StaticSearch(error="search is off in this test"),
    )
    graph = build_graph(components=components)

    async def run() -> dict[str, Any]:
        if mode == "ainvoke":
            return dict(await graph.ainvoke({"question": QUESTION}))
        async for _ in graph.astream({"question": QUESTION}, stream_mode=["messages"]):
            pass  # the generator streams token by token (its own decoding thread)
        return {}

    async def main() -> tuple[float, int, dict[str, Any]]:
        first = asyncio.create_task(run())
        assert await asyncio.to_thread(forwards.started.wait, 60)
        cancelled_at = time.monotonic()
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        chat.max_new_tokens = 3  # the next run answers quickly: only the wait is measured
        second = await graph.ainvoke({"question": QUESTION})
        return time.monotonic() - cancelled_at, forwards.count, dict(second)

    elapsed, count, second = asyncio.run(main())
    assert elapsed < FREED_WITHIN, f"the next run waited {elapsed:.1f} s for the generator"
    assert count < 100, f"the cancelled run went on generating ({count} forward passes)"
    assert second["answer"]  # the second run got the model and answered
    assert not chat._lock.locked()


def test_sync_runs_generate_in_full(tiny_lm: Path) -> None:
    chat = LocalChatModel(model_path=str(tiny_lm), max_new_tokens=5, dtype="float32")
    reply = chat.invoke([HumanMessage("who painted the mona lisa")])
    assert reply.usage_metadata is not None and reply.usage_metadata["output_tokens"] == 5
    with cancellation_scope():
        streamed = list(chat.stream([HumanMessage("who painted the mona lisa")]))
    assert "".join(chunk.text for chunk in streamed).strip() == reply.text


# -- Ctrl-C in `crag ask` -----------------------------------------------------------------------


@dataclass
class SignalledRun:
    """An Ambiguous run of ``crag ask`` that sends ``signum`` to this process mid-refine.

    Grades of 0.0 lie between the paper's thresholds: Ambiguous, so refine and rewrite_query
    run in parallel on worker threads while the main thread waits for them. The signal is sent
    once refine is scoring its strips (the evaluator's second slow call), not at a fixed time,
    so it cannot land before the parallel branch runs on a loaded machine. Shared by the Ctrl-C
    test here and the SIGTERM one (``tests/unit/test_cli_sigterm.py``).
    """

    signum: int
    embeddings: SlowEmbeddings = field(default_factory=lambda: SlowEmbeddings(delay=0.4))
    lock: threading.Lock = field(default_factory=threading.Lock)
    sent_at: list[float] = field(default_factory=list)

    def components(self) -> FakeComponents:
        evaluator = LockedEvaluator(EmbeddingEvaluator(self.embeddings, chunk_size=1), self.lock)
        self.embeddings.on_call = self._send_once
        return FakeComponents(
            store=StaticStore(many_passages(10)),
            scorer=AmbiguousThenSlow(evaluator),
            chat=scripted_chat(),
        )

    def _send_once(self) -> None:
        if self.embeddings.calls == 2 and not self.sent_at:
            self.sent_at.append(time.monotonic())
            os.kill(os.getpid(), self.signum)

    def ask(self) -> tuple[int, float]:
        """``crag ask`` of :data:`QUESTION` in this process: its exit code, and when it returned."""
        from crag.app.cli.commands import main

        with app_components(self.components()):
            code = main(["ask", "-q", QUESTION])
            return code, time.monotonic()

    def assert_stopped_in_time(self, returned_at: float) -> None:
        """The signal was sent, the command returned soon after, refine stopped, nothing held."""
        assert self.sent_at, "refine never scored its strips"
        elapsed = returned_at - self.sent_at[0]
        assert elapsed < FREED_WITHIN, f"the command took {elapsed:.1f} s to return"
        assert self.embeddings.calls < 10  # refine stopped scoring its 10 strips
        assert not self.lock.locked()


@pytest.mark.skipif(os.name != "posix", reason="sends SIGINT to this process")
def test_ctrl_c_in_crag_ask_stops_the_parallel_branch(capsys: pytest.CaptureFixture[str]) -> None:
    """Ambiguous: refine runs on a worker thread that KeyboardInterrupt does not reach."""
    run = SignalledRun(signal.SIGINT)
    # As in a terminal: a shell starts background jobs with SIGINT ignored, which `crag ask`
    # then leaves alone (it only wraps a callable handler).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code, returned_at = run.ask()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == 130
    assert "interrupted" in capsys.readouterr().err
    run.assert_stopped_in_time(returned_at)


class AmbiguousThenSlow:
    """Grades every passage 0.0 at once (Ambiguous), then scores strips slowly (refine)."""

    name = "ambiguous-then-slow"

    def __init__(self, slow: LockedEvaluator) -> None:
        self.slow = slow
        self.graded = False

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        if not self.graded:
            self.graded = True
            return [0.0] * len(passages)
        return self.slow.score(question, passages)
