"""Load test for the LangGraph server: concurrency levels, answers checked against sequential runs.

``crag-bench server`` (see :func:`run_bench`) connects to a server (``--url``) or starts
``langgraph dev`` on 127.0.0.1 over a small store it builds (about 50 bundled summaries,
including the pages that answer the fixed questions). It first runs each distinct question
once, one at a time (this also loads the models; their median latency is the single-run
latency), then, for each concurrency level L (``--levels 1,4,16,32``, the default; ``--runs N``
is ``--levels N``), sends L runs at once, the questions cycled, each on its own thread, and
waits for all of them before the next level. Per level it reports wall time, throughput, p50/p95
latency, failures and whether every answer equals the sequential answer to the same question;
one table row per level, with the throughput relative to level 1 and p95 over the single-run
latency. It stops by itself: every phase (the sequential runs, each level) has a deadline, and
unfinished runs count as failures.

The started server's web search is pointed at a closed port on 127.0.0.1 (SearxNG provider,
set in its environment like any deployment setting), so the unanswerable question exercises the
web branch without leaving the machine, and its generator decodes the overlapping requests of
concurrent runs together (``CRAG_GENERATOR_BATCH_SIZE``, :data:`BENCH_GENERATOR_BATCH_SIZE`, as
``make serve`` sets it). A server given with ``--url`` keeps its own method and deployment
settings (its operator's); only per-run settings are sent with the runs.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
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

DEFAULT_LEVELS: tuple[int, ...] = (1, 4, 16, 32)
"""Concurrency levels measured when neither ``--levels`` nor ``--runs`` is given."""
DEFAULT_TIMEOUT = 600.0
"""Seconds for each phase: the sequential runs, then each level."""
MAX_RUNS = 500
"""Most runs one level sends at once."""
MAX_LEVELS = 10
"""Most concurrency levels in one benchmark."""
BENCH_GENERATOR_BATCH_SIZE = 1
"""``CRAG_GENERATOR_BATCH_SIZE`` of the started server (as ``make serve`` sets it): 1, every
request decoded alone by onnxruntime, which answered 16 runs at once at 1.9 runs/s on 2 cores
against 1.1 for transformers' float32 batches of 8 (2026-12-02, load 0.2-1.5)."""
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


def nearest_rank(values: Sequence[float], quantile: float) -> float:
    """The nearest-rank ``quantile`` of ``values`` (NaN when there are none)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(quantile * len(ordered)) - 1)]


def median(values: Sequence[float]) -> float:
    """The median of ``values`` (the mean of the middle two for an even count; NaN if none)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


@dataclass
class LevelReport:
    """One concurrency level: ``level`` runs sent at once."""

    level: int
    runs: list[RunResult]
    wall_seconds: float
    """Wall-clock time from sending the first run to the last result."""
    mismatches: list[str] = field(default_factory=list)
    """One line per answer that differs from the sequential answer to the same question."""

    @property
    def failures(self) -> list[RunResult]:
        """The runs of this level that failed."""
        return [r for r in self.runs if r.error]

    @property
    def throughput(self) -> float:
        """Successful runs per second of wall-clock time."""
        done = sum(1 for r in self.runs if not r.error)
        return done / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def latency(self, quantile: float) -> float:
        """Nearest-rank latency quantile of the successful runs, in seconds."""
        return nearest_rank([r.latency for r in self.runs if not r.error], quantile)

    @property
    def ok(self) -> bool:
        """No failure, and every answer equals the sequential one."""
        return not self.failures and not self.mismatches


@dataclass
class BenchReport:
    """What :func:`run_bench` measured: the sequential runs, then each concurrency level."""

    url: str
    sequential: dict[str, RunResult]
    levels: list[LevelReport]
    setup: list[str] = field(default_factory=list)
    """Lines describing the server (how the started one was configured)."""

    @property
    def concurrent(self) -> list[RunResult]:
        """Every run of every level."""
        return [r for level in self.levels for r in level.runs]

    @property
    def mismatches(self) -> list[str]:
        """Every level's answers that differ from the sequential ones."""
        return [m for level in self.levels for m in level.mismatches]

    @property
    def failures(self) -> list[RunResult]:
        """Sequential and concurrent runs that failed."""
        failed = [r for r in self.sequential.values() if r.error]
        return failed + [r for r in self.concurrent if r.error]

    @property
    def wall_seconds(self) -> float:
        """Wall-clock time of the levels together."""
        return sum(level.wall_seconds for level in self.levels)

    @property
    def throughput(self) -> float:
        """Successful concurrent runs per second of the levels' wall-clock time."""
        done = sum(1 for r in self.concurrent if not r.error)
        return done / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def latency(self, quantile: float) -> float:
        """Nearest-rank latency quantile of every level's successful runs, in seconds."""
        return nearest_rank([r.latency for r in self.concurrent if not r.error], quantile)

    @property
    def single_run_latency(self) -> float:
        """Median latency of the successful sequential runs (one at a time), in seconds."""
        return median([r.latency for r in self.sequential.values() if not r.error])

    @property
    def ok(self) -> bool:
        """No failure, and every concurrent answer equals the sequential one."""
        return not self.failures and not self.mismatches

    def lines(self) -> list[str]:
        """The report, one line each: the sequential runs, the levels' table, the verdict."""
        sequential = sorted(r.latency for r in self.sequential.values() if not r.error)
        lines = [f"server: {self.url}", *self.setup]
        lines.append(
            f"sequential: {len(self.sequential)} distinct questions, one at a time, "
            + ", ".join(f"{s:.1f}" for s in sequential)
            + " s"
        )
        lines.append(f"single-run latency (median of those): {_seconds(self.single_run_latency)} s")
        lines += level_table(self.levels, self.single_run_latency)
        lines += [
            f"failures: {len(self.failures)}",
            "answers equal to sequential: "
            + ("yes" if not self.mismatches else f"NO ({len(self.mismatches)} differ)"),
        ]
        lines += [
            f"  failed (sequential): {r.question!r}: {r.error}"
            for r in self.sequential.values()
            if r.error
        ]
        for level in self.levels:
            lines += [
                f"  failed (level {level.level}): {r.question!r}: {r.error}" for r in level.failures
            ]
            lines += [f"  differs (level {level.level}): {m}" for m in level.mismatches]
        return lines


def _seconds(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}"


def reference_level(levels: Sequence[LevelReport]) -> LevelReport | None:
    """The level throughputs are compared with: level 1 if measured, else the lowest."""
    if not levels:
        return None
    return next((lv for lv in levels if lv.level == 1), min(levels, key=lambda lv: lv.level))


def table_header(reference: int) -> str:
    """The levels' table header; ``reference``: the level throughputs are relative to."""
    relative = f"x L{reference}"
    return (
        f"{'level':>5}  {'runs/s':>7}  {relative:>6}  {'wall s':>7}  {'p50 s':>6}  "
        f"{'p95 s':>6}  {'p95/1-run':>9}  {'failed':>6}  equal"
    )


def level_row(level: LevelReport, reference: float, single: float) -> str:
    """One level's table row (``reference``: the reference level's throughput)."""
    relative = level.throughput / reference if reference > 0 else math.nan
    p95 = level.latency(0.95)
    ratio = p95 / single if single > 0 else math.nan
    equal = "yes" if not level.mismatches else f"NO ({len(level.mismatches)})"
    return (
        f"{level.level:>5}  {level.throughput:>7.3f}  "
        f"{'-' if math.isnan(relative) else f'{relative:.2f}x':>6}  "
        f"{level.wall_seconds:>7.1f}  {_seconds(level.latency(0.5)):>6}  {_seconds(p95):>6}  "
        f"{'-' if math.isnan(ratio) else f'{ratio:.2f}x':>9}  "
        f"{len(level.failures):>6}  {equal}"
    )


def level_table(levels: Sequence[LevelReport], single: float) -> list[str]:
    """The levels' table: a header, then one row per level in the order measured.

    ``x L1`` is the throughput relative to level 1 (to the lowest level when 1 was not
    measured; the header names it), ``p95/1-run`` the p95 latency over ``single``, the
    single-run latency.
    """
    reference = reference_level(levels)
    if reference is None:
        return []
    return [table_header(reference.level)] + [
        level_row(lv, reference.throughput, single) for lv in levels
    ]


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


def parse_levels(text: str) -> tuple[int, ...]:
    """``"1,4,16,32"`` as levels (checked by :func:`check_levels`).

    Raises:
        BenchError: Not a comma-separated list of whole numbers, or a level out of range.
    """
    parts = [part.strip() for part in text.split(",")]
    try:
        levels = tuple(int(part) for part in parts)
    except ValueError:
        raise BenchError(
            f"--levels must be comma-separated numbers of runs, e.g. 1,4,16,32, not {text!r}"
        ) from None
    check_levels(levels)
    return levels


def check_levels(levels: Sequence[int]) -> None:
    """Refuse no levels, more than :data:`MAX_LEVELS`, repeats, or a level out of range."""
    if not levels:
        raise BenchError("no concurrency levels to measure")
    if len(levels) > MAX_LEVELS:
        raise BenchError(f"at most {MAX_LEVELS} concurrency levels, not {len(levels)}")
    if len(set(levels)) != len(levels):
        raise BenchError(f"a concurrency level is repeated: {', '.join(map(str, levels))}")
    for level in levels:
        check_runs(level)


def resolve_levels(runs: int | None, levels: Sequence[int] | None) -> tuple[int, ...]:
    """The levels to measure: ``levels``, or ``runs`` as one level, or :data:`DEFAULT_LEVELS`.

    Raises:
        BenchError: Both given, or a level out of range.
    """
    if runs is not None and levels is not None:
        raise BenchError("give --runs or --levels, not both (--runs N is --levels N)")
    if levels is not None:
        chosen = tuple(levels)
    else:
        chosen = (runs,) if runs is not None else DEFAULT_LEVELS
    check_levels(chosen)
    return chosen


def cycled(questions: Sequence[str], count: int) -> list[str]:
    """``count`` questions, ``questions`` repeated in order."""
    return [questions[i % len(questions)] for i in range(count)]


def compare_answers(runs: Sequence[RunResult], sequential: Mapping[str, RunResult]) -> list[str]:
    """One line per successful run whose answer or action differs from the sequential one."""
    lines = []
    for result in runs:
        reference = sequential[result.question]
        if result.error or reference.error:
            continue
        if (result.answer, result.action) != (reference.answer, reference.action):
            lines.append(
                f"{result.question!r}: {result.action}/{result.answer!r} concurrently, "
                f"{reference.action}/{reference.answer!r} alone"
            )
    return lines


def bench_environment(store_path: Path, search_port: int) -> dict[str, str]:
    """The started server's deployment settings: the bench store, web search on 127.0.0.1.

    Web search goes to a closed port (it fails fast), the store is never filled with the
    whole bundled corpus behind the benchmark's back, and the generator decodes each request
    alone (:data:`BENCH_GENERATOR_BATCH_SIZE`; ``--set generator_batch_size=8`` batches
    overlapping runs' requests).
    """
    return {
        "CRAG_GENERATOR_BATCH_SIZE": str(BENCH_GENERATOR_BATCH_SIZE),
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
    """Split settings into the runs' context and the started server's environment variables.

    Per-run settings are sent with the runs; the method's parameters and the deployment
    settings are the operator's, so they go into the server's environment (``CRAG_<NAME>``).
    """
    from crag.settings.setting_checks import env_name
    from crag.settings.setting_kinds import kind_of

    context = {k: v for k, v in settings.items() if kind_of(k) is None}
    env = {env_name(k): _env_value(v) for k, v in settings.items() if kind_of(k) is not None}
    return context, env


def _env_value(value: Any) -> str:
    """A setting's value as an environment variable gives it."""
    if isinstance(value, bool):
        return str(value).lower()
    return "" if value is None else str(value)


def build_bench_store(path: Path, documents: int = 50) -> Path:
    """Ingest ``documents`` bundled summaries, the answering pages included, into ``path``."""
    from crag.vectorstore.corpus import load_corpus
    from crag.vectorstore.embeddings import locked_embeddings
    from crag.vectorstore.ingest import QUIET, ingest_documents
    from crag.vectorstore.store import open_store

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
    report = ingest_documents(chosen, store, QUIET)
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


async def _level(
    client: Any,
    level: int,
    questions: Sequence[str],
    sequential: Mapping[str, RunResult],
    context: dict[str, Any],
    timeout: float,
) -> LevelReport:
    """Send ``level`` runs at once (``questions`` cycled) and wait for every one."""
    deadline = time.monotonic() + timeout
    asked = cycled(questions, level)
    started = time.monotonic()
    runs = list(await asyncio.gather(*(_one_run(client, q, context, deadline) for q in asked)))
    wall = time.monotonic() - started
    report = LevelReport(level, runs, wall, compare_answers(runs, sequential))
    logger.info(
        "level %d: %.1f s, %.3f runs/s, %d failed",
        level,
        wall,
        report.throughput,
        len(report.failures),
    )
    return report


async def abench(
    url: str,
    *,
    runs: int | None = None,
    levels: Sequence[int] | None = None,
    questions: Sequence[str] = DEFAULT_QUESTIONS,
    context: dict[str, Any] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    setup: Sequence[str] = (),
    api_key: str | None = None,
) -> BenchReport:
    """Run the benchmark against the server at ``url`` (see the module docstring).

    Args:
        url: The server's base URL.
        runs: One level of this many runs (the same as ``levels=[runs]``).
        levels: Runs sent at once, level by level (each 1 to :data:`MAX_RUNS`); neither
            ``runs`` nor ``levels``: :data:`DEFAULT_LEVELS`.
        questions: The questions, cycled over each level's runs.
        context: Run settings sent with every run.
        timeout: Seconds for each phase (the sequential runs, then each level); unfinished
            runs fail.
        setup: Lines describing the server, printed with the report.
        api_key: The server's token (sent as ``X-Api-Key``).

    Returns:
        The measurements.

    Raises:
        BenchError: Bad arguments.
    """
    from langgraph_sdk import get_client

    chosen = resolve_levels(runs, levels)
    if not questions:
        raise BenchError("no questions to ask")
    client = get_client(url=url, api_key=api_key, timeout=timeout)
    report = await measure(client, chosen, questions, dict(context or {}), timeout)
    report.url = url
    report.setup = list(setup)
    return report


async def measure(
    client: Any,
    levels: Sequence[int],
    questions: Sequence[str],
    context: dict[str, Any],
    timeout: float,
) -> BenchReport:
    """The sequential runs, then each level, through ``client`` (a ``langgraph_sdk`` client).

    Each distinct question runs once, one at a time; then every level sends its runs at once
    and is waited for before the next. Each phase has ``timeout`` seconds.
    """
    distinct = list(dict.fromkeys(questions))
    deadline = time.monotonic() + timeout
    sequential: dict[str, RunResult] = {}
    for question in distinct:
        result = await _one_run(client, question, context, deadline)
        logger.info("sequential %.1f s: %r -> %s", result.latency, question, result.error or "ok")
        sequential[question] = result
    measured = [
        await _level(client, level, distinct, sequential, context, timeout) for level in levels
    ]
    return BenchReport(url="", sequential=sequential, levels=measured)


def run_bench(
    *,
    url: str | None = None,
    runs: int | None = None,
    levels: Sequence[int] | None = None,
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
        runs: One concurrency level of this many runs (``--runs N`` is ``--levels N``).
        levels: Concurrency levels (default :data:`DEFAULT_LEVELS`); not with ``runs``.
        timeout: Seconds for each phase of the runs (server start-up and store building not
            included).
        store: The store the started server uses; default: a small one built in a temporary
            directory. Ignored with ``url``.
        documents: Summaries in the store built when ``store`` is not given.
        jobs_per_worker: ``--n-jobs-per-worker`` of the started server.
        extra_context: Settings for the runs: per-run ones are sent with every run; parameters
            of the method and deployment settings go into the started server's environment
            (refused with ``url``: that server's operator has set them).
        allow_remote: Allow a ``url`` that is not on 127.0.0.1.

    Raises:
        BenchError: Bad arguments, or the server could not be started.
    """
    from crag_bench.dev_server import TOKEN_ENV

    chosen = resolve_levels(runs, levels)
    if timeout <= 0:
        raise BenchError(f"timeout must be positive, not {timeout}")
    context, extra_env = split_settings(dict(extra_context or {}))
    if url:
        _check_running_server(url, allow_remote, extra_env, extra_context or {}, context)
        setup = ["setup: a running server (its operator's settings)"]
        token = os.environ.get(TOKEN_ENV) or None
        return asyncio.run(
            abench(url, levels=chosen, context=context, timeout=timeout, setup=setup, api_key=token)
        )
    return _bench_started_server(
        chosen, timeout, store, documents, jobs_per_worker, context, extra_env
    )


def _bench_started_server(
    levels: Sequence[int],
    timeout: float,
    store: str | None,
    documents: int,
    jobs_per_worker: int | None,
    context: dict[str, Any],
    extra_env: Mapping[str, str],
) -> BenchReport:
    """:func:`abench` against a ``langgraph dev`` started here over a small store."""
    from crag_bench.dev_server import DEFAULT_JOBS_PER_WORKER, DevServerError, dev_server, free_port

    with tempfile.TemporaryDirectory(prefix="crag-bench-") as tmp:
        root = Path(tmp)
        store_path = Path(store) if store else build_bench_store(root / "chroma", documents)
        search_port = free_port()  # nothing listens there: searches are refused at once
        env = {**bench_environment(store_path, search_port), **extra_env}
        jobs = jobs_per_worker or DEFAULT_JOBS_PER_WORKER
        setup = [started_setup(jobs, env)]
        try:
            with dev_server(root / "server", env, jobs_per_worker=jobs) as server:
                return asyncio.run(
                    abench(
                        server.url,
                        levels=levels,
                        context=context,
                        timeout=timeout,
                        setup=setup,
                        api_key=server.token,
                    )
                )
        except DevServerError as exc:
            raise BenchError(str(exc)) from exc


def _check_running_server(
    url: str,
    allow_remote: bool,
    extra_env: Mapping[str, str],
    settings: Mapping[str, Any],
    context: Mapping[str, Any],
) -> None:
    """Refuse a ``url`` off this machine (unless allowed), or settings a run may not give.

    A served run carries per-run settings only: the method's parameters and the deployment
    settings are that server's operator's.
    """
    if not allow_remote:
        check_loopback(url)
    if extra_env:
        from crag.settings.setting_kinds import other_kind_error

        error = other_kind_error(set(settings) - set(context))
        if error is not None:
            raise BenchError(f"--url {url}: {error}")


def started_setup(jobs: int, env: Mapping[str, str]) -> str:
    """The started server's configuration, as the report's setup line."""
    return (
        f"setup: langgraph dev started here, {jobs} runs at once (--n-jobs-per-worker), "
        f"generator {env.get('CRAG_GENERATOR', 'smollm2')}, "
        f"generator_batch_size {env.get('CRAG_GENERATOR_BATCH_SIZE', '1')}"
    )
