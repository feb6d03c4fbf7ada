"""Streaming (updates, generator tokens, progress events) and async runs, in process.

Stream modes ``updates``, ``messages`` and ``custom`` from ``stream`` and ``astream``; per-page
progress from web search; progress from the ingestion graph; ``crag ask`` printing tokens on
stdout as they come and progress on stderr; ``ainvoke`` keeping every (blocking) model call off
the event loop; and concurrent ``ainvoke`` runs with the real models giving the same answers as
the same questions run one at a time.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langgraph.types import StreamMode

from crag.app.wiring import DefaultComponents, LockedEvaluator
from crag.core.model_locks import model_lock
from crag.graph.builder import build_graph
from crag.graph.ingest_graph import build_ingest_graph
from crag.nodes.ingest_state import InlineDocument
from crag.settings.context import Context, IngestContext
from crag.settings.deployment import DeploymentSettings, deployment_with
from crag.settings.method import MethodConfig
from crag.settings.run_settings import RunSettings
from crag.websearch.cache import clear_web_caches
from tests.fakes import (
    FakeComponents,
    FixedScoreEvaluator,
    StaticSearch,
    StaticStore,
    app_components,
    corpus_documents,
    scripted_chat,
)
from tests.websearch_server import WebsearchServer

QUESTION = "Who painted the Mona Lisa?"
ANSWER = "The Mona Lisa was painted by Leonardo da Vinci."
SOURCES = "Sources:\n  [1] wikipedia:Mona Lisa#0\n"
"""What ``crag ask`` prints under the answer: its one knowledge strip."""
NODES_CORRECT = ["retrieve", "grade", "decide_action", "refine", "decide_answer", "generate"]


class LoopClock:
    """A clock that moves only while an event loop runs: a task on the loop calls ``tick``.

    A fake model "works" for some of its ticks: it blocks its thread until the loop has ticked
    that often since the call began. That happens only while the loop is free; a model call made
    on the loop's own thread would stop the clock, and the call would give up after ``guard``
    seconds of wall-clock time (reached only when the loop is blocked).
    """

    def __init__(self, guard: float = 10.0) -> None:
        self.now = 0
        self.guard = guard
        self._moved = threading.Condition()

    def tick(self) -> None:
        with self._moved:
            self.now += 1
            self._moved.notify_all()

    def block(self, ticks: int) -> bool:
        """Block this thread for ``ticks`` ticks; False if the clock stopped (the loop blocked)."""
        with self._moved:
            until = self.now + ticks
            return self._moved.wait_for(lambda: self.now >= until, timeout=self.guard)


class StreamingChat(BaseChatModel):
    """Answers word by word (``_stream``); rewrite prompts get keywords. Optionally slow."""

    answer: str = ANSWER
    clock: Any = None
    """A :class:`LoopClock`: every call blocks its thread for ``ticks`` of it."""
    ticks: int = 0
    threads: list[str] = []  # noqa: RUF012 (pydantic copies field defaults)
    blocked: list[bool] = []  # noqa: RUF012
    """Per slow call: whether the clock moved on while it blocked."""

    @property
    def _llm_type(self) -> str:
        return "streaming-fake"

    def _reply(self, messages: list[BaseMessage]) -> str:
        self.threads.append(threading.current_thread().name)
        if self.clock is not None:
            self.blocked.append(self.clock.block(self.ticks))
        return "Mona Lisa, painter" if messages[-1].text.startswith("question:") else self.answer

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(self._reply(messages)))])

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Iterator[ChatGenerationChunk]:
        words = self._reply(messages).split(" ")
        for index, word in enumerate(words):
            piece = word if index == 0 else f" {word}"
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
            if run_manager:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk


class SlowEvaluator(FixedScoreEvaluator):
    """A fixed-score evaluator that blocks its thread for ``ticks`` of ``clock`` on every call."""

    def __init__(self, clock: LoopClock, ticks: int) -> None:
        super().__init__({"Leonardo": 0.9})
        self.clock = clock
        self.ticks = ticks
        self.threads: list[str] = []
        self.blocked: list[bool] = []

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        self.threads.append(threading.current_thread().name)
        self.blocked.append(self.clock.block(self.ticks))
        return super().score(question, passages)


def fakes(chat: BaseChatModel | None = None, scorer: Any = None) -> FakeComponents:
    return FakeComponents(
        store=StaticStore(corpus_documents()),
        scorer=scorer or FixedScoreEvaluator({"Leonardo": 0.9}),
        chat=chat or StreamingChat(threads=[]),
        web=StaticSearch(error="search is off in this test"),
    )


def mode_chunks(parts: Iterable[Any]) -> list[tuple[str, Any]]:
    """The ``(mode, chunk)`` pairs a stream of several modes yields (typed loosely upstream)."""
    return [(str(mode), chunk) for mode, chunk in parts]


def collect_sync(
    components: Any,
    *,
    method: MethodConfig | None = None,
    deployment: DeploymentSettings | None = None,
) -> list[tuple[str, Any]]:
    graph = build_graph(components=components, method=method, deployment=deployment)
    context = Context()
    modes: list[StreamMode] = ["updates", "custom", "messages"]
    return mode_chunks(graph.stream({"question": QUESTION}, context=context, stream_mode=modes))


def collect_async(components: Any) -> list[tuple[str, Any]]:
    graph = build_graph(components=components)

    async def run() -> list[tuple[str, Any]]:
        modes: list[StreamMode] = ["updates", "custom", "messages"]
        return mode_chunks(
            [part async for part in graph.astream({"question": QUESTION}, stream_mode=modes)]
        )

    return asyncio.run(run())


# -- stream modes -------------------------------------------------------------------------------


@pytest.mark.parametrize("collect", [collect_sync, collect_async], ids=["stream", "astream"])
def test_updates_tokens_and_progress_are_streamed(collect: Any) -> None:
    parts = collect(fakes())
    updates = [node for mode, chunk in parts if mode == "updates" for node in chunk]
    assert updates == NODES_CORRECT
    tokens = [
        message.text
        for mode, (message, meta) in ((m, c) for m, c in parts if m == "messages")
        if meta["langgraph_node"] == "generate" and message.text  # the last chunk is empty
    ]
    assert tokens == [
        "The",
        " Mona",
        " Lisa",
        " was",
        " painted",
        " by",
        " Leonardo",
        " da",
        " Vinci.",
    ]
    assert "".join(tokens) == ANSWER
    progress = [chunk for mode, chunk in parts if mode == "custom"]
    assert progress == [
        {"node": "retrieve", "event": "retrieved", "passages": 2, "top_k": 10},
        {"node": "grade", "event": "scoring", "passages": 2, "evaluator": "fixed"},
        {"node": "grade", "event": "scored", "passages": 2, "best": 0.9},
        {"node": "decide_action", "event": "decided", "action": "correct", "max_score": 0.9},
        {"node": "refine", "event": "scoring", "passages": 1, "strips": 3},
        {"node": "refine", "event": "filtered", "passages": 1, "strips": 3, "kept": 1},
        {"node": "generate", "event": "generating", "internal": 1, "external": 0},
        {"node": "generate", "event": "generated", "chars": len(ANSWER)},
    ]
    # Every token of the answer comes before generate's update.
    order = [(mode, chunk) for mode, chunk in parts if mode in {"messages", "updates"}]
    last_token = max(i for i, (mode, _) in enumerate(order) if mode == "messages")
    assert order[last_token + 1] == ("updates", order[last_token + 1][1])
    assert "generate" in order[last_token + 1][1]


def test_incorrect_branch_reports_rewrite_and_search_progress() -> None:
    parts = collect_sync(
        fakes(scorer=FixedScoreEvaluator({}, default=-1.0)),
        method=MethodConfig(abstain_without_knowledge=False, rewrite_for_search=True),
    )
    progress = [(c["node"], c["event"]) for mode, c in parts if mode == "custom"]
    decided = progress.index(("decide_action", "decided"))
    assert progress[decided + 1 :] == [
        ("rewrite_query", "rewriting"),
        ("rewrite_query", "rewritten"),
        ("web_search", "searching"),
        ("web_search", "unavailable"),
        ("generate", "generating"),
        ("generate", "generated"),
    ]


def test_web_search_reports_each_page_it_reads() -> None:
    page = (
        "<html><head><title>Mona Lisa - Wikipedia</title></head><body><main>"
        "<p>The Mona Lisa is a portrait painting by Leonardo da Vinci, painted from 1503.</p>"
        "</main></body></html>"
    )

    class WebFakes(FakeComponents):
        def search(self, context: Any) -> Any:
            return DefaultComponents().search(context)

    clear_web_caches()
    with WebsearchServer() as web:
        web.add_route("/wiki/Mona_Lisa", page)
        web.add_route("/broken", "oops", status=500, content_type="text/plain")
        web.results = [
            web.result("Mona Lisa - Wikipedia", "/wiki/Mona_Lisa", "Snippet."),
            web.result("Broken", "/broken", "Broken snippet."),
        ]
        deployment = deployment_with(
            search_provider="searxng", search_url=web.url, allowed_hosts="127.0.0.1"
        )
        components = WebFakes(
            store=StaticStore(corpus_documents()),
            scorer=FixedScoreEvaluator({"1503": 0.8}, default=-1.0),
            chat=StreamingChat(threads=[]),
        )
        parts = collect_sync(components, deployment=deployment)
        wiki, broken = web.url_for("/wiki/Mona_Lisa"), web.url_for("/broken")
    clear_web_caches()
    pages = [c for mode, c in parts if mode == "custom" and c["event"] == "page"]
    assert sorted(p["done"] for p in pages) == [1, 2]
    assert {p["total"] for p in pages} == {2}
    assert {p["url"]: p["ok"] for p in pages} == {wiki: True, broken: False}
    selected = next(c for mode, c in parts if mode == "custom" and c["event"] == "selected")
    assert selected["kept"] == 1


def test_ingestion_graph_streams_progress(tmp_path: Path) -> None:
    graph = build_ingest_graph(
        deployment=deployment_with(store_path=str(tmp_path / "store"), collection="streamed")
    )
    documents: list[InlineDocument] = [
        {"text": f"Fact number {i}: otters hold hands while sleeping.", "source": f"mem:{i}"}
        for i in range(3)
    ]
    parts = mode_chunks(
        graph.stream(
            {"documents": documents}, context=IngestContext(), stream_mode=["custom", "values"]
        )
    )
    progress = [chunk for mode, chunk in parts if mode == "custom"]
    assert progress[0] == {"node": "ingest", "event": "started", "paths": 0, "documents": 3}
    assert {"node": "ingest", "event": "embedding", "done": 3, "total": 3} in progress
    assert progress[-1]["event"] == "done" and progress[-1]["added"] == 3
    report = parts[-1][1]
    assert report["added"] == ["mem:0", "mem:1", "mem:2"] and report["chunks"] == 3


# -- the event loop stays free ------------------------------------------------------------------


def test_ainvoke_runs_blocking_model_calls_off_the_event_loop() -> None:
    """Sync nodes run on worker threads under ``ainvoke``: the loop keeps ticking meanwhile.

    Each model call blocks its thread until the event loop has ticked a few times (a clock that
    moves only while the loop runs): it returns only because the loop was free meanwhile.
    """
    clock = LoopClock()
    chat = StreamingChat(clock=clock, ticks=5, threads=[], blocked=[])
    scorer = SlowEvaluator(clock, ticks=3)
    graph = build_graph(components=fakes(chat=chat, scorer=scorer))

    async def main() -> tuple[dict[str, Any], str]:
        loop_thread = threading.current_thread().name
        done = asyncio.Event()

        async def heartbeat() -> None:
            while not done.is_set():
                clock.tick()
                await asyncio.sleep(0)

        beat = asyncio.create_task(heartbeat())
        out = await graph.ainvoke({"question": QUESTION})
        done.set()
        await beat
        return dict(out), loop_thread

    out, loop_thread = asyncio.run(main())
    assert out["answer"] == ANSWER
    # generate, grade and refine really blocked their threads, and the loop ran meanwhile.
    assert chat.blocked == [True], "the event loop was blocked during generate"
    assert scorer.blocked == [True, True], "the event loop was blocked during grade or refine"
    assert clock.now >= 5 + 2 * 3
    assert chat.threads and loop_thread not in chat.threads
    assert scorer.threads and loop_thread not in scorer.threads


def test_locked_evaluator_serialises_calls() -> None:
    active = 0
    most = 0
    guard = threading.Lock()

    class Counting(FixedScoreEvaluator):
        def score(self, question: str, passages: Sequence[str]) -> list[float]:
            nonlocal active, most
            with guard:
                active += 1
                most = max(most, active)
            time.sleep(0.05)
            with guard:
                active -= 1
            return super().score(question, passages)

    locked = LockedEvaluator(Counting({}), threading.Lock())
    workers = [threading.Thread(target=locked.score, args=("q", ["p"])) for _ in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert most == 1
    assert locked.name == "fixed" and locked.keyword_scores == {}  # other attributes pass through


def test_embedding_evaluator_and_store_share_one_lock(tmp_path: Path) -> None:
    wiring = DefaultComponents()
    context = RunSettings(
        deployment=deployment_with(store_path=str(tmp_path / "s"), default_corpus=False)
    )
    evaluator = wiring.evaluator(context)
    assert isinstance(evaluator, LockedEvaluator)
    assert evaluator is wiring.evaluator(context)  # one wrapper per model
    assert evaluator.lock is model_lock("embedder:all-MiniLM-L6-v2")
    from crag.app.api import open_configured_store

    store = open_configured_store(context, create=True)
    assert store.embeddings.lock is evaluator.lock  # type: ignore[union-attr]


# -- concurrent runs with the real models -------------------------------------------------------


@pytest.mark.integration
def test_concurrent_ainvoke_answers_equal_sequential_answers(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Real MiniLM, evaluator and SmolLM2, shared by concurrent runs: same answers and scores."""
    from crag.app.api import aask
    from crag_bench.dev_server import free_port
    from tests.integration_support import build_small_store

    store = build_small_store(tmp_path_factory.mktemp("concurrent") / "chroma", others=20)
    deployment = deployment_with(
        store_path=str(store),
        default_corpus=False,
        search_provider="searxng",
        search_url=f"http://127.0.0.1:{free_port()}",  # refused at once: the web branch fails fast
    )
    questions = ["Who painted the Mona Lisa?", "In which city is the Louvre?"]

    async def main() -> tuple[list[Any], list[Any]]:
        alone = [await aask(q, deployment=deployment) for q in questions]
        together = await asyncio.gather(*(aask(q, deployment=deployment) for q in questions * 2))
        return alone, list(together)

    alone, together = asyncio.run(main())
    for index, out in enumerate(together):
        reference = alone[index % len(questions)]
        assert out["answer"] == reference["answer"]
        assert out["action"] == reference["action"]
        assert [d["score"] for d in out["documents"]] == [
            d["score"] for d in reference["documents"]
        ]
    assert "Leonardo" in alone[0]["answer"]


# -- the CLI ------------------------------------------------------------------------------------


class Recorder:
    """Stands in for stdout and stderr at once, keeping the order of writes to both."""

    def __init__(self, writes: list[tuple[str, str]], name: str) -> None:
        self.writes = writes
        self.name = name

    def write(self, text: str) -> int:
        self.writes.append((self.name, text))
        return len(text)

    def flush(self) -> None:
        pass


def test_crag_ask_prints_tokens_as_they_come_and_progress_on_stderr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from crag.app.cli.commands import main

    writes: list[tuple[str, str]] = []
    monkeypatch.setattr(sys, "stdout", Recorder(writes, "out"))
    monkeypatch.setattr(sys, "stderr", Recorder(writes, "err"))
    with app_components(fakes()):
        assert main(["ask", QUESTION]) == 0
    out = "".join(text for stream, text in writes if stream == "out")
    err = "".join(text for stream, text in writes if stream == "err")
    assert out == f"{ANSWER} [1]\n{SOURCES}"
    # Several writes to stdout: one per token, not the answer at the end.
    tokens = [text for stream, text in writes if stream == "out" and text.strip()]
    assert len(tokens[: tokens.index(" [1]")]) == 9
    for line in [
        "[retrieve] 2 passages",
        "[grade] scoring 2 passages (fixed)",
        "[decide_action] correct",
        "[refine] kept 1 strips",
        "[generate] answering from 1 internal and 0 external strips",
        "[generate] done",
    ]:
        assert line in err
    # The tokens come between "answering" and "done" on stderr, and the line is ended first.
    first_token = next(i for i, (s, t) in enumerate(writes) if s == "out")
    answering = next(i for i, (s, t) in enumerate(writes) if "answering from" in t)
    done = next(i for i, (s, t) in enumerate(writes) if "[generate] done" in t)
    assert answering < first_token < done
    assert writes[done - 1] == ("out", "\n") or writes[done - 2] == ("out", "\n")


def test_crag_ask_json_and_quiet(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    import json

    from crag.app.cli.commands import main

    with app_components(fakes()):
        assert main(["ask", "--json", QUESTION]) == 0
        captured = capsys.readouterr()
        assert json.loads(captured.out)["answer"] == ANSWER
        assert "[generate] answering" in captured.err
        assert main(["ask", "-q", QUESTION]) == 0
        captured = capsys.readouterr()
        assert captured.out == f"{ANSWER} [1]\n{SOURCES}" and captured.err == ""


def test_non_streaming_model_still_prints_the_answer(capsys: Any) -> None:
    from crag.app.cli.commands import main

    with app_components(fakes(chat=scripted_chat(answer="Leonardo."))):
        assert main(["ask", "-q", QUESTION]) == 0
    assert capsys.readouterr().out == f"Leonardo. [1]\n{SOURCES}"
