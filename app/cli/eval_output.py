"""``crag eval``'s figures and what it writes: the table, results.json, report.md, report.svg.

How the questions are counted: a question with answers (``answers``, ``possible_answers``, or a
feedback line's ``expected``) is judged by answer matching for every system and is in the
accuracy, its interval, McNemar's test, the per-action split and the knowledge recall. A
question without answers is answered and counted (its runs are in the abstentions, the actions
and the latency) but judged by nothing but its feedback verdict, when it has one: the verdict
says whether crag's answer was good *when the feedback was given*, so the report gives how many
were good and how many of crag's answers now are the same answer. A question with neither is
counted as not judged. The statistics are :mod:`crag.knowledge.evaluation_stats`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

from crag.knowledge.evaluation_stats import (
    ACTIONS,
    by_action,
    compare_outcomes,
    format_p,
    spread,
    wilson_interval,
)

if TYPE_CHECKING:
    from crag.app.cli.eval_question import EvalQuestion
    from crag.settings.run_settings import RunSettings

__all__ = ["evaluation_results", "report_markdown", "report_svg", "table_lines", "write_outputs"]

COUNTING = (
    "Questions with answers are judged by answer matching (an answer is right when it holds "
    "one of them) and make the accuracy, McNemar's test, the per-action split and the "
    "knowledge recall. Questions without answers are answered and counted (abstentions, "
    "actions, latency) but judged only by their feedback verdict, which is on crag's answer "
    "when the feedback was given; questions with neither are not judged."
)
ACTION_COLOURS = {"correct": "#2ca02c", "ambiguous": "#ffbf00", "incorrect": "#d62728"}
OUTCOME_COLOURS = {True: "#2ca02c", False: "#d62728", None: "#9e9e9e"}
"""A point of report.svg: CRAG's answer right, wrong, not judged."""
NONE = "-"


def _latest(rows: Sequence[Mapping[str, Any]], keys: set[str]) -> dict[tuple[str, str], Any]:
    """(question key, system) → its row, for the questions of the file (the last row wins)."""
    return {(str(r["key"]), str(r["system"])): r for r in rows if str(r["key"]) in keys}


def _rate(part: int, whole: int) -> dict[str, Any]:
    interval = wilson_interval(part, whole)
    return {
        "count": part,
        "of": whole,
        "rate": part / whole if whole else None,
        "interval": list(interval) if interval else None,
    }


def _system_figures(system: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One system's figures over its rows (the judged ones for the rates)."""
    judged = [r for r in rows if r.get("correct") is not None]
    correct = sum(bool(r["correct"]) for r in judged)
    recall = sum(bool(r["answer_in_knowledge"]) for r in judged)
    actions = Counter(str(r["action"]) for r in rows if r.get("action") in ACTIONS)
    return {
        "runs": len(rows),
        "judged": len(judged),
        "accuracy": _rate(correct, len(judged)),
        "knowledge_recall": None if system == "closed-book" else _rate(recall, len(judged)),
        "abstained": sum(bool(r.get("abstained")) for r in rows),
        "actions": {a: actions.get(a, 0) for a in ACTIONS} if actions else None,
        "latency": spread([float(r["seconds"]) for r in rows]),
    }


def _outcomes(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, bool]]:
    return {
        str(r["key"]): {
            "accuracy": bool(r["correct"]),
            "knowledge_recall": bool(r["answer_in_knowledge"]),
        }
        for r in rows
        if r.get("correct") is not None
    }


def _comparisons(by_system: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """CRAG against each other system over the judged questions both answered."""
    found = []
    crag = _outcomes(by_system["crag"])
    for other, rows in by_system.items():
        if other == "crag":
            continue
        measures = ("accuracy",) if other == "closed-book" else ("accuracy", "knowledge_recall")
        figures = compare_outcomes(crag, _outcomes(rows), measures)
        if figures is not None:
            found.append({"a": "crag", "b": other, **figures})
    return found


def _action_rates(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    return {
        "questions": n,
        "accuracy": sum(bool(r["correct"]) for r in rows) / n,
        "knowledge_recall": sum(bool(r["answer_in_knowledge"]) for r in rows) / n,
        "abstained": sum(bool(r.get("abstained")) for r in rows),
    }


def _per_action(by_system: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """CRAG's judged questions split by its action, with RAG's rates on the same ones."""

    def judged(system: str) -> list[dict[str, Any]]:
        return [
            {**r, "id": r["key"]} for r in by_system.get(system, []) if r.get("correct") is not None
        ]

    return by_action(judged("crag"), {r["id"]: r for r in judged("rag")}, _action_rates)


def _feedback(
    questions: Sequence[EvalQuestion], crag: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The questions judged by their verdict only (no answers)."""
    only = [q for q in questions if not q.answers and q.verdict]
    good = sum(q.verdict == "good" for q in only)
    same = [q for q in only if (crag.get(q.key) or {}).get("same_as_recorded")]
    return {
        "questions": len(only),
        "good": good,
        "bad": len(only) - good,
        "good_share": _rate(good, len(only)),
        "crag_answer_unchanged": len(same),
        "good_and_unchanged": sum(q.verdict == "good" for q in same),
    }


def _scores(
    questions: Sequence[EvalQuestion], crag: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    return [
        {
            "line": q.line,
            "question": q.question,
            "best_score": (crag.get(q.key) or {}).get("best_score"),
            "action": (crag.get(q.key) or {}).get("action"),
            "correct": (crag.get(q.key) or {}).get("correct"),
        }
        for q in questions
    ]


def evaluation_results(
    questions: Sequence[EvalQuestion],
    rows: Sequence[Mapping[str, Any]],
    systems: Sequence[str],
    run: RunSettings,
    source: str,
) -> dict[str, Any]:
    """Every figure of the evaluation, JSON-ready (results.json), from the rows."""
    latest = _latest(rows, {q.key for q in questions})
    by_system = {
        s: [latest[(q.key, s)] for q in questions if (q.key, s) in latest] for s in systems
    }
    crag = {str(r["key"]): r for r in by_system["crag"]}
    upper, lower = run.action_thresholds()
    with_answers = sum(bool(q.answers) for q in questions)
    verdict_only = sum(not q.answers and q.verdict is not None for q in questions)
    return {
        "questions_file": source,
        "questions": len(questions),
        "with_answers": with_answers,
        "verdict_only": verdict_only,
        "not_judged": len(questions) - with_answers - verdict_only,
        "counting": COUNTING,
        "settings": {
            **((rows[0].get("run") or {}) if rows else {}),
            "upper_threshold": upper,
            "lower_threshold": lower,
        },
        "systems": {s: _system_figures(s, r) for s, r in by_system.items()},
        "comparisons": _comparisons(by_system),
        "per_action": _per_action(by_system),
        "feedback": _feedback(questions, crag),
        "scores": _scores(questions, crag),
    }


# --- the table (stdout) and report.md -------------------------------------------------------


def _figure(value: float | None, spec: str = ".3f") -> str:
    return NONE if value is None else f"{value:{spec}}"


def _rate_text(rate: Mapping[str, Any] | None) -> str:
    """``0.500 [0.150, 0.850] (2/4)``, or a dash."""
    if not rate or rate["rate"] is None:
        return NONE
    low, high = rate["interval"]
    return f"{rate['rate']:.3f} [{low:.3f}, {high:.3f}] ({rate['count']}/{rate['of']})"


def _system_rows(results: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for name, s in results["systems"].items():
        actions = s["actions"]
        rows.append(
            [
                name,
                _rate_text(s["accuracy"]),
                _rate_text(s["knowledge_recall"]),
                f"{s['abstained']} of {s['runs']}",
                _figure(s["latency"]["median"], ".2f"),
                " / ".join(str(actions[a]) for a in ACTIONS) if actions else NONE,
            ]
        )
    return rows


SYSTEM_HEADER = [
    "system",
    "accuracy [95% CI] (right/judged)",
    "knowledge recall [95% CI]",
    "abstained",
    "median s",
    "actions c / a / i",
]


def _comparison_line(c: Mapping[str, Any]) -> str:
    a = c["accuracy"]
    line = (
        f"{c['a']} - {c['b']} ({c['questions']} questions): accuracy {a['difference']:+.3f} "
        f"[{a['low']:+.3f}, {a['high']:+.3f}], McNemar p {format_p(a['p_value'])} "
        f"(only {c['a']} right: {a['a_only']}, only {c['b']} right: {a['b_only']}): "
        f"{a['verdict'] if a['verdict'] == 'not significant' else c['a'] + ' ' + a['verdict']}"
    )
    recall = c.get("knowledge_recall")
    if recall:
        line += f"; knowledge recall {recall['difference']:+.3f}"
    return line


def _action_lines(results: Mapping[str, Any]) -> list[str]:
    lines = []
    for action, a in results["per_action"].items():
        crag, rag = a["crag"], a["rag"]
        share = NONE if a["share"] is None else f"{a['share']:.0%}"
        lines.append(
            f"{action:<10} {a['questions']:>4} ({share})  CRAG "
            f"{_figure(crag and crag['accuracy'])}  RAG {_figure(rag and rag['accuracy'])}"
        )
    return lines


def _feedback_line(results: Mapping[str, Any]) -> str:
    f = results["feedback"]
    return (
        f"judged by feedback only ({f['questions']} questions without answers): {f['good']} "
        f"good, {f['bad']} bad on crag's answer then; crag answers the same now on "
        f"{f['crag_answer_unchanged']} ({f['good_and_unchanged']} of them good)"
    )


def _head_lines(results: Mapping[str, Any]) -> list[str]:
    s = results["settings"]
    return [
        f"questions: {results['questions']} from {results['questions_file']}: "
        f"{results['with_answers']} with answers, {results['verdict_only']} judged by their "
        f"feedback verdict only, {results['not_judged']} not judged",
        f"generator {s.get('generator')}, evaluator {s.get('evaluator')} (thresholds "
        f"{s['upper_threshold']} / {s['lower_threshold']}), top_k {s.get('top_k')}, "
        f"{s.get('retrieval')} retrieval, store {s.get('store')}",
    ]


def table_lines(results: Mapping[str, Any]) -> list[str]:
    """The figures as printed on stdout."""
    rows = [SYSTEM_HEADER, *_system_rows(results)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(SYSTEM_HEADER))]
    table = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return [
        *_head_lines(results),
        "",
        *table,
        "",
        *[_comparison_line(c) for c in results["comparisons"]],
        "per action (CRAG's, questions with answers): questions (share), accuracy",
        *["  " + line for line in _action_lines(results)],
        _feedback_line(results),
    ]


def _markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    cells = [[c.replace("|", "\\|") for c in row] for row in [header, *rows]]
    lines = ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells[1:]])


def report_markdown(results: Mapping[str, Any]) -> str:
    """report.md: the same figures as the table, in Markdown, with the picture."""
    actions = [
        [
            action,
            str(a["questions"]),
            _figure(a["crag"] and a["crag"]["accuracy"]),
            _figure(a["rag"] and a["rag"]["accuracy"]),
            _figure(a["crag"] and a["crag"]["knowledge_recall"]),
        ]
        for action, a in results["per_action"].items()
    ]
    parts = [
        "# crag eval",
        "\n\n".join(_head_lines(results)),
        results["counting"],
        _markdown_table(SYSTEM_HEADER, _system_rows(results)),
        "\n".join(f"- {_comparison_line(c)}" for c in results["comparisons"])
        or "No comparison: no question with answers.",
        "## Per action\n\n"
        + _markdown_table(
            ["action", "questions", "CRAG accuracy", "RAG accuracy", "CRAG knowledge recall"],
            actions,
        ),
        _feedback_line(results),
        "![best passage score per question, and accuracy per action](report.svg)",
    ]
    return "\n\n".join(parts) + "\n"


# --- report.svg -----------------------------------------------------------------------------


def _score_range(scores: Sequence[float], thresholds: Sequence[float]) -> tuple[float, float]:
    values = [*scores, *thresholds]
    low, high = min(values), max(values)
    pad = (high - low) * 0.1 or 0.5
    return low - pad, high + pad


def _scores_panel(results: Mapping[str, Any]) -> list[str]:
    """Each question's best passage score (sorted), the two thresholds, coloured by outcome."""
    left, top, width, height = 60.0, 40.0, 400.0, 240.0
    points = sorted(
        (s for s in results["scores"] if s["best_score"] is not None),
        key=lambda s: s["best_score"],
    )
    upper, lower = results["settings"]["upper_threshold"], results["settings"]["lower_threshold"]
    low, high = _score_range([p["best_score"] for p in points], [upper, lower])

    def y(value: float) -> float:
        return top + height * (high - value) / (high - low)

    parts = [
        f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" stroke="#444"/>',
        f'<text x="{left}" y="{top - 12}" font-size="12">Best passage score per question '
        "(CRAG right: green, wrong: red, not judged: grey)</text>",
        f'<text x="{left - 8}" y="{y(high) + 4:.1f}" font-size="10" text-anchor="end">'
        f"{high:.2f}</text>",
        f'<text x="{left - 8}" y="{y(low):.1f}" font-size="10" text-anchor="end">{low:.2f}</text>',
    ]
    for name, value in (("upper", upper), ("lower", lower)):
        parts.append(
            f'<line x1="{left}" x2="{left + width}" y1="{y(value):.1f}" y2="{y(value):.1f}" '
            'stroke="#555" stroke-dasharray="5,4"/>'
            f'<text x="{left + width - 4}" y="{y(value) - 4:.1f}" font-size="10" '
            f'text-anchor="end">{name} threshold {value}</text>'
        )
    step = width / (len(points) + 1)
    for index, point in enumerate(points, start=1):
        parts.append(
            f'<circle cx="{left + index * step:.1f}" cy="{y(point["best_score"]):.1f}" r="4" '
            f'fill="{OUTCOME_COLOURS[point["correct"]]}"><title>{escape(point["question"])}'
            "</title></circle>"
        )
    return parts


def _bar(x: float, base: float, height: float, share: float | None, colour: str) -> str:
    if share is None:
        return ""
    tall = height * share
    return (
        f'<rect x="{x:.1f}" y="{base - tall:.1f}" width="22" height="{tall:.1f}" '
        f'fill="{colour}"/><text x="{x + 11:.1f}" y="{base - tall - 3:.1f}" font-size="9" '
        f'text-anchor="middle">{share:.2f}</text>'
    )


def _actions_panel(results: Mapping[str, Any]) -> list[str]:
    """Per action: CRAG's accuracy (solid) and RAG's on the same questions (pale)."""
    left, top, height = 550.0, 40.0, 240.0
    base = top + height
    parts = [
        f'<text x="{left}" y="{top - 12}" font-size="12">Accuracy per action: CRAG (solid), '
        "RAG (pale)</text>",
        f'<line x1="{left}" x2="{left + 260}" y1="{base}" y2="{base}" stroke="#444"/>',
    ]
    for index, action in enumerate(ACTIONS):
        split = results["per_action"][action]
        x = left + 15 + index * 85
        crag = split["crag"]["accuracy"] if split["crag"] else None
        rag = split["rag"]["accuracy"] if split["rag"] else None
        colour = ACTION_COLOURS[action]
        parts.append(_bar(x, base, height, crag, colour))
        parts.append(_bar(x + 26, base, height, rag, colour + "66"))
        parts.append(
            f'<text x="{x + 24:.1f}" y="{base + 16}" font-size="11" text-anchor="middle">'
            f"{action} ({split['questions']})</text>"
        )
    return parts


def report_svg(results: Mapping[str, Any]) -> str:
    """report.svg: the scores against the thresholds, and the accuracy per action."""
    body = [p for p in (*_scores_panel(results), *_actions_panel(results)) if p]
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="840" height="320" '
        'viewBox="0 0 840 320" font-family="sans-serif">\n'
        '<rect width="840" height="320" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n"
    )


def write_outputs(directory: Path, results: Mapping[str, Any]) -> None:
    """Write results.json, report.md and report.svg in ``directory``.

    rows.jsonl is written as the rows come (:class:`crag.app.cli.eval_command.RowsFile`).
    """
    (directory / "results.json").write_text(
        json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (directory / "report.md").write_text(report_markdown(results), encoding="utf-8")
    (directory / "report.svg").write_text(report_svg(results), encoding="utf-8")
