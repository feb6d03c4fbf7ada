"""Load test for the LangGraph server: N concurrent CRAG runs, checked against sequential ones.

``crag bench-server`` (see :func:`run_bench`) connects to a server (``--url``) or starts
``langgraph dev`` on 127.0.0.1 over a small store it builds (about 50 bundled summaries,
including the pages that answer the fixed questions). It first runs each distinct question
once, one at a time (this also loads the models), then sends ``runs`` runs at once, the
questions cycled, each on its own thread, and reports failures, throughput, p50/p95 latency,
and whether every concurrent answer equals the sequential answer to the same question. It
stops by itself: every phase has a deadline, and unfinished runs count as failures.

The started server's web search is pointed at a closed port on 127.0.0.1 (SearxNG provider,
set in its environment like any deployment setting), so the unanswerable question exercises the
web branch without leaving the machine. A server given with ``--url`` keeps its own deployment
settings; only per-run settings are sent with the runs.
"""

from __future__ import annotations

import asyncio
import logging
import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

logger = logging.getLogger(__name__)

GRAPH_ID = "crag"

DEFAULT_QUESTIONS: tuple[str, ...] = (
    "Who painted the Mona Lisa?",
    "Who wrote Hamlet?",
    "What is the highest mountain on Earth?",
    "Who discovered penicillin?",
    "What is the boiling point of liquid nitrogen in kelvin?",
)
"""The fixed questions: four answered from the store, one that turns to the web."""

ANSWER_TITLES: tuple[str, ...] = ("Mona Lisa", "Hamlet", "Mount Everest", "Penicillin")
"""Corpus pages that answer the questions; always in the bench store."""

OFF_TOPIC_WORDS = ("nitrogen",)
"""Filler pages mentioning these are left out (the last question must stay unanswerable)."""

DEFAULT_RUNS = 20
DEFAULT_TIMEOUT = 600.0
MAX_RUNS = 500
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class BenchError(RuntimeError):
    """The benchmark cannot run as asked (bad arguments, server unreachable)."""


@dataclass
class RunResult:
    """One run as the client saw it."""

    question: str
    latency: float
    """Seconds from sending the run to receiving its result."""
    answer: str | None = None
    action: str | None = None
    error: str | None = None
    """Why the run failed; ``None`` when it succeeded."""


@dataclass
class BenchReport:
    """What :func:`run_bench` measured."""

    url: str
    concurrent: list[RunResult]
    sequential: dict[str, RunResult]
    wall_seconds: float
    """Wall-clock time of the concurrent phase."""
    mismatches: list[str] = field(default_factory=list)
    """One line per concurrent answer that differs from the sequential one."""

    @property
    def failures(self) -> list[RunResult]:
        """Concurrent and sequential runs that failed."""
        failed = [r for r in self.sequential.values() if r.error]
        return failed + [r for r in self.concurrent if r.error]

    @property
    def throughput(self) -> float:
        """Successful concurrent runs per second of wall-clock time."""
        done = sum(1 for r in self.concurrent if not r.error)
        return done / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def latency(self, quantile: float) -> float:
        """Nearest-rank latency quantile of the successful concurrent runs, in seconds."""
        values = sorted(r.latency for r in self.concurrent if not r.error)
        if not values:
            return math.nan
        return values[max(0, math.ceil(quantile * len(values)) - 1)]

    @property
    def ok(self) -> bool:
        """No failure, and every concurrent answer equals the sequential one."""
        return not self.failures and not self.mismatches

    def lines(self) -> list[str]:
        """The report, one line each."""
        sequential = sorted(r.latency for r in self.sequential.values() if not r.error)
        lines = [
            f"server: {self.url}",
            f"sequential: {len(self.sequential)} distinct questions, one at a time, "
            + ", ".join(f"{s:.1f}" for s in sequential)
            + " s",
            f"concurrent: {len(self.concurrent)} runs sent at once",
            f"failures: {len(self.failures)}",
            f"wall time: {self.wall_seconds:.1f} s",
            f"throughput: {self.throughput:.3f} runs/s",
            f"latency p50: {self.latency(0.5):.1f} s, p95: {self.latency(0.95):.1f} s",
            "answers equal to sequential: "
            + ("yes" if not self.mismatches else f"NO ({len(self.mismatches)} differ)"),
        ]
        lines += [f"  failed: {r.question!r}: {r.error}" for r in self.failures]
        lines += [f"  differs: {m}" for m in self.mismatches]
        return lines


def check_loopback(url: str) -> None:
    """Refuse any server URL that is not on this machine's loopback interface."""
    host = urlsplit(url).hostname or ""
    if host not in LOOPBACK_HOSTS:
        raise BenchError(
            f"the benchmark only talks to a server on 127.0.0.1 (got {url!r}); pass "
            "--allow-remote to load another machine"
        )


def check_runs(runs: int) -> None:
    """Refuse a number of concurrent runs outside 1 to :data:`MAX_RUNS`."""
    if not 1 <= runs <= MAX_RUNS:
        raise BenchError(f"runs must be between 1 and {MAX_RUNS}, not {runs}")


def bench_environment(store_path: Path, search_port: int) -> dict[str, str]:
    """The started server's deployment settings: the bench store, web search on 127.0.0.1.

    Web search goes to a closed port (it fails fast), and the store is never filled with the
    whole bundled corpus behind the benchmark's back.
    """
    return {
        "CRAG_STORE_PATH": str(store_path.resolve()),
        "CRAG_COLLECTION": "crag",
        "CRAG_GENERATOR": "smollm2",
        "CRAG_SEARCH_PROVIDER": "searxng",
        "CRAG_SEARCH_URL": f"http://127.0.0.1:{search_port}",
        "CRAG_ALLOWED_HOSTS": "127.0.0.1",
        "CRAG_SEARCH_TIMEOUT": "5",
        "CRAG_DEFAULT_CORPUS": "false",
    }


def split_settings(settings: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Split settings into the runs' context and the started server's environment variables."""
    from graph.context import Context
    from graph.setting_checks import env_name

    deployment = Context.deployment_names()
    context = {k: v for k, v in settings.items() if k not in deployment}
    env = {
        env_name(k): str(v).lower() if isinstance(v, bool) else str(v)
        for k, v in settings.items()
        if k in deployment
    }
    return context, env


def build_bench_store(path: Path, documents: int = 50) -> Path:
    """Ingest ``documents`` bundled summaries, the answering pages included, into ``path``."""
    from vectorstore.corpus import load_corpus
    from vectorstore.embeddings import locked_embeddings
    from vectorstore.ingest import ingest_documents
    from vectorstore.store import open_store

    corpus = load_corpus()
    anchors = [d for d in corpus if d.title in ANSWER_TITLES]
    missing = set(ANSWER_TITLES) - {d.title for d in anchors}
    if missing:
        raise BenchError(f"the bundled corpus lacks {', '.join(sorted(missing))}")
    fillers = [
        d
        for d in corpus
        if d.title not in ANSWER_TITLES and not any(w in d.text.lower() for w in OFF_TOPIC_WORDS)
    ]
    wanted = max(0, documents - len(anchors))
    step = max(1, len(fillers) // max(1, wanted))
    chosen = anchors + fillers[::step][:wanted]
    store = open_store(path, "crag", locked_embeddings("all-MiniLM-L6-v2"), create=True)
    report = ingest_documents(chosen, store, progress=False)
    if report.failed:
        raise BenchError(f"building the bench store failed: {report.failed[:3]}")
    logger.info("bench store at %s: %s", path, report.summary())
    return path


async def _one_run(
    client: Any, question: str, context: dict[str, Any], deadline: float
) -> RunResult:
    started = time.monotonic()
    try:
        thread = await client.threads.create()
        out = await asyncio.wait_for(
            client.runs.wait(
                thread["thread_id"],
                GRAPH_ID,
                input={"question": question},
                context=context,
                raise_error=False,
            ),
            timeout=max(0.1, deadline - time.monotonic()),
        )
    except TimeoutError:
        return RunResult(question, time.monotonic() - started, error="did not finish in time")
    except Exception as exc:  # noqa: BLE001 - any failed run is counted, never ends the bench
        return RunResult(question, time.monotonic() - started, error=f"{type(exc).__name__}: {exc}")
    latency = time.monotonic() - started
    if not isinstance(out, dict):
        return RunResult(question, latency, error=f"unexpected result {str(out)[:200]!r}")
    if "__error__" in out:
        problem = out["__error__"]
        return RunResult(
            question, latency, error=f"{problem.get('error')}: {problem.get('message')}"
        )
    answer = out.get("answer")
    if not isinstance(answer, str):
        return RunResult(question, latency, error=f"no answer in {sorted(out)}")
    return RunResult(question, latency, answer=answer, action=str(out.get("action")))


async def abench(
    url: str,
    *,
    runs: int = DEFAULT_RUNS,
    questions: Sequence[str] = DEFAULT_QUESTIONS,
    context: dict[str, Any] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> BenchReport:
    """Run the benchmark against the server at ``url`` (see the module docstring).

    Args:
        url: The server's base URL.
        runs: Runs sent at once in the concurrent phase (1 to :data:`MAX_RUNS`).
        questions: The questions, cycled over the runs.
        context: Run settings sent with every run.
        timeout: Seconds for the whole benchmark (both phases); unfinished runs fail.

    Returns:
        The measurements.

    Raises:
        BenchError: Bad arguments.
    """
    from langgraph_sdk import get_client

    check_runs(runs)
    if not questions:
        raise BenchError("no questions to ask")
    deadline = time.monotonic() + timeout
    client = get_client(url=url, api_key=None, timeout=timeout)
    settings = dict(context or {})
    distinct = list(dict.fromkeys(questions))

    sequential: dict[str, RunResult] = {}
    for question in distinct:
        result = await _one_run(client, question, settings, deadline)
        logger.info("sequential %.1f s: %r -> %s", result.latency, question, result.error or "ok")
        sequential[question] = result

    asked = [distinct[i % len(distinct)] for i in range(runs)]
    started = time.monotonic()
    concurrent = list(
        await asyncio.gather(*(_one_run(client, q, settings, deadline) for q in asked))
    )
    wall = time.monotonic() - started

    report = BenchReport(url=url, concurrent=concurrent, sequential=sequential, wall_seconds=wall)
    for result in concurrent:
        reference = sequential[result.question]
        if result.error or reference.error:
            continue
        if (result.answer, result.action) != (reference.answer, reference.action):
            report.mismatches.append(
                f"{result.question!r}: {result.action}/{result.answer!r} concurrently, "
                f"{reference.action}/{reference.answer!r} alone"
            )
    return report


def run_bench(
    *,
    url: str | None = None,
    runs: int = DEFAULT_RUNS,
    timeout: float = DEFAULT_TIMEOUT,
    store: str | None = None,
    documents: int = 50,
    jobs_per_worker: int | None = None,
    extra_context: dict[str, Any] | None = None,
    allow_remote: bool = False,
) -> BenchReport:
    """Connect to ``url`` or start ``langgraph dev`` over a small store, then :func:`abench`.

    Args:
        url: A running server; ``None`` starts one on 127.0.0.1 (stopped afterwards).
        runs: Concurrent runs.
        timeout: Seconds for the runs (server start-up and store building not included).
        store: The store the started server uses; default: a small one built in a temporary
            directory. Ignored with ``url``.
        documents: Summaries in the store built when ``store`` is not given.
        jobs_per_worker: ``--n-jobs-per-worker`` of the started server.
        extra_context: Settings for the runs: per-run ones are sent with every run; deployment
            ones go into the started server's environment (refused with ``url``: that
            server's operator has set them).
        allow_remote: Allow a ``url`` that is not on 127.0.0.1.

    Raises:
        BenchError: Bad arguments, or the server could not be started.
    """
    from app.dev_server import DEFAULT_JOBS_PER_WORKER, DevServerError, dev_server, free_port

    check_runs(runs)
    if timeout <= 0:
        raise BenchError(f"timeout must be positive, not {timeout}")
    context, extra_env = split_settings(dict(extra_context or {}))
    if url:
        if not allow_remote:
            check_loopback(url)
        if extra_env:
            from graph.run_context import deployment_error

            given = sorted(set(extra_context or {}) - set(context))
            raise BenchError(f"--url {url}: {deployment_error(given)}")
        return asyncio.run(abench(url, runs=runs, context=context, timeout=timeout))
    with tempfile.TemporaryDirectory(prefix="crag-bench-") as tmp:
        root = Path(tmp)
        store_path = Path(store) if store else build_bench_store(root / "chroma", documents)
        search_port = free_port()  # nothing listens there: searches are refused at once
        env = {**bench_environment(store_path, search_port), **extra_env}
        try:
            jobs = jobs_per_worker or DEFAULT_JOBS_PER_WORKER
            with dev_server(root / "server", env, jobs_per_worker=jobs) as server:
                return asyncio.run(abench(server.url, runs=runs, context=context, timeout=timeout))
        except DevServerError as exc:
            raise BenchError(str(exc)) from exc
