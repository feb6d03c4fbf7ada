"""Run ``crag-bench eval``: every experiment over every question, with the paper's measures.

The runner loads the questions, opens (or builds) the store, starts the simulated web, then
runs each experiment of :mod:`crag_bench.experiments` over each question through the real
graphs and components, timing every node. It returns one JSON-ready dict of every figure and
the per-question rows; :mod:`crag_bench.eval_report` writes them out.

Determinism: greedy decoding, a fixed question order, seeded choices (which questions lose
their gold documents, which summaries a smaller store holds, the bootstrap resamples).
Generator answers are cached by prompt (LangChain's LLM cache) and evaluator scores by pair
while the eval runs, so experiments that share a step do not pay for it twice; latencies are
reported only for the experiments that run first (no retrieval, RAG, CRAG), before anything
could be shared.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import random
import resource
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from crag.app.cli.settings import CommandSettings
from crag.core.cancellation import cancellation_scope
from crag.knowledge.evaluation_stats import spread
from crag.nodes.components import Components
from crag.settings.context import Context
from crag.settings.run_settings import RunSettings
from crag_bench.answers import answer_in_text, is_looping
from crag_bench.bench_settings import method_with, settings_by_kind
from crag_bench.eval_components import EvalComponents, SourceFilter
from crag_bench.experiments import (
    DEFAULT_GOLD_REMOVED_SHARE,
    EXPERIMENTS,
    GOLD_REMOVAL_LEVELS,
    Experiment,
)
from crag_bench.prompt_recording import PromptRecorder, PromptsOnlyChatModel, RecordedCall
from crag_bench.questions import EvalQuestion
from crag_bench.significance import (
    CONFIDENCE,
    MEASURES,
    RESAMPLES,
    compare_outcomes,
    report_pairs,
)
from crag_bench.stopping import OnStop, run_each
from crag_bench.timing import STAGE_ORDER, StageTimer

logger = logging.getLogger(__name__)

WEB_DESCRIPTION = (
    "The web is simulated: a search service on 127.0.0.1 that speaks the SearxNG JSON API "
    "(so the project's real searxng provider and page reader run) ranks the bundled Wikipedia "
    "summaries by BM25 and serves each as an HTML page. It holds every summary, including a "
    "question's gold article when the store does not."
)


@dataclass
class EvalOptions:
    """What ``crag-bench eval`` runs."""

    questions: list[EvalQuestion]
    question_source: str
    """Where the questions came from, for the report (e.g. "FanOutQA dev ids")."""
    store_path: str
    collection: str = "crag"
    default_corpus: bool = True
    """Fill an empty store with the bundled corpus (off for a user's own corpus)."""
    store_description: str = ""
    gold_texts: dict[str, str] = field(default_factory=dict)
    """Gold source → its full text, where known (answer-in-gold-passage counts)."""
    experiments: Sequence[Experiment] = EXPERIMENTS
    settings: dict[str, Any] = field(default_factory=dict)
    """Settings of any kind for every experiment (``--set``): per-run ones go to each run's
    context, parameters of the method under each experiment's own, deployment ones over the
    environment."""
    max_new_tokens: int = 48
    seed: int = 0
    gold_removed_share: int = DEFAULT_GOLD_REMOVED_SHARE
    """Percent of the questions whose gold documents the gold-removed experiments remove."""
    resamples: int = RESAMPLES
    """Bootstrap resamples of each paired comparison."""
    performance: bool = True
    """Measure cold start and ingestion (skipped in quick tests)."""
    ingestion_docs: int = 200
    progress: bool = True
    workers: int = 1
    """Questions run at once (threads); the generator decodes their prompts in batches."""
    latency_questions: int = 50
    """With ``workers`` above 1: the first N questions run the timed experiments one at a time
    first, and only those runs give the latency figures (overlapping runs wait for each other,
    so their times are not latencies). With one worker every timed run counts."""
    gold_removal_curve: bool = True
    """Run every question with its gold removed (Figure 3's curve at every level); off: only
    the removed share, which is all the gold-removed figures and comparisons need."""
    record_prompts: bool = False
    """Keep each run's generator prompts in its row (``crag-bench eval-reader`` answers them again
    with another generator)."""
    prompts_only: bool = False
    """Record the prompts and generate no answer (implies ``record_prompts``); the rows'
    answers are empty and no accuracy is reported."""
    on_stop: OnStop | None = None
    """Called with the finished rows (and the number planned) when Ctrl-C or SIGTERM stops
    the run (``crag-bench eval`` writes them to ``OUT/rows.partial.jsonl``)."""

    def __post_init__(self) -> None:
        """A prompts-only run records its prompts."""
        if self.prompts_only:
            self.record_prompts = True


@dataclass
class Row:
    """One question run through one experiment."""

    experiment: str
    id: str
    question: str
    answers: list[str]
    answer: str
    correct: bool
    action: str | None
    gold_in_top_k: bool | None
    answer_in_knowledge: bool
    passages: int
    internal: int
    external: int
    seconds: float
    stages: dict[str, float]
    notes: list[str]
    error: str | None = None
    gold_removed: bool = False
    """The question's gold documents were hidden from retrieval."""
    counted: bool = True
    """Counts in its experiment's figures (False: a gold-removed run outside the removed share,
    kept for Figure 3's curve only)."""
    timed: bool = True
    """Ran alone, so its seconds are a latency (False: it overlapped other runs)."""
    scores: list[float] = field(default_factory=list)
    """The evaluator's score of each retrieved passage, in retrieval order (threshold
    calibration replays the action trigger on them)."""
    abstained: bool = False
    """The run found no knowledge and said so instead of asking the generator."""
    gold_sources: list[str] = field(default_factory=list)
    """The question's gold documents (empty when unknown)."""
    prompts: list[RecordedCall] | None = None
    """Every generator call of the run, with ``record_prompts`` (else ``None``)."""
    looping: bool = False
    """The answer repeats itself (:func:`crag_bench.answers.is_looping`)."""
    knowledge_words: int = 0
    """Words of the knowledge the generator read."""


def run_graph(
    graph: Any,
    question: EvalQuestion,
    context: Context,
    timer: StageTimer,
    experiment: str,
    record_prompts: bool = False,
) -> Row:
    """Run one question through one graph and judge the answer.

    ``record_prompts``: keep the generator's prompts in the row
    (:mod:`crag_bench.prompt_recording`).
    """
    timer.reset()
    recorder = PromptRecorder() if record_prompts else None
    callbacks: list[Any] = [timer] if recorder is None else [timer, recorder]
    started = time.perf_counter()
    error: str | None = None
    output: dict[str, Any] = {}
    try:
        output = graph.invoke(
            {"question": question.question}, context=context, config={"callbacks": callbacks}
        )
    except Exception as exc:  # noqa: BLE001 - one failed run is a row with its error
        logger.warning("%s: question %s failed: %s", experiment, question.id, exc)
        error = f"{type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - started
    answer = str(output.get("answer") or "")
    documents = output.get("documents") or []
    knowledge = output.get("knowledge") or []
    gold_in: bool | None = None
    if question.gold_sources and experiment != "no-retrieval":
        gold_in = any(d.get("source") in question.gold_sources for d in documents)
    internal = sum(1 for k in knowledge if k.get("origin") == "internal")
    return Row(
        experiment=experiment,
        id=question.id,
        question=question.question,
        answers=list(question.answers),
        answer=answer,
        correct=answer_in_text(question.answers, answer),
        action=output.get("action"),
        gold_in_top_k=gold_in,
        answer_in_knowledge=any(answer_in_text(question.answers, k["text"]) for k in knowledge),
        passages=len(documents),
        internal=internal,
        external=len(knowledge) - internal,
        seconds=seconds,
        stages=timer.stage_seconds(),
        notes=list(output.get("notes") or []),
        error=error,
        scores=[d["score"] for d in documents if d.get("score") is not None],
        abstained=bool(output.get("abstained")),
        gold_sources=list(question.gold_sources),
        prompts=None if recorder is None else list(recorder.calls),
        looping=is_looping(answer),
        knowledge_words=sum(len(str(k["text"]).split()) for k in knowledge),
    )


def _graph_builders() -> dict[str, Callable[..., Any]]:
    """Each experiment graph's builder by name.

    Each takes the components its nodes call, and as keywords the ``method`` and ``deployment``
    the graph runs with.
    """
    from crag.graph.baselines import BASELINES
    from crag.graph.builder import build_graph

    return {"crag": build_graph, **BASELINES}


@dataclass(frozen=True)
class ExperimentGraph:
    """One experiment's graph, built with its method, and what its nodes read."""

    graph: Any
    settings: RunSettings
    """The settings each node of its runs reads (every run has the base context)."""


def experiment_graphs(
    experiments: Sequence[Experiment], base: CommandSettings, components: Components
) -> dict[str, ExperimentGraph]:
    """Each experiment's graph by name: its method is ``base``'s under the experiment's own.

    Every graph runs with ``base``'s deployment, and each run with ``base``'s context. Building
    a graph takes milliseconds; the settings are joined here so that a setting that does not fit
    (thresholds out of order for the evaluator, say) stops the eval before any run.

    Raises:
        InvalidSettingError: an experiment's settings do not fit ``base``'s.
    """
    builders = _graph_builders()
    graphs: dict[str, ExperimentGraph] = {}
    for experiment in experiments:
        method = method_with(base.method, experiment.settings)
        graph = builders[experiment.graph](components, method=method, deployment=base.deployment)
        settings = RunSettings.combine(base.context, method, base.deployment)
        graphs[experiment.name] = ExperimentGraph(graph, settings)
    return graphs


@contextmanager
def llm_cache() -> Iterator[None]:
    """Cache generator answers by prompt for the block (LangChain's in-memory LLM cache)."""
    from langchain_core.caches import InMemoryCache
    from langchain_core.globals import get_llm_cache, set_llm_cache

    previous = get_llm_cache()
    set_llm_cache(InMemoryCache())
    try:
        yield
    finally:
        set_llm_cache(previous)


def batch_generation(model: Any, max_batch_size: int) -> None:
    """Let a local generator decode up to ``max_batch_size`` overlapping prompts together.

    Off by default (answers then never depend on what else runs); ``crag-bench eval --workers``
    turns it on for the eval's own process (the deployment setting ``generator_batch_size``, which
    the default components apply once per model and value, does not undo it). A model that
    decodes on onnxruntime is left unbatched: its overlapping prompts, each decoded alone, ran
    faster than transformers' float32 batches (docs/benchmark.md), and give the answers of a
    run with one worker. Other chat models are left as they are.
    """
    if getattr(model, "decodes_on_onnxruntime", False):
        logger.info(
            "generator: each prompt decoded alone by onnxruntime, %d at once", max_batch_size
        )
        return
    enable = getattr(model, "enable_batching", None)
    if callable(enable):
        enable(max_batch_size)
        logger.info("generator: batches of up to %d prompts", max_batch_size)


def removal_order(questions: Sequence[EvalQuestion], seed: int) -> list[str]:
    """Ids of the questions with a gold source, in the seeded order their gold is removed.

    The first p% of this order lose their gold documents at level p, so the levels are nested.
    """
    ids = [q.id for q in questions if q.gold_source is not None]
    random.Random(seed).shuffle(ids)
    return ids


def removed_count(total: int, percent: int) -> int:
    """How many of ``total`` questions make ``percent``% (halves rounded up)."""
    return (total * percent + 50) // 100


def removed_share(questions: Sequence[EvalQuestion], percent: int, seed: int) -> list[str]:
    """Ids of the questions whose gold documents are removed at ``percent``%, in removal order.

    The first ``percent``% of :func:`removal_order`: seeded, and nested (a larger share holds
    every question of a smaller one).

    Raises:
        ValueError: ``percent`` is not between 0 and 100.
    """
    if not 0 <= percent <= 100:
        raise ValueError(f"the gold-removed share must be 0 to 100 (percent), not {percent}")
    order = removal_order(questions, seed)
    return order[: removed_count(len(order), percent)]


@dataclass(frozen=True)
class PlannedRun:
    """One question through one experiment, with the store view it sees."""

    experiment: Experiment
    question: EvalQuestion
    view: SourceFilter | None = None
    counted: bool = True


def plan_runs(options: EvalOptions) -> list[PlannedRun]:
    """Every run of the eval, in order.

    The timed experiments come first, question by question (no retrieval, RAG, CRAG for one
    question, then the next), so that a change in the machine's load during the run weighs on
    them alike; the others follow, experiment by experiment. The oracle and the gold-removed
    experiments skip questions without a gold source. A gold-removed experiment runs every such
    question with its gold hidden (Figure 3's curve needs them all) and counts those runs for
    the questions in the removed share; for the others it counts a run with the full store.
    """
    removed = set(removed_share(options.questions, options.gold_removed_share, options.seed))
    plan = [
        PlannedRun(experiment, question)
        for question in options.questions
        for experiment in options.experiments
        if experiment.timed
    ]
    for experiment in options.experiments:
        if experiment.timed:
            continue
        for question in options.questions:
            gold = question.gold_sources
            if experiment.gold_removed and gold:
                hidden = question.id in removed
                if hidden or options.gold_removal_curve:
                    plan.append(PlannedRun(experiment, question, SourceFilter.hide(gold), hidden))
                if not hidden:
                    plan.append(PlannedRun(experiment, question))
            elif experiment.gold_only and gold:
                plan.append(PlannedRun(experiment, question, SourceFilter.restrict(gold)))
            elif not (experiment.gold_removed or experiment.gold_only):
                plan.append(PlannedRun(experiment, question))
    return plan


def _alone_and_together(
    plan: Sequence[PlannedRun], options: EvalOptions
) -> tuple[list[PlannedRun], list[list[PlannedRun]]]:
    """Split the plan into runs made one at a time and units that may run side by side.

    With one worker everything runs alone, in plan order. Otherwise the timed experiments of
    the first ``latency_questions`` questions run alone first (the latency sample), and the
    rest is grouped by question text: one unit's runs follow each other in one worker, so the
    runs of one question never overlap (its store view is keyed by the question) and later
    experiments find the earlier ones' cached steps.
    """
    if options.workers <= 1:
        return list(plan), []
    sample = {q.id for q in options.questions[: max(0, options.latency_questions)]}
    alone = [r for r in plan if r.experiment.timed and r.question.id in sample]
    units: dict[str, list[PlannedRun]] = {}
    for run in plan:
        if not (run.experiment.timed and run.question.id in sample):
            units.setdefault(run.question.question, []).append(run)
    return alone, list(units.values())


def _progress_bar(total: int, show: bool) -> Any:
    """The runs' progress bar on stderr (hidden unless ``show``)."""
    return tqdm(total=total, desc="crag-bench eval", unit="run", disable=not show, file=sys.stderr)


def _sorted_rows(options: EvalOptions, results: list[tuple[int, Row]]) -> list[Row]:
    """The rows by experiment, in the experiments' order (plan order kept within each)."""
    rows = [row for _, row in sorted(results, key=lambda item: item[0])]
    order = {e.name: i for i, e in enumerate(options.experiments)}
    rows.sort(key=lambda r: order[r.experiment])  # stable: question order kept within each
    return rows


def run_experiments(
    options: EvalOptions, base: CommandSettings, components: EvalComponents
) -> list[Row]:
    """Every run of :func:`plan_runs`, as rows sorted by experiment (question order kept).

    ``base``: the settings every experiment starts from (:func:`experiment_graphs`). With
    ``workers`` above 1, questions run in threads and their generator prompts are decoded in
    batches; see :func:`_alone_and_together` for which runs are timed. On Ctrl-C or SIGTERM
    the runs in flight are cancelled, ``options.on_stop`` gets the finished rows and the
    interrupt propagates (:mod:`crag_bench.stopping`).
    """
    graphs = experiment_graphs(options.experiments, base, components)  # misfits stop here
    plan = plan_runs(options)
    results: list[tuple[int, Row]] = []
    bar = _progress_bar(len(plan), options.progress)
    with cancellation_scope() as token:
        try:
            _run_plan(options, (base, graphs), components, plan, results, bar)
        except KeyboardInterrupt:
            token.cancel()  # a parallel branch on LangGraph's threads stops too
            bar.close()
            if options.on_stop is not None:
                options.on_stop(_sorted_rows(options, list(results)), len(plan))
            raise
    bar.close()
    return _sorted_rows(options, results)


def _run_plan(
    options: EvalOptions,
    settings: tuple[CommandSettings, dict[str, ExperimentGraph]],
    components: EvalComponents,
    plan: Sequence[PlannedRun],
    results: list[tuple[int, Row]],
    bar: Any,
) -> None:
    """Run ``plan``, adding each finished run to ``results`` with its place in the plan.

    ``settings``: the base settings and each experiment's graph (:func:`experiment_graphs`).
    """
    base, graphs = settings
    position = {id(run): index for index, run in enumerate(plan)}
    alone, units = _alone_and_together(plan, options)
    stop = threading.Event()

    def execute(run: PlannedRun, timer: StageTimer, timed: bool) -> None:
        experiment, question = run.experiment, run.question
        if run.view is not None:
            components.filters[question.question] = run.view
        else:
            components.filters.pop(question.question, None)
        try:
            row = run_graph(
                graphs[experiment.name].graph,
                question,
                base.context,
                timer,
                experiment.name,
                options.record_prompts,
            )
        finally:
            components.filters.pop(question.question, None)
        row.gold_removed = run.view is not None and not run.view.only
        row.counted = run.counted
        row.timed = timed and experiment.timed
        results.append((position[id(run)], row))
        bar.set_postfix_str(experiment.name, refresh=False)
        bar.update()

    def execute_unit(unit: Sequence[PlannedRun]) -> None:
        timer = StageTimer()
        for run in unit:
            if stop.is_set():  # interrupted: the unit's other runs are not started
                return
            execute(run, timer, timed=False)

    timer = StageTimer()
    for run in alone:
        execute(run, timer, timed=True)
    if units:
        run_each(execute_unit, units, options.workers, stop)


# --- figures ---------------------------------------------------------------------------------


def _rates(rows: Sequence[Row]) -> dict[str, Any]:
    """Questions, correct answers, accuracy and knowledge recall of some rows."""
    n = len(rows)
    correct = sum(r.correct for r in rows)
    return {
        "questions": n,
        "correct": correct,
        "accuracy": correct / n if n else None,
        "answer_reached_generator": (sum(r.answer_in_knowledge for r in rows) / n) if n else None,
    }


def experiment_figures(experiment: Experiment, rows: Sequence[Row]) -> dict[str, Any]:
    """Accuracy, knowledge recall and what happened, over one experiment's counted rows.

    A gold-removed experiment also reports its removed and kept questions apart.
    """
    counted = [r for r in rows if r.counted]
    actions = Counter(r.action for r in counted if r.action)
    figures: dict[str, Any] = {
        "name": experiment.name,
        "group": experiment.group,
        "graph": experiment.graph,
        "description": experiment.description,
        "settings": experiment.settings,
        **_rates(counted),
        "actions": {a: actions.get(a, 0) for a in ("correct", "ambiguous", "incorrect")},
        "searched_web": sum(1 for r in counted if "search" in r.stages),
        "errors": sum(1 for r in counted if r.error),
        "notes": sum(1 for r in counted if r.notes),
        "abstained": sum(1 for r in counted if r.abstained),
        "looping": sum(1 for r in counted if r.looping),
        "knowledge_words_median": (
            statistics.median(r.knowledge_words for r in counted) if counted else None
        ),
        "abstention_rate": (
            sum(1 for r in counted if r.abstained) / len(counted) if counted else None
        ),
    }
    if experiment.gold_removed:
        figures["removed"] = _rates([r for r in counted if r.gold_removed])
        figures["kept"] = _rates([r for r in counted if not r.gold_removed])
    return figures


WITHOUT_ABSTENTION = "crag-without-abstention"
"""The experiment that answers where CRAG abstains (the paired check of abstention's cost)."""


def abstention_figures(rows: Sequence[Row]) -> dict[str, Any] | None:
    """CRAG's abstentions against the same questions run without abstention.

    Over the questions both ``crag`` and ``crag-without-abstention`` ran (counted rows): how
    often CRAG abstained, and of those how often the answer without abstention was right (what
    abstaining cost) or wrong (a wrong answer avoided). ``None`` when either did not run.
    """
    crag = {r.id: r for r in rows if r.experiment == "crag" and r.counted}
    other = {r.id: r for r in rows if r.experiment == WITHOUT_ABSTENTION and r.counted}
    if not crag or not other:
        return None
    both = [qid for qid in crag if qid in other]
    abstained = [qid for qid in both if crag[qid].abstained]
    right = sum(1 for qid in abstained if other[qid].correct)
    return {
        "questions": len(both),
        "abstained": len(abstained),
        "right_without_abstention": right,
        "wrong_without_abstention": len(abstained) - right,
    }


def latency_figures(rows: Sequence[Row]) -> dict[str, Any]:
    """Median and p95 of the whole run and of each stage (over the runs that had it)."""
    stages: dict[str, dict[str, float | None]] = {}
    for stage in STAGE_ORDER:
        figures = spread([r.stages[stage] for r in rows if stage in r.stages])
        figures["mean_per_query"] = (
            sum(r.stages.get(stage, 0.0) for r in rows) / len(rows) if rows else None
        )
        stages[stage] = figures
    total = spread([r.seconds for r in rows])
    total["mean"] = statistics.fmean(r.seconds for r in rows) if rows else None
    return {
        "total": total,
        "without_search": spread([r.seconds - r.stages.get("search", 0.0) for r in rows]),
        "stages": stages,
    }


def gold_removal_figures(
    rows: Sequence[Row], questions: Sequence[EvalQuestion], seed: int
) -> dict[str, Any]:
    """Figure 3's analogue: accuracy when p% of the questions lose their gold document.

    Each question runs once with and once without its gold documents; level p takes the
    removed run (of the gold-removed experiment) for the first p% of the seeded removal order
    and the full run (of RAG or CRAG) for the rest.
    """
    order = removal_order(questions, seed)
    if not order:
        return {"levels": list(GOLD_REMOVAL_LEVELS), "questions": 0, "curves": {}}
    full_runs = {(r.experiment, r.id): r for r in rows if not r.gold_removed and r.counted}
    removed_runs = {(r.experiment, r.id): r for r in rows if r.gold_removed}
    curves: dict[str, list[float | None]] = {}
    for pipeline, full, removed in (
        ("rag", "rag", "rag-gold-removed"),
        ("crag", "crag", "crag-gold-removed"),
    ):
        points: list[float | None] = []
        for level in GOLD_REMOVAL_LEVELS:
            cut = removed_count(len(order), level)
            hits = 0
            seen = 0
            for index, qid in enumerate(order):
                if index < cut:
                    row = removed_runs.get((removed, qid))
                else:
                    row = full_runs.get((full, qid))
                if row is None:
                    break
                seen += 1
                hits += row.correct
            points.append(hits / seen if seen == len(order) else None)
        curves[pipeline] = points
    return {"levels": list(GOLD_REMOVAL_LEVELS), "questions": len(order), "curves": curves}


STATISTICS_METHOD = (
    "paired over the questions both experiments ran: the difference is A's rate minus B's, "
    "its interval the percentile interval of a seeded paired bootstrap over the questions; "
    "p is McNemar's exact test (a two-sided binomial test with p = 1/2 on the questions where "
    "only one of the two is right). Significant only when the interval leaves out 0 and "
    "p < 0.05."
)


def _outcomes(rows: Sequence[Row]) -> dict[str, dict[str, bool]]:
    """Question id → accuracy and knowledge-recall outcome."""
    return {r.id: {"accuracy": r.correct, "knowledge_recall": r.answer_in_knowledge} for r in rows}


def statistics_figures(
    experiments: Sequence[Experiment], rows: Sequence[Row], seed: int, resamples: int
) -> dict[str, Any]:
    """CRAG against every other experiment, and gold-removed CRAG against gold-removed RAG.

    Each comparison is over the questions both ran (counted rows); the gold-removed pair is
    also compared over the removed share only.
    """
    counted: dict[str, list[Row]] = {}
    for row in rows:
        if row.counted:
            counted.setdefault(row.experiment, []).append(row)
    comparisons = []
    for a, b, scope in report_pairs(e.name for e in experiments if e.name in counted):
        a_rows, b_rows = counted[a], counted[b]
        if scope == "removed":
            a_rows = [r for r in a_rows if r.gold_removed]
            b_rows = [r for r in b_rows if r.gold_removed]
        figures = compare_outcomes(
            _outcomes(a_rows), _outcomes(b_rows), MEASURES, resamples=resamples, seed=seed
        )
        if figures is not None:
            comparisons.append({"a": a, "b": b, "scope": scope, **figures})
    return {
        "method": STATISTICS_METHOD,
        "resamples": resamples,
        "confidence": CONFIDENCE,
        "seed": seed,
        "comparisons": comparisons,
    }


def agreement_figures(rows: Sequence[Row]) -> dict[str, Any]:
    """The paper's evaluator measure on CRAG's runs: action against gold-in-top-k."""
    table = {a: {"gold_in_top_k": 0, "gold_not_in_top_k": 0} for a in ("correct", "ambiguous")}
    table["incorrect"] = {"gold_in_top_k": 0, "gold_not_in_top_k": 0}
    judged = [r for r in rows if r.gold_in_top_k is not None and r.action in table]
    for r in judged:
        table[str(r.action)]["gold_in_top_k" if r.gold_in_top_k else "gold_not_in_top_k"] += 1
    agree = table["correct"]["gold_in_top_k"] + table["incorrect"]["gold_not_in_top_k"]
    decided = len(judged) - sum(table["ambiguous"].values())
    return {
        "questions": len(judged),
        "table": table,
        "agreement": agree / len(judged) if judged else None,
        "agreement_decided_only": agree / decided if decided else None,
    }


def peak_rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    """Peak resident memory in MB (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(who).ru_maxrss / 1024


def machine_info() -> dict[str, Any]:
    """What the figures were measured on."""
    import torch

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
        "load_average_at_start": load,
    }


def _divide(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _latency(options: EvalOptions, by_experiment: dict[str, list[Row]]) -> dict[str, Any]:
    """Latency figures of the timed experiments, and CRAG's over RAG's."""
    timed_rows = {
        name: [r for r in experiment_rows if r.timed]
        for name, experiment_rows in by_experiment.items()
    }
    latency = {
        e.name: latency_figures(timed_rows[e.name])
        for e in options.experiments
        if e.timed and timed_rows.get(e.name)
    }
    ratio: dict[str, float | None] = {}
    if "crag" in latency and "rag" in latency:
        crag, rag = latency["crag"], latency["rag"]
        ratio = {
            "median_total": _divide(crag["total"]["median"], rag["total"]["median"]),
            "median_without_search": _divide(
                crag["without_search"]["median"], rag["total"]["median"]
            ),
            "p95_total": _divide(crag["total"]["p95"], rag["total"]["p95"]),
        }
    return {"experiments": latency, "crag_over_rag": ratio}


def _meta(options: EvalOptions, settings: RunSettings, seconds: float) -> dict[str, Any]:
    """What the run was: questions, store, models, settings, machine."""
    upper, lower = settings.action_thresholds()
    return {
        "questions": len(options.questions),
        "question_source": options.question_source,
        "store": options.store_description or options.store_path,
        "web": WEB_DESCRIPTION,
        "generator": "none (prompts only)"
        if options.prompts_only
        else settings.deployment.generator,
        "max_new_tokens": settings.max_new_tokens,
        "evaluator": settings.deployment.evaluator,
        "upper_threshold": upper,
        "lower_threshold": lower,
        "top_k": settings.top_k,
        "seed": options.seed,
        "gold_removed_share": options.gold_removed_share,
        "gold_removal_curve": options.gold_removal_curve,
        "prompts_only": options.prompts_only,
        "workers": options.workers,
        "latency_questions": (
            len(options.questions)
            if options.workers <= 1
            else min(len(options.questions), options.latency_questions)
        ),
        "seconds": seconds,
        "machine": machine_info(),
        "match": "a gold answer appears, as whole tokens, in the normalised generated "
        "answer (lower case, no punctuation or articles)",
    }


def _data(options: EvalOptions) -> dict[str, Any]:
    """The questions: how many have a gold document, and how many answers it holds."""
    with_gold = [q for q in options.questions if q.gold_source is not None]
    gold_known = [q for q in with_gold if q.gold_source in options.gold_texts]
    answer_in_gold = sum(
        answer_in_text(q.answers, options.gold_texts[str(q.gold_source)]) for q in gold_known
    )
    return {
        "questions": len(options.questions),
        "with_gold_document": len(with_gold),
        "answer_in_gold_document": answer_in_gold if gold_known else None,
        "gold_documents_known": len(gold_known),
    }


def _by_experiment(rows: Sequence[Row]) -> dict[str, list[Row]]:
    """The rows of each experiment, in run order."""
    grouped: dict[str, list[Row]] = {}
    for row in rows:
        grouped.setdefault(row.experiment, []).append(row)
    return grouped


def summarise(
    options: EvalOptions, settings: RunSettings, rows: Sequence[Row], seconds: float
) -> dict[str, Any]:
    """Every figure of a finished run, JSON-ready (the per-question rows included).

    ``settings``: the base settings (before any experiment's own), for the report's metadata.
    """
    return {
        "meta": _meta(options, settings, seconds),
        "data": _data(options),
        **answer_figures(
            options.experiments,
            rows,
            options.questions,
            seed=options.seed,
            share=options.gold_removed_share,
            resamples=options.resamples,
        ),
        "latency": _latency(options, _by_experiment(rows)),
        "rows": [dataclasses.asdict(r) for r in rows],
    }


def answer_figures(
    experiments: Sequence[Experiment],
    rows: Sequence[Row],
    questions: Sequence[EvalQuestion],
    *,
    seed: int,
    share: int,
    resamples: int,
) -> dict[str, Any]:
    """The figures that follow from the rows' answers.

    Per experiment, the gold-removed split, the paired comparisons, the evaluator agreement and
    the abstention check (everything but the run's metadata and latency).
    """
    by_experiment = _by_experiment(rows)
    return {
        "experiments": [experiment_figures(e, by_experiment.get(e.name, [])) for e in experiments],
        "gold_removal": {
            **gold_removal_figures(rows, questions, seed),
            "share": share,
            "removed_questions": len(removed_share(questions, share, seed)),
        },
        "statistics": statistics_figures(experiments, rows, seed, resamples),
        "agreement": agreement_figures(by_experiment.get("crag", [])),
        "abstention": abstention_figures(rows),
    }


def base_settings(options: EvalOptions, search_url: str, allowed_hosts: str) -> CommandSettings:
    """The settings every experiment starts from: the defaults, the simulated web, ``--set``.

    Raises:
        InvalidSettingError: an unknown setting or a bad value in ``options.settings``.
    """
    values: dict[str, Any] = {
        "store_path": options.store_path,
        "collection": options.collection,
        "default_corpus": options.default_corpus,
        "search_provider": "searxng",
        "search_url": search_url,
        "allowed_hosts": allowed_hosts,
        "max_new_tokens": options.max_new_tokens,
    }
    values.update(options.settings)
    return settings_by_kind(values)


def run_eval(options: EvalOptions) -> dict[str, Any]:
    """Run every experiment and measure performance; return every figure.

    Raises:
        ValueError: No questions to ask.
    """
    from crag.app.wiring import DefaultComponents
    from crag_bench.performance import measure_cold_start, measure_ingestion

    try:
        from crag_bench.simweb import SimulatedWeb
    except ImportError as exc:
        raise ValueError(
            f"crag-bench eval needs the eval extra ({exc.name} is missing): "
            "pip install -e '.[eval]', or run `make eval`"
        ) from exc

    if not options.questions:
        raise ValueError("no questions to evaluate")
    started = time.perf_counter()
    with SimulatedWeb() as web:
        base = base_settings(options, web.base_url, web.allowed_hosts)
        settings = base.run_settings()
        components = EvalComponents(
            DefaultComponents(), PromptsOnlyChatModel() if options.prompts_only else None
        )
        performance: dict[str, Any] = {}
        components.vectorstore(settings)  # builds the store first when it is empty
        measure = options.performance and not options.prompts_only
        if measure:
            performance["cold_start"] = measure_cold_start(settings, options.questions[0].question)
        with llm_cache():
            if options.workers > 1:
                batch_generation(components.chat_model(settings), options.workers)
            rows = run_experiments(options, base, components)
        if measure:
            performance["ingestion"] = measure_ingestion(
                settings.deployment.embedder, options.ingestion_docs, seed=options.seed
            )
        performance["peak_rss_mb"] = peak_rss_mb()
        performance["web_searches"] = web.searches
    seconds = time.perf_counter() - started
    results = summarise(options, settings, rows, seconds)
    results["performance"] = performance
    logger.info("crag-bench eval: %d runs in %.0f s", len(rows), seconds)
    return results
