"""Figures per question set of one ``crag-bench eval`` run over several sets.

A run can ask the questions of several bundled sets at once (their lines concatenated into one
``--questions`` file: one process, one store, one batcher, which is how 1,000 questions fit in
the time). Each bundled question's id names its set (``nq-test-39``), so the run's
``rows.jsonl`` splits back into sets: per set, every experiment's accuracy, knowledge recall
and abstentions, CRAG against each other experiment, and gold-removed CRAG against gold-removed
RAG over all questions and over the removed ones, with the report's paired statistics
(:func:`crag_bench.significance.compare_outcomes`). ``all`` pools every set.

Beside abstentions, each experiment counts the runs whose reader replied the prompt's "no
answer" sentence (:func:`says_no_answer`), and how many of those had the answer in the
knowledge: answers a reader threw away.

Per action (:func:`by_action`), each CRAG experiment's questions are split by the action CRAG
took, with CRAG's and its RAG baseline's accuracy and knowledge recall on the same questions:
where correction pays and where it costs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from crag.knowledge.evaluation_stats import ACTIONS
from crag.knowledge.evaluation_stats import by_action as split_by_action
from crag.prompts.generate import NO_ANSWER
from crag_bench.significance import MEASURES, compare_outcomes, format_p, report_pairs

POOLED = "all"
"""The name of the group that pools every set."""

BASELINES: dict[str, str] = {
    "crag": "rag",
    "crag-strips": "rag",
    "crag-passages": "rag",
    "crag-gold-removed": "rag-gold-removed",
    "crag-gold-removed-strips": "rag-gold-removed",
    "crag-gold-removed-passages": "rag-gold-removed",
}
"""Each CRAG experiment split by action, and the RAG experiment on the same questions."""


def question_set(question_id: str) -> str:
    """The set a bundled question id names (``nq-test-39`` → ``nq-test``); else ``other``."""
    name, dash, number = question_id.rpartition("-")
    return name if dash and name and number.isdigit() else "other"


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The counted rows of a run's ``rows.jsonl``.

    Raises:
        ValueError: The file is missing or unreadable, a line is not a row, or no row is
            counted.
    """
    path = run_dir / "rows.jsonl"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise ValueError(f"cannot read {path}: row {number} is not an object")
    counted = [r for r in rows if r.get("counted", True)]
    if not counted:
        raise ValueError(f"{path} holds no counted rows")
    return counted


def row_outcomes(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, bool]]:
    """Question id → each of :data:`~crag_bench.significance.MEASURES` of the rows."""
    return {
        str(r["id"]): {
            "accuracy": bool(r["correct"]),
            "knowledge_recall": bool(r["answer_in_knowledge"]),
        }
        for r in rows
    }


_NO_ANSWER_WORDS = NO_ANSWER.lower().rstrip(".")


def says_no_answer(row: Mapping[str, Any]) -> bool:
    """Whether the reader replied the prompt's "no answer" sentence.

    That is the reader judging the knowledge not to hold the answer; CRAG's abstention asks no
    reader and is counted apart.
    """
    answer = str(row.get("answer") or "").strip().lower()
    return not row.get("abstained") and answer.startswith(_NO_ANSWER_WORDS)


def _experiment(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    refused = [r for r in rows if says_no_answer(r)]
    return {
        "questions": n,
        "accuracy": sum(bool(r["correct"]) for r in rows) / n,
        "knowledge_recall": sum(bool(r["answer_in_knowledge"]) for r in rows) / n,
        "abstained": sum(bool(r.get("abstained")) for r in rows),
        "no_answer_replies": len(refused),
        "no_answer_with_answer_in_knowledge": sum(bool(r["answer_in_knowledge"]) for r in refused),
    }


def _comparisons(
    by_experiment: Mapping[str, list[Mapping[str, Any]]], seed: int, resamples: int
) -> list[dict[str, Any]]:
    found = []
    for a, b, scope in report_pairs(by_experiment):
        a_rows, b_rows = by_experiment[a], by_experiment[b]
        if scope == "removed":
            a_rows = [r for r in a_rows if r.get("gold_removed")]
            b_rows = [r for r in b_rows if r.get("gold_removed")]
        figures = compare_outcomes(
            row_outcomes(a_rows), row_outcomes(b_rows), MEASURES, seed=seed, resamples=resamples
        )
        if figures is not None:
            found.append({"a": a, "b": b, "scope": scope, **figures})
    return found


def by_action(
    by_experiment: Mapping[str, Sequence[Mapping[str, Any]]],
) -> dict[str, dict[str, dict[str, Any]]]:
    """CRAG experiment → action → its share of the questions and both pipelines' rates there.

    Only the experiments of :data:`BASELINES` whose rows carry an action; RAG's rates are over
    the same questions (``None`` when the run has no RAG row for them). The split is crag's
    own (:func:`crag.knowledge.evaluation_stats.by_action`, as ``crag eval`` reports it).
    """
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for crag, rag in BASELINES.items():
        rows = [r for r in by_experiment.get(crag, []) if r.get("action") in ACTIONS]
        if not rows:
            continue
        rag_rows = {str(r["id"]): r for r in by_experiment.get(rag, [])}
        found[crag] = split_by_action(rows, rag_rows, _experiment)
    return found


def per_set_figures(
    rows: Sequence[Mapping[str, Any]], *, seed: int = 0, resamples: int = 10_000
) -> dict[str, dict[str, Any]]:
    """Set name (and :data:`POOLED`) → experiments' rates and CRAG's paired comparisons."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(question_set(str(row["id"])), []).append(row)
    if len(groups) > 1:
        groups[POOLED] = list(rows)
    figures: dict[str, dict[str, Any]] = {}
    for name, members in groups.items():
        by_experiment: dict[str, list[Mapping[str, Any]]] = {}
        for row in members:
            by_experiment.setdefault(str(row["experiment"]), []).append(row)
        figures[name] = {
            "experiments": {e: _experiment(r) for e, r in by_experiment.items()},
            "comparisons": _comparisons(by_experiment, seed, resamples),
            "actions": by_action(by_experiment),
        }
    return figures


def _rate(rate: Mapping[str, Any]) -> str:
    verdict = "" if rate["significant"] else " (n.s.)"
    return (
        f"{rate['difference']:+.3f} [{rate['low']:+.3f}, {rate['high']:+.3f}], "
        f"p {format_p(rate['p_value'])}{verdict}"
    )


def _share(rates: Mapping[str, Any] | None, measure: str) -> str:
    return "" if rates is None else f"{rates[measure]:.3f}"


def action_lines(actions: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    """The per-action table (:func:`by_action`) in Markdown; no lines when there is none."""
    if not actions:
        return []
    lines = [
        "\n| experiment | action | questions (share) | CRAG / RAG accuracy | "
        "CRAG / RAG knowledge recall | CRAG abstained |",
        "|---|---|---|---|---|---|",
    ]
    for experiment, split in actions.items():
        for action, a in split.items():
            crag, rag = a["crag"], a["rag"]
            lines.append(
                f"| {experiment} | {action} | {a['questions']} ({a['share']:.1%}) | "
                f"{_share(crag, 'accuracy')} / {_share(rag, 'accuracy')} | "
                f"{_share(crag, 'knowledge_recall')} / {_share(rag, 'knowledge_recall')} | "
                f"{'' if crag is None else crag['abstained']} |"
            )
    return lines


def markdown(figures: Mapping[str, Mapping[str, Any]]) -> str:
    """One table of experiments, one of comparisons and one of actions per set, in Markdown."""
    parts: list[str] = []
    for name, group in figures.items():
        parts.append(f"### {name}\n")
        parts.append(
            "| experiment | questions | accuracy | knowledge recall | abstained | "
            "reader replied no answer (answer in knowledge) |"
        )
        parts.append("|---|---|---|---|---|---|")
        for experiment, e in group["experiments"].items():
            parts.append(
                f"| {experiment} | {e['questions']} | {e['accuracy']:.3f} | "
                f"{e['knowledge_recall']:.3f} | {e['abstained']} | "
                f"{e['no_answer_replies']} ({e['no_answer_with_answer_in_knowledge']}) |"
            )
        parts.append("\n| A - B | over | questions | accuracy | knowledge recall |")
        parts.append("|---|---|---|---|---|")
        for c in group["comparisons"]:
            parts.append(
                f"| {c['a']} - {c['b']} | {c['scope']} | {c['questions']} | "
                f"{_rate(c['accuracy'])} | {_rate(c['knowledge_recall'])} |"
            )
        parts.extend(action_lines(group.get("actions", {})))
        parts.append("")
    return "\n".join(parts)
