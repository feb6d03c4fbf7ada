"""Write ``crag-bench eval``'s results: JSON, per-question rows, Markdown report and plots.

:func:`write_report` writes ``results.json`` (every figure, without the rows), ``rows.jsonl``
(one line per question and experiment), ``report.md`` and PNG plots. The plots need
matplotlib (the ``crag[eval]`` extra); without it the report is written anyway and says so.
Every section copes with missing data: any figure may be ``None`` and any experiment or
section may be absent (``crag-bench eval --experiments`` runs a subset).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crag_bench.significance import format_p
from crag_bench.timing import STAGE_ORDER

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

logger = logging.getLogger(__name__)

NONE = "—"
"""How a missing figure is written."""

ACTIONS: tuple[str, ...] = ("correct", "ambiguous", "incorrect")
"""The evaluator's actions, in the paper's order."""

GROUP_ORDER: tuple[str, ...] = ("main", "actions", "knowledge", "web", "peer", "retriever")
"""The experiment groups (the table or figure each belongs to)."""

GROUP_COLOURS: dict[str, str] = {
    "main": "#1f77b4",
    "actions": "#ff7f0e",
    "knowledge": "#2ca02c",
    "web": "#9467bd",
    "peer": "#8c564b",
    "retriever": "#7f7f7f",
}
"""Bar colour of each experiment group (tab10 colours)."""

ACTION_COLOURS: dict[str, str] = {
    "correct": "#2ca02c",
    "ambiguous": "#ffbf00",
    "incorrect": "#d62728",
}
"""Bar colour of each action."""

ABLATIONS: tuple[tuple[str, str, str], ...] = (
    (
        "actions",
        "Actions (the paper's Table 2)",
        "Each action removed (its questions go to another action), or one action for all.",
    ),
    (
        "knowledge",
        "Knowledge utilisation (the paper's Table 3)",
        "Refinement of the retrieved passages, rewriting of the web query and selection of "
        "web knowledge, each removed.",
    ),
    (
        "web",
        "RAG with web results (the paper's Table 5 analogue)",
        "Standard RAG with the first web paragraphs for the question always added.",
    ),
    (
        "peer",
        "Peer baseline",
        "The LangGraph CRAG tutorial's design run with this project's components.",
    ),
)
"""Ablation groups: group, heading, one-line explanation."""

PAPER_LATENCY_NOTE = (
    "the paper reports 0.512 s vs 0.363 s per query (1.41x); the aim here is at most 1.15x, "
    "not counting the web's own latency"
)

FIGSIZE: tuple[float, float] = (7.0, 4.0)
"""Default plot size in inches."""

DPI = 120
"""Plot resolution."""

PLOTS_SKIPPED_NOTE = (
    "Plots were skipped: matplotlib is not installed (install `crag[eval]`, e.g. "
    "`pip install 'crag[eval]'`)."
)


# --- formatting -----------------------------------------------------------------------------


def _number(spec: str, suffix: str = "") -> Callable[[Any], str]:
    """A formatter: a number in ``format`` spec ``spec`` followed by ``suffix``, or a dash."""

    def formatted(value: Any) -> str:
        return NONE if value is None else f"{value:{spec}}{suffix}"

    return formatted


_fig = _number(".3f")
"""A figure with 3 decimals, or a dash."""
_sec = _number(".2f")
"""Seconds with 2 decimals, or a dash."""
_signed = _number("+.3f")
"""A signed figure with 3 decimals, or a dash."""
_ratio = _number(".3f", "x")
"""A ratio as ``1.234x``, or a dash."""
_mb = _number(".0f", " MB")
"""Megabytes, rounded, or a dash."""
_rate = _number(".1f")
"""A throughput with 1 decimal, or a dash."""


def _unit(text: str, unit: str) -> str:
    """``text`` followed by its unit, unless it is the dash for a missing figure."""
    return text if text == NONE else f"{text} {unit}"


def _text(value: Any) -> str:
    """Any value as table text (a dash for ``None``; pipes escaped)."""
    return NONE if value is None else str(value).replace("|", "\\|")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _section(results: dict[str, Any], key: str) -> dict[str, Any]:
    """``results[key]`` when it is a mapping, else an empty one."""
    value = results.get(key)
    return value if isinstance(value, dict) else {}


def _experiments(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The experiments' figures, in run order (an empty list when absent)."""
    return list(results.get("experiments") or [])


def _by_name(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The experiments' figures by name."""
    return {e["name"]: e for e in _experiments(results)}


def _comparisons(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The paired comparisons (an empty list when absent)."""
    return list(_section(results, "statistics").get("comparisons") or [])


def _against_crag(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """CRAG's comparison with each other experiment over every question both ran, by name."""
    return {
        str(c.get("b")): c
        for c in _comparisons(results)
        if c.get("a") == "crag" and c.get("scope") == "all"
    }


def _interval(figures: dict[str, Any]) -> str:
    """``+0.014 [-0.041, +0.068]``: a difference and its interval, or a dash."""
    difference = figures.get("difference")
    if difference is None:
        return NONE
    return f"{_signed(difference)} [{_signed(figures.get('low'))}, {_signed(figures.get('high'))}]"


def _p(value: Any) -> str:
    """A p-value with 3 decimals (``< 0.001`` below that), or a dash."""
    return NONE if value is None else format_p(value)


def _verdict(figures: dict[str, Any], a: Any) -> str:
    """``not significant``, or ``A better`` / ``A worse`` when significant."""
    verdict = figures.get("verdict")
    if verdict is None:
        return NONE
    if verdict == "not significant":
        return "not significant"
    return f"{a} {verdict}"


def _question_count(results: dict[str, Any]) -> int | None:
    """How many questions were asked."""
    count = _section(results, "meta").get("questions")
    if count is None:
        count = _section(results, "data").get("questions")
    return count if isinstance(count, int) else None


# --- Markdown sections ----------------------------------------------------------------------


def main_table(results: dict[str, Any]) -> str:
    """The experiments as a Markdown table.

    Accuracy and knowledge recall, CRAG's paired accuracy difference to each (95% interval),
    McNemar's p and whether it is significant, then actions, web searches, errors and the
    abstention rate.
    """
    header = [
        "experiment",
        "group",
        "correct / questions",
        "accuracy",
        "knowledge recall",
        "crag - this: accuracy [95% CI]",
        "McNemar p",
        "crag vs this",
        "actions c / a / i",
        "web searches",
        "errors",
        "abstained",
        "looping answers",
        "knowledge words (median)",
    ]
    against = _against_crag(results)
    rows = []
    for e in _experiments(results):
        actions = e.get("actions") or {}
        counts = " / ".join(str(actions.get(a, 0)) for a in ACTIONS)
        name = e.get("name")
        accuracy = (against.get(str(name)) or {}).get("accuracy") or {}
        if name == "crag":
            difference, p_value, verdict = "reference", NONE, NONE
        else:
            difference, p_value = _interval(accuracy), _p(accuracy.get("p_value"))
            verdict = _verdict(accuracy, "crag")
        rows.append(
            [
                _text(name),
                _text(e.get("group")),
                f"{_text(e.get('correct'))} / {_text(e.get('questions'))}",
                _fig(e.get("accuracy")),
                _fig(e.get("answer_reached_generator")),
                difference,
                p_value,
                verdict,
                counts if any(actions.values()) else NONE,
                _text(e.get("searched_web")),
                _text(e.get("errors")),
                _fig(e.get("abstention_rate")),
                _text(e.get("looping")),
                _text(e.get("knowledge_words_median")),
            ]
        )
    return _table(header, rows)


def overview_section(results: dict[str, Any]) -> str:
    """Title, what was run and on what, the simulated-web note and the match metric."""
    meta = _section(results, "meta")
    machine = meta.get("machine") or {}
    seconds = meta.get("seconds")
    wall = NONE if seconds is None else f"{seconds:.2f} s ({seconds / 60:.1f} min)"
    load = machine.get("load_average_at_start")
    load_text = NONE if load is None else f"{load:.2f}"
    paragraph = (
        f"{_text(_question_count(results))} questions ({_text(meta.get('question_source'))}). "
        f"Store: {_text(meta.get('store'))}. "
        f"Generator `{_text(meta.get('generator'))}` with at most "
        f"{_text(meta.get('max_new_tokens'))} new tokens; "
        f"evaluator `{_text(meta.get('evaluator'))}` with upper threshold "
        f"{_fig(meta.get('upper_threshold'))} and lower threshold "
        f"{_fig(meta.get('lower_threshold'))}; top k {_text(meta.get('top_k'))}; "
        f"seed {_text(meta.get('seed'))}. Total wall time {wall}. "
        f"Machine: {_text(machine.get('cpus'))} CPU cores, "
        f"{_text(machine.get('torch_threads'))} torch threads, load average {load_text} "
        f"at start (CUDA {'available' if machine.get('cuda') else 'not used'}; "
        f"{_text(machine.get('platform'))}, Python {_text(machine.get('python'))}, "
        f"torch {_text(machine.get('torch'))})."
    )
    source = meta.get("question_source")
    title = f"# CRAG evaluation: {source}" if source else "# CRAG evaluation"
    parts = [title, "", paragraph]
    if meta.get("web"):
        parts += ["", f"> **Note: the web was simulated.** {meta['web']}"]
    if meta.get("match"):
        parts += ["", f"**Match metric:** an answer counts as correct when {meta['match']}."]
    swap = meta.get("reader_swap")
    if swap:
        recorder = (
            "a prompts-only run"
            if swap.get("recorded_prompts_only")
            else f"a run of `{_text(swap.get('recorded_generator'))}`"
        )
        parts += [
            "",
            f"> **Reader swapped.** {READER_SWAP_NOTE} Prompts recorded by {recorder} in "
            f"{_text(swap.get('source'))}; "
            f"{_text(swap.get('asked'))} prompts asked again, {_text(swap.get('kept'))} runs "
            f"kept as recorded (no generator call), {_text(swap.get('not_replayable'))} not "
            "replayable (more than one generator call).",
        ]
    return "\n".join(parts)


def data_section(results: dict[str, Any]) -> str:
    """How many questions, with a gold document, and with the answer in it."""
    data = _section(results, "data")
    rows = [
        ["questions", _text(data.get("questions"))],
        ["with a gold document", _text(data.get("with_gold_document"))],
        ["gold document in the bundled corpus", _text(data.get("gold_documents_known"))],
        [
            "answer in the gold document at all",
            f"{_text(data.get('answer_in_gold_document'))} of "
            f"{_text(data.get('gold_documents_known'))}",
        ],
    ]
    return "## Data\n\n" + _table(["", "count"], rows)


def results_section(results: dict[str, Any]) -> str:
    """The main table, every experiment."""
    if not _experiments(results):
        return "## Results\n\nNo experiments were run."
    note = (
        "Accuracy: share of questions answered correctly. *Knowledge recall*: share whose gold "
        "answer was in the knowledge handed to the generator. *crag - this*: CRAG's accuracy "
        "minus the experiment's over the questions both ran, with its paired-bootstrap 95% "
        "interval and McNemar's exact p (see *Is CRAG better?* below). Actions: how often "
        "the evaluator chose Correct / Ambiguous / Incorrect. `oracle` (only the gold "
        "documents' passages) and `no-retrieval` (closed book) bound what retrieval can add."
    )
    return f"## Results\n\n{note}\n\n{main_table(results)}"


def ablation_table(results: dict[str, Any], group: str) -> str | None:
    """One group's experiments: accuracy and the difference to CRAG; ``None`` when none ran."""
    members = [e for e in _experiments(results) if e.get("group") == group]
    if not members:
        return None
    crag = _by_name(results).get("crag")
    reference = crag.get("accuracy") if crag else None
    against = _against_crag(results)
    rows = []
    if crag:
        rows.append(["crag (reference)", "Corrective RAG", _fig(reference), NONE, NONE])
    for e in members:
        accuracy = e.get("accuracy")
        delta = accuracy - reference if accuracy is not None and reference is not None else None
        paired = (against.get(str(e.get("name"))) or {}).get("accuracy") or {}
        rows.append(
            [
                _text(e.get("name")),
                _text(e.get("description")),
                _fig(accuracy),
                _signed(delta),
                _verdict(paired, "crag"),
            ]
        )
    return _table(["experiment", "what changes", "accuracy", "this - crag", "crag vs this"], rows)


def ablations_section(results: dict[str, Any]) -> str:
    """The paper's ablation tables (2, 3, 5) and the peer baseline."""
    parts = ["## Ablations"]
    for group, heading, explanation in ABLATIONS:
        table = ablation_table(results, group)
        if table is not None:
            parts += [f"### {heading}", explanation, table]
    if len(parts) == 1:
        parts.append("No ablation experiments were run.")
    return "\n\n".join(parts)


def abstention_section(results: dict[str, Any]) -> str:
    """How often each experiment abstained, and what CRAG's abstentions cost."""
    parts = [
        "## Abstention",
        "A run abstains when no knowledge passed the strip threshold: it says it could not "
        "find the answer instead of asking the generator (always counted wrong).",
    ]
    rates = [
        [
            _text(e.get("name")),
            f"{_text(e.get('abstained'))} / {_text(e.get('questions'))}",
            _fig(e.get("abstention_rate")),
        ]
        for e in _experiments(results)
        if e.get("abstained")
    ]
    if rates:
        parts.append(_table(["experiment", "abstained / questions", "abstention rate"], rates))
    else:
        parts.append("No experiment abstained in this run.")
    paired = _section(results, "abstention")
    if paired:
        parts.append(
            f"Against `crag-without-abstention` ({_text(paired.get('questions'))} questions "
            f"both ran): CRAG abstained on {_text(paired.get('abstained'))}; abstained, but "
            "answered right without abstention: "
            f"**{_text(paired.get('right_without_abstention'))}**; abstained where the answer "
            f"without abstention was wrong: {_text(paired.get('wrong_without_abstention'))}."
        )
    else:
        parts.append(
            "What abstaining costs (how often the answer without it was right) needs "
            "`crag-without-abstention` and `crag` in the same run."
        )
    return "\n\n".join(parts)


def share_table(results: dict[str, Any]) -> str | None:
    """The gold-removed experiments over all, removed and kept questions; ``None`` if none."""
    members = [e for e in _experiments(results) if isinstance(e.get("removed"), dict)]
    if not members:
        return None
    rows = []
    for e in members:
        cells = [_text(e.get("name"))]
        for part in (e, e.get("removed") or {}, e.get("kept") or {}):
            cells += [
                f"{_fig(part.get('accuracy'))} ({_text(part.get('questions'))})",
                _fig(part.get("answer_reached_generator")),
            ]
        rows.append(cells)
    header = [
        "experiment",
        "accuracy, all (n)",
        "recall, all",
        "accuracy, removed (n)",
        "recall, removed",
        "accuracy, kept (n)",
        "recall, kept",
    ]
    return _table(header, rows)


def gold_removal_section(results: dict[str, Any], plotted: bool) -> str:
    """The gold-removed experiments (removed share and the rest), and Figure 3's curve."""
    removal = _section(results, "gold_removal")
    levels = list(removal.get("levels") or [])
    curves: dict[str, list[Any]] = dict(removal.get("curves") or {})
    parts = ["## Worse retriever (the paper's Figure 3 analogue)"]
    shares = share_table(results)
    if shares is not None:
        parts += [
            f"`rag-gold-removed` and `crag-gold-removed` remove the gold documents from the "
            f"store for a seeded {_text(removal.get('share'))}% of the questions with one "
            f"({_text(removal.get('removed_questions'))} of {_text(removal.get('questions'))}) "
            "and keep them for the rest. Over all of them, over the removed ones only and over "
            "the kept ones (recall: knowledge recall):",
            shares,
        ]
    parts.append(
        "Accuracy when the gold documents are removed from the store for a share of the "
        f"questions ({_text(removal.get('questions'))} questions with a known gold document)."
    )
    if not levels or not curves:
        parts.append("Not measured in this run.")
        return "\n\n".join(parts)
    rows = []
    for index, level in enumerate(levels):
        cells = [_fig(points[index] if index < len(points) else None) for points in curves.values()]
        rows.append([f"{level}%", *cells])
    parts.append(_table(["gold removed", *curves], rows))
    if plotted:
        parts.append("![Accuracy as gold documents are removed](gold_removal.png)")
    return "\n\n".join(parts)


SCOPES: dict[str, str] = {
    "all": "every question both ran",
    "removed": "the questions whose gold was removed",
}
"""How each comparison scope is written."""


def _headline(comparison: dict[str, Any]) -> str:
    """One sentence per measure of one comparison, with its verdict in bold."""
    a, b = comparison.get("a"), comparison.get("b")
    sentences = []
    for key, label in (("accuracy", "accuracy"), ("knowledge_recall", "knowledge recall")):
        figures = comparison.get(key) or {}
        sentences.append(
            f"{label} {_fig(figures.get('a'))} vs {_fig(figures.get('b'))}, difference "
            f"{_interval(figures)} (95% CI), McNemar p {_p(figures.get('p_value'))}: "
            f"**{_verdict(figures, a)}**"
        )
    return (
        f"**{_text(a)} vs {_text(b)}** ({_text(comparison.get('questions'))} questions): "
        + "; ".join(sentences)
        + "."
    )


def statistics_section(results: dict[str, Any]) -> str:
    """Paired differences with bootstrap intervals and McNemar p-values, with verdicts."""
    statistics = _section(results, "statistics")
    comparisons = _comparisons(results)
    parts = ["## Is CRAG better? Paired statistics"]
    if not comparisons:
        parts.append("Not measured in this run (CRAG and another experiment are needed).")
        return "\n\n".join(parts)
    parts.append(
        f"Each comparison A - B is {statistics.get('method') or 'paired.'} Bootstrap: "
        f"{_text(statistics.get('resamples'))} resamples, seed {_text(statistics.get('seed'))}."
    )
    headlines = [
        c
        for c in comparisons
        if (c.get("a"), c.get("b"), c.get("scope"))
        in {("crag", "rag", "all"), ("crag-gold-removed", "rag-gold-removed", "removed")}
    ]
    parts += [_headline(c) for c in headlines]
    rows = []
    for c in comparisons:
        a = c.get("a")
        accuracy = c.get("accuracy") or {}
        recall = c.get("knowledge_recall") or {}
        rows.append(
            [
                f"{_text(a)} - {_text(c.get('b'))}",
                SCOPES.get(str(c.get("scope")), _text(c.get("scope"))),
                _text(c.get("questions")),
                _interval(accuracy),
                f"{_text(accuracy.get('a_only'))} / {_text(accuracy.get('b_only'))}",
                _p(accuracy.get("p_value")),
                _verdict(accuracy, a),
                _interval(recall),
                _p(recall.get("p_value")),
                _verdict(recall, a),
            ]
        )
    header = [
        "A - B",
        "over",
        "questions",
        "Δ accuracy [95% CI]",
        "only A / only B right",
        "McNemar p",
        "accuracy",
        "Δ knowledge recall [95% CI]",
        "McNemar p",
        "knowledge recall",
    ]
    parts.append(_table(header, rows))
    return "\n\n".join(parts)


def agreement_section(results: dict[str, Any]) -> str:
    """The evaluator's actions against whether a gold passage was retrieved."""
    agreement = _section(results, "agreement")
    table = agreement.get("table") or {}
    parts = [
        "## Evaluator agreement",
        "CRAG's action per question against whether a passage of the gold document was in "
        "the top k. Correct agrees when a gold passage is in the top k, Incorrect when none "
        "is; Ambiguous agrees with neither.",
    ]
    if not table:
        parts.append("Not measured in this run (no CRAG runs with a known gold document).")
        return "\n\n".join(parts)
    rows = [
        [
            action,
            _text((table.get(action) or {}).get("gold_in_top_k")),
            _text((table.get(action) or {}).get("gold_not_in_top_k")),
        ]
        for action in ACTIONS
    ]
    parts.append(_table(["action", "gold in top k", "gold not in top k"], rows))
    parts.append(
        f"Agreement: {_fig(agreement.get('agreement'))} over "
        f"{_text(agreement.get('questions'))} questions; on decided questions only "
        f"(Ambiguous left out): {_fig(agreement.get('agreement_decided_only'))}."
    )
    return "\n\n".join(parts)


def _latency_row(label: str, spread: dict[str, Any], mean_key: str) -> list[str]:
    """A latency table row: ``label``, median, p95, n and the mean under ``mean_key``."""
    return [
        label,
        _sec(spread.get("median")),
        _sec(spread.get("p95")),
        _text(spread.get("n")),
        _sec(spread.get(mean_key)),
    ]


def latency_table(figures: dict[str, Any]) -> str:
    """One timed experiment: stage → median / p95 / n, then the totals."""
    stages = figures.get("stages") or {}
    names = [s for s in STAGE_ORDER if s in stages] + [s for s in stages if s not in STAGE_ORDER]
    rows = [_latency_row(name, stages[name] or {}, "mean_per_query") for name in names]
    rows += [
        _latency_row(label, figures.get(key) or {}, "mean")
        for label, key in (("**total**", "total"), ("total without search", "without_search"))
    ]
    return _table(["stage", "median s", "p95 s", "n", "mean s per query"], rows)


def latency_section(results: dict[str, Any]) -> str:
    """Per-stage latency of the timed experiments and CRAG's cost over RAG."""
    latency = _section(results, "latency")
    timed: dict[str, Any] = dict(latency.get("experiments") or {})
    parts = [
        "## Latency",
        "Seconds per query of the experiments run first (nothing shared with earlier runs). "
        "A stage's median and p95 are over the queries that passed it; its mean per query "
        "counts 0 for the others, so the means add up to the mean total.",
    ]
    if not timed:
        parts.append("Not measured in this run.")
        return "\n\n".join(parts)
    for name, figures in timed.items():
        parts += [f"### {name}", latency_table(figures or {})]
    ratio = latency.get("crag_over_rag") or {}
    if ratio:
        parts.append(
            f"**CRAG / RAG:** median total {_ratio(ratio.get('median_total'))}, median "
            f"without search {_ratio(ratio.get('median_without_search'))}, p95 total "
            f"{_ratio(ratio.get('p95_total'))}. Note: {PAPER_LATENCY_NOTE}."
        )
    else:
        parts.append(f"CRAG / RAG: {NONE} (both are needed). Note: {PAPER_LATENCY_NOTE}.")
    return "\n\n".join(parts)


def performance_section(results: dict[str, Any]) -> str:
    """Cold start, memory, ingestion throughput and web searches."""
    performance = _section(results, "performance")
    if not performance:
        return "## Performance\n\nNot measured in this run."
    cold = performance.get("cold_start") or {}
    ingestion = performance.get("ingestion") or {}
    cold_seconds = _unit(_sec(cold.get("seconds")), "s")
    if cold.get("error"):
        cold_seconds = f"failed after {cold_seconds} (error below)"
    rows = [
        ["cold start (new `crag ask` process, one answer)", cold_seconds],
        ["cold start process's peak memory", _mb(cold.get("peak_rss_mb"))],
        ["this process's peak memory", _mb(performance.get("peak_rss_mb"))],
        [
            "ingestion (chunk, embed, store)",
            _unit(_rate(ingestion.get("ingest_chunks_per_s")), "chunks/s"),
        ],
        [
            "raw embedder on the same chunks",
            _unit(_rate(ingestion.get("raw_embed_chunks_per_s")), "chunks/s"),
        ],
        ["ingestion / raw embedder", _ratio(ingestion.get("ingest_over_raw"))],
        ["web searches served", _text(performance.get("web_searches"))],
    ]
    parts = ["## Performance", _table(["measure", "value"], rows)]
    if cold.get("error"):
        parts.append(f"Cold start error:\n\n```\n{cold['error']}\n```")
    if cold.get("first_attempt_error"):
        parts.append(
            "The first cold-start attempt failed (the figure is the second's):\n\n"
            f"```\n{cold['first_attempt_error']}\n```"
        )
    if ingestion:
        parts.append(
            f"Ingestion measured on {_text(ingestion.get('documents'))} documents, "
            f"{_text(ingestion.get('chunks'))} chunks ({_text(ingestion.get('chunks_written'))} "
            f"written) in {_sec(ingestion.get('ingest_seconds'))} s; the raw embedder took "
            f"{_sec(ingestion.get('raw_embed_seconds'))} s."
        )
    return "\n\n".join(parts)


def plots_section(plots: Sequence[Path], note: str | None) -> str:
    """Links to the PNG files (relative to the report)."""
    parts = ["## Plots"]
    if note:
        parts.append(note)
    if plots:
        parts.append("\n".join(f"- ![{p.stem.replace('_', ' ')}]({p.name})" for p in plots))
    elif not note:
        parts.append("No plots: nothing to plot in this run.")
    return "\n\n".join(parts)


def reproduce_section() -> str:
    """How to run it again."""
    return (
        "## How to reproduce\n\n"
        "`crag-bench eval` (see README); add `--limit N` for the first N questions, `--ids FILE` "
        "for other FanOutQA question ids (a JSON list), `--experiments NAME,NAME` for a subset "
        "of the experiments (or a preset such as `main`), `--gold-removed-share PERCENT` for "
        "the share of questions whose gold documents the gold-removed experiments remove."
    )


READER_SWAP_NOTE = (
    "Every answer below was written by this generator from the prompt another run recorded: "
    "the knowledge each pipeline chose is held fixed and only the reader differs. Latency was "
    "not measured (the generator ran on another machine, in batches)."
)

PROMPTS_ONLY_NOTE = (
    "## Prompts only\n\n"
    "This run recorded the prompts each pipeline sends its generator and generated no answer, "
    "so it reports no accuracy. `crag-bench eval-reader RUN_DIR --generator SPEC --out DIR` "
    "answers the recorded prompts with a generator and writes the full report."
)


def render_report(
    results: dict[str, Any], plots: Sequence[Path] = (), plots_note: str | None = None
) -> str:
    """The whole Markdown report (a short one for a prompts-only run)."""
    if _section(results, "meta").get("prompts_only"):
        short = [overview_section(results), PROMPTS_ONLY_NOTE, data_section(results)]
        return "\n\n".join(short) + "\n"
    plotted = {p.name for p in plots}
    sections = [
        overview_section(results),
        data_section(results),
        results_section(results),
        statistics_section(results),
        ablations_section(results),
        abstention_section(results),
        gold_removal_section(results, "gold_removal.png" in plotted),
        agreement_section(results),
        latency_section(results),
        performance_section(results),
        plots_section(plots, plots_note),
        reproduce_section(),
    ]
    return "\n\n".join(sections) + "\n"


# --- plots ----------------------------------------------------------------------------------


def matplotlib_available() -> bool:
    """Whether matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _new_figure(height: float = FIGSIZE[1]) -> tuple[Figure, Axes]:
    """A figure with one axes, drawn by the Agg backend (no pyplot, no global state)."""
    import matplotlib  # noqa: F401  (a missing package fails here, not in a submodule)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(FIGSIZE[0], height), dpi=DPI)
    FigureCanvasAgg(figure)
    return figure, figure.subplots()


def _save(figure: Figure, path: Path) -> Path:
    """Write the figure as PNG."""
    figure.tight_layout()
    figure.savefig(path, dpi=DPI, format="png")
    return path


def plot_accuracy(results: dict[str, Any], path: Path) -> Path | None:
    """Horizontal bars of accuracy per experiment, coloured by group."""
    from matplotlib.patches import Patch

    measured = [e for e in _experiments(results) if e.get("accuracy") is not None]
    if not measured:
        return None
    figure, axes = _new_figure(max(FIGSIZE[1], 1.2 + 0.3 * len(measured)))
    names = [str(e["name"]) for e in measured]
    groups = [str(e.get("group", "")) for e in measured]
    values = [float(e["accuracy"]) for e in measured]
    colours = [GROUP_COLOURS.get(g, "#17becf") for g in groups]
    bars = axes.barh(range(len(measured)), values, color=colours)
    axes.bar_label(bars, labels=[f"{v:.3f}" for v in values], padding=3, fontsize=8)
    axes.set_yticks(range(len(measured)), names, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlim(0, max(1.0, max(values)) * 1.12)
    axes.set_xlabel("accuracy")
    axes.set_ylabel("experiment")
    axes.set_title(f"Accuracy per experiment (n = {_text(_question_count(results))} questions)")
    present = [g for g in GROUP_ORDER if g in groups] + sorted(
        {g for g in groups if g not in GROUP_ORDER}
    )
    handles = [Patch(color=GROUP_COLOURS.get(g, "#17becf"), label=g) for g in present]
    axes.legend(
        handles=handles, title="group", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1)
    )
    axes.grid(axis="x", alpha=0.3)
    return _save(figure, path)


def plot_gold_removal(results: dict[str, Any], path: Path) -> Path | None:
    """Accuracy against the share of questions whose gold document was removed."""
    removal = _section(results, "gold_removal")
    levels = list(removal.get("levels") or [])
    curves: dict[str, list[Any]] = dict(removal.get("curves") or {})
    lines = {}
    for name, points in curves.items():
        pairs = [(x, y) for x, y in zip(levels, points, strict=False) if y is not None]
        if pairs:
            lines[name] = pairs
    if not lines:
        return None
    figure, axes = _new_figure()
    for name, pairs in lines.items():
        axes.plot([x for x, _ in pairs], [y for _, y in pairs], marker="o", label=name)
    axes.set_xticks(levels)
    axes.set_xlabel("questions whose gold document was removed (%)")
    axes.set_ylabel("accuracy")
    axes.set_ylim(0, 1.02)
    axes.set_title(
        f"Worse retriever: accuracy as gold documents are removed "
        f"(n = {_text(removal.get('questions'))})"
    )
    axes.legend()
    axes.grid(alpha=0.3)
    return _save(figure, path)


def plot_actions(results: dict[str, Any], path: Path) -> Path | None:
    """Stacked bars of the evaluator's actions for each experiment that had any."""
    from matplotlib.ticker import MaxNLocator

    chosen = [e for e in _experiments(results) if any((e.get("actions") or {}).values())]
    if not chosen:
        return None
    figure, axes = _new_figure(max(FIGSIZE[1], 1.2 + 0.3 * len(chosen)))
    positions = range(len(chosen))
    left = [0.0] * len(chosen)
    for action in ACTIONS:
        counts = [float((e.get("actions") or {}).get(action, 0)) for e in chosen]
        axes.barh(positions, counts, left=left, label=action, color=ACTION_COLOURS[action])
        left = [a + b for a, b in zip(left, counts, strict=True)]
    axes.set_yticks(positions, [str(e["name"]) for e in chosen], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("questions")
    axes.set_ylabel("experiment")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_title("Evaluator actions per experiment")
    axes.legend(title="action", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    axes.grid(axis="x", alpha=0.3)
    return _save(figure, path)


def _stage_height(figures: dict[str, Any] | None, stage: str) -> float:
    spread = ((figures or {}).get("stages") or {}).get(stage) or {}
    value = spread.get("mean_per_query")
    if value is None:
        value = spread.get("median")
    return float(value or 0.0)


def plot_latency(results: dict[str, Any], path: Path) -> Path | None:
    """Stacked per-stage mean seconds per query (0 where a stage did not run), with the p95.

    Means over every query add up to the mean total, which per-stage medians over the queries
    that ran a stage do not (older results without means fall back to medians).
    """
    timed: dict[str, Any] = dict(_section(results, "latency").get("experiments") or {})
    if not timed:
        return None
    names = list(timed)
    figure, axes = _new_figure()
    bottom = [0.0] * len(names)
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
    for stage, colour in zip(STAGE_ORDER, colours, strict=True):
        medians = [_stage_height(timed[n], stage) for n in names]
        if any(medians):
            axes.bar(names, medians, bottom=bottom, label=stage, color=colour, width=0.5)
            bottom = [a + b for a, b in zip(bottom, medians, strict=True)]
    p95 = [((timed[n] or {}).get("total") or {}).get("p95") for n in names]
    marked = [(i, v) for i, v in enumerate(p95) if v is not None]
    if marked:
        axes.scatter(
            [i for i, _ in marked],
            [v for _, v in marked],
            marker="D",
            color="black",
            zorder=3,
            label="p95 of total",
        )
        for i, v in marked:
            axes.annotate(f"{v:.2f} s", (i, v), textcoords="offset points", xytext=(8, -3))
    axes.set_xticks(range(len(names)), names)
    axes.set_xlabel("experiment")
    axes.set_ylabel("seconds per query")
    axes.set_title("Latency: mean seconds per query by stage, p95 of the total")
    handles, labels = axes.get_legend_handles_labels()
    axes.legend(handles[::-1], labels[::-1], fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    axes.grid(axis="y", alpha=0.3)
    axes.set_ylim(0, max([*bottom, *(v for _, v in marked), 0.01]) * 1.15)
    return _save(figure, path)


PLOTS: tuple[tuple[str, Callable[[dict[str, Any], Path], Path | None]], ...] = (
    ("accuracy.png", plot_accuracy),
    ("gold_removal.png", plot_gold_removal),
    ("actions.png", plot_actions),
    ("latency.png", plot_latency),
)
"""Every plot: file name and the function that draws it (``None`` when no data)."""


def write_plots(results: dict[str, Any], out: Path) -> list[Path]:
    """Draw every plot that has data into ``out``; return the files written.

    A plot that fails is logged and skipped: the report matters more than one figure.
    """
    written = []
    for name, draw in PLOTS:
        try:
            path = draw(results, out / name)
        except Exception:
            logger.warning("crag-bench eval: could not draw %s", name, exc_info=True)
            continue
        if path is not None:
            written.append(path)
    return written


# --- writing --------------------------------------------------------------------------------


def write_report(results: dict[str, Any], out: Path) -> list[Path]:
    """Write results.json (without rows), rows.jsonl, the PNG plots and report.md.

    Returns every path written. Without matplotlib the plots are skipped (with a warning and
    a note in the report).
    """
    out.mkdir(parents=True, exist_ok=True)
    figures = {k: v for k, v in results.items() if k != "rows"}
    results_path = out / "results.json"
    results_path.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    rows_path = out / "rows.jsonl"
    with rows_path.open("w", encoding="utf-8") as handle:
        for row in results.get("rows", []):
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    plots: list[Path] = []
    note = None
    if _section(results, "meta").get("prompts_only"):
        logger.info("crag-bench eval: prompts only, nothing to plot")
    elif matplotlib_available():
        plots = write_plots(results, out)
    else:
        logger.warning("crag-bench eval: matplotlib is not installed; plots skipped (crag[eval])")
        note = PLOTS_SKIPPED_NOTE
    report_path = out / "report.md"
    report_path.write_text(render_report(results, plots, note), encoding="utf-8")
    return [results_path, rows_path, report_path, *plots]
