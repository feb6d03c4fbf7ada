"""``crag thresholds FILE``: fit the action trigger's thresholds to the operator's own questions.

Every question of FILE (JSON Lines of ``{"question": ..., "answers": [...]}``) is retrieved and
graded by the graph's own ``retrieve`` and ``grade`` nodes, under the command's settings (store,
evaluator, ``top_k``, retrieval mode). Its best score and whether its passages hold an answer
(:mod:`crag.knowledge.answer_match`) feed the fitting (:mod:`crag.knowledge.threshold_fit`); the
command prints the fitted pair beside the current one, what each does to the questions, and the
line that sets them.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crag.app.cli.terminal_text import json_text, terminal_text
from crag.core.setting_checks import env_name
from crag.knowledge.answer_match import holds_answer

if TYPE_CHECKING:  # the rest is imported where used: every crag command builds this parser
    from crag.app.cli.settings import CommandSettings
    from crag.core.run_settings import RunSettings
    from crag.core.state import Action
    from crag.knowledge.threshold_fit import Observation, PairOutcome, ThresholdFit

__all__ = ["QuestionWithAnswers", "add_thresholds_command", "read_questions"]

logger = logging.getLogger(__name__)

ANSWER_KEYS = ("answers", "possible_answers")
"""Where a line's answers are: ``answers``, or ``possible_answers`` as the benchmark's files."""
PROGRESS_EVERY = 50
"""Questions between two progress lines (``-v``)."""


@dataclass(frozen=True)
class QuestionWithAnswers:
    """One line of the questions file."""

    question: str
    answers: list[str]


def _answers_of(record: dict[str, Any]) -> list[str]:
    """The line's answers, non-blank strings; empty when it has none."""
    for key in ANSWER_KEYS:
        value = record.get(key)
        if value is not None:
            if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
                return []
            return [answer for answer in value if answer.strip()]
    return []


def _parse_line(raw: bytes, max_question_chars: int) -> QuestionWithAnswers:
    """One non-blank line.

    Raises:
        ValueError: the line's problem, in a few words.
    """
    try:
        record = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg}, column {exc.colno})") from None
    if not isinstance(record, dict):
        raise ValueError(f"a JSON object was expected, not {type(record).__name__}")
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError('empty question: "question" must be a non-empty string')
    from crag.core.validation import InvalidQuestionError, validate_question

    try:
        question = validate_question(question, max_question_chars)
    except InvalidQuestionError as exc:
        raise ValueError(str(exc)) from None
    answers = _answers_of(record)
    if not answers:
        raise ValueError('no answers: "answers" must be a list of non-empty strings')
    return QuestionWithAnswers(question, answers)


def read_questions(path: Path, max_question_chars: int) -> list[QuestionWithAnswers]:
    """The questions of a JSON Lines file; blank lines are skipped.

    Raises:
        ValueError: one line naming the file (and the line) and what is wrong with it.
    """
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        raise ValueError(f"questions file {path} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"questions file {path} is a directory, not a JSON Lines file") from None
    except OSError as exc:
        raise ValueError(f"cannot read questions file {path}: {exc.strerror}") from None
    questions = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            questions.append(_parse_line(raw, max_question_chars))
        except ValueError as exc:
            raise ValueError(f"{path}, line {number}: {exc}") from None
    if not questions:
        raise ValueError(f"questions file {path} holds no questions")
    return questions


def _retrieve_and_grade(settings: CommandSettings) -> Any:
    """A graph of the CRAG graph's ``retrieve`` and ``grade`` nodes, on the app's components.

    The same nodes, settings and components as ``crag ask``: the same search (scope, retrieval
    mode, ``top_k``) and the same scoring (with its fallback evaluator), so the scores are
    those the action trigger sees.
    """
    from langgraph.graph import END, START, StateGraph

    from crag.app.graphs import components
    from crag.core.node_runtime import GraphSettings, graph_node
    from crag.core.run_context import QUESTION_SCHEMA
    from crag.core.state import State
    from crag.nodes.grade import grade
    from crag.nodes.retrieve import retrieve

    graph_settings = GraphSettings(settings.method, settings.deployment)
    builder = StateGraph(State, context_schema=QUESTION_SCHEMA)
    builder.add_node("retrieve", graph_node(retrieve, graph_settings, components=components))
    builder.add_node("grade", graph_node(grade, graph_settings, components=components))
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", "grade")
    builder.add_edge("grade", END)
    return builder.compile()


def observe(questions: list[QuestionWithAnswers], settings: CommandSettings) -> list[Observation]:
    """Retrieve and grade every question: its best score and whether its passages hold one."""
    from crag.knowledge.threshold_fit import Observation

    graph = _retrieve_and_grade(settings)
    observations: list[Observation] = []
    fallback_graded = 0
    for number, item in enumerate(questions, start=1):
        state = graph.invoke({"question": item.question}, context=settings.context)
        documents = state.get("documents") or []
        scores = [d["score"] for d in documents if d["score"] is not None]
        best = max(scores) if scores else None
        held = holds_answer(item.answers, (d["text"] for d in documents))
        observations.append(Observation(best, held))
        fallback_graded += bool(state.get("graded_by"))
        if number % PROGRESS_EVERY == 0 or number == len(questions):
            logger.info("retrieved and graded %d of %d questions", number, len(questions))
    if fallback_graded:
        logger.warning(
            "%d questions were scored by the fallback evaluator after the %s evaluator failed: "
            "their scores are on another scale",
            fallback_graded,
            settings.run_settings().deployment.evaluator,
        )
    return observations


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _pair_json(outcome: PairOutcome) -> dict[str, Any]:
    return {
        "upper": outcome.upper,
        "lower": outcome.lower,
        "actions": {
            action: {
                "questions": share.questions,
                "share": _share(share.questions, outcome.total),
                "holding_answer": share.holding_answer,
                "holding_answer_share": _share(share.holding_answer, share.questions),
            }
            for action, share in outcome.actions.items()
        },
        "answers_discarded": outcome.answers_discarded,
        "web_skipped_without_answer": outcome.web_skipped_without_answer,
    }


@dataclass(frozen=True)
class ThresholdReport:
    """What the command found: the inputs' figures, the fit, and both pairs' outcomes."""

    source: str
    run: RunSettings
    questions: list[QuestionWithAnswers]
    observations: list[Observation]
    targets: tuple[float, float]
    """(correct_precision, incorrect_miss)."""
    fit: ThresholdFit
    fitted: PairOutcome
    current: PairOutcome

    @property
    def holding_answer(self) -> int:
        return sum(o.holds_answer for o in self.observations)

    def environment_line(self) -> str:
        """The variables that set the fitted pair for ``crag ask`` and the server."""
        return (
            f"{env_name('upper_threshold')}={self.fit.upper} "
            f"{env_name('lower_threshold')}={self.fit.lower}"
        )

    def as_json(self) -> dict[str, Any]:
        total = len(self.observations)
        return {
            "questions_file": self.source,
            "questions": total,
            "holding_answer": self.holding_answer,
            "holding_answer_share": _share(self.holding_answer, total),
            "evaluator": self.run.deployment.evaluator,
            "retrieval": self.run.retrieval,
            "top_k": self.run.top_k,
            "correct_precision": self.targets[0],
            "incorrect_miss": self.targets[1],
            "upper_threshold": self.fit.upper,
            "lower_threshold": self.fit.lower,
            "upper_fitted": self.fit.upper_fitted,
            "lower_fitted": self.fit.lower_fitted,
            "fitted": _pair_json(self.fitted),
            "current": _pair_json(self.current),
            "environment": self.environment_line(),
            "scores": [
                {"question": q.question, "best_score": o.best_score, "holds_answer": o.holds_answer}
                for q, o in zip(self.questions, self.observations, strict=True)
            ],
        }


def _percent(part: int, whole: int) -> str:
    return f"{part / whole:.1%} ({part})" if whole else "-"


def _fit_lines(report: ThresholdReport) -> list[str]:
    """What was fitted, or why a threshold is the current one."""
    precision, miss = report.targets
    fit, current = report.fit, report.current
    if fit.upper_fitted:
        upper = f"upper threshold: {fit.upper} (lowest with >= {precision:.0%} of Correct holding"
        upper += " an answer)"
    else:
        upper = f"upper threshold: no candidate gives >= {precision:.0%} of Correct holding an "
        upper += f"answer: the current {fit.upper} kept"
    if fit.lower_fitted:
        lower = f"lower threshold: {fit.lower} (highest with <= {miss:.0%} of Incorrect holding"
        lower += " an answer)"
    else:
        kept = "kept" if fit.lower == current.lower else "capped at the upper threshold"
        lower = f"lower threshold: no candidate gives <= {miss:.0%} of Incorrect holding an "
        lower += f"answer: the current {current.lower} {kept}"
    return [upper, lower]


def _table_lines(fitted: PairOutcome, current: PairOutcome) -> list[str]:
    """The two pairs side by side: each action's share, and its share holding an answer."""
    from crag.knowledge.threshold_fit import ACTIONS

    rows: list[tuple[str, str, str]] = [
        ("", "fitted", "current"),
        ("thresholds", f"{fitted.upper} / {fitted.lower}", f"{current.upper} / {current.lower}"),
    ]
    for action in ACTIONS:
        rows.append((action.capitalize(), _taken(fitted, action), _taken(current, action)))
    for action in ACTIONS:
        label = f"{action.capitalize()} holding an answer"
        rows.append((label, _percent(*_held(fitted, action)), _percent(*_held(current, action))))
    return [f"{label:<30}{left:<22}{right}".rstrip() for label, left, right in rows]


def _taken(outcome: PairOutcome, action: Action) -> str:
    """The share of the questions ``action`` takes."""
    return _percent(outcome.actions[action].questions, outcome.total)


def _held(outcome: PairOutcome, action: Action) -> tuple[int, int]:
    """(holding an answer, questions) of one action."""
    share = outcome.actions[action]
    return share.holding_answer, share.questions


def _cost_lines(name: str, outcome: PairOutcome) -> list[str]:
    return [
        f"{name}: answers discarded: {outcome.answers_discarded} questions whose passages held "
        "an answer were sent to Incorrect",
        f"{name}: web skipped without the answer: {outcome.web_skipped_without_answer} Correct "
        "questions whose passages lacked it",
    ]


def report_lines(report: ThresholdReport) -> list[str]:
    """The report as printed (without ``--json``)."""
    run, total = report.run, len(report.observations)
    return [
        f"questions: {total} from {report.source} (top_k {run.top_k}, {run.retrieval} "
        f"retrieval, {run.deployment.evaluator} evaluator)",
        f"passages hold an answer: {_percent(report.holding_answer, total)}",
        *_fit_lines(report),
        "",
        *_table_lines(report.fitted, report.current),
        "",
        *_cost_lines("fitted", report.fitted),
        *_cost_lines("current", report.current),
        "",
        report.environment_line(),
    ]


def cmd_thresholds(
    args: argparse.Namespace, settings_of: Callable[[argparse.Namespace], CommandSettings]
) -> int:
    """Fit the thresholds on FILE's questions and print them beside the current ones."""
    from crag.knowledge.threshold_fit import fit_thresholds, pair_outcome

    if args.top_k is not None:
        args.set = [*(args.set or []), f"top_k={args.top_k}"]
    settings = settings_of(args)
    run = settings.run_settings()
    questions = read_questions(Path(args.file), run.deployment.max_question_chars)
    logger.info("fitting the thresholds on %d questions from %s", len(questions), args.file)
    observations = observe(questions, settings)
    current = run.action_thresholds()
    fit = fit_thresholds(
        observations,
        correct_precision=args.correct_precision,
        incorrect_miss=args.incorrect_miss,
        current=current,
    )
    report = ThresholdReport(
        source=args.file,
        run=run,
        questions=questions,
        observations=observations,
        targets=(args.correct_precision, args.incorrect_miss),
        fit=fit,
        fitted=pair_outcome(observations, fit.upper, fit.lower),
        current=pair_outcome(observations, *current),
    )
    if args.json:
        sys.stdout.write(json_text(report.as_json()) + "\n")
    else:
        sys.stdout.write("".join(terminal_text(line) + "\n" for line in report_lines(report)))
    return 0


def _share_argument(text: str) -> float:
    """A share in [0, 1] (argparse's type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a share between 0 and 1")
    return value


def add_thresholds_command(
    sub: Any,
    store_options: Callable[[argparse.ArgumentParser], None],
    settings_of: Callable[[argparse.Namespace], CommandSettings],
) -> None:
    """``crag thresholds FILE``; ``settings_of`` reads the store options into settings."""
    thresholds = sub.add_parser(
        "thresholds",
        help="fit the action trigger's two thresholds to your own questions",
        description="Retrieve and grade every question of FILE (JSON Lines: "
        '{"question": "...", "answers": ["..."]}) as `crag ask` does, then fit the upper '
        "threshold (Correct: the passages hold an answer) and the lower one (Incorrect: they "
        "do not), and print what the fitted and the current pair do to the questions.",
    )
    thresholds.add_argument("file", metavar="FILE", help="questions with answers (JSON Lines)")
    thresholds.add_argument(
        "--top-k", type=int, metavar="N", help="passages retrieved per question (setting top_k)"
    )
    thresholds.add_argument(
        "--correct-precision",
        type=_share_argument,
        default=0.9,
        metavar="P",
        help="least share of Correct questions whose passages hold an answer (default 0.9, "
        "how the shipped upper threshold was chosen)",
    )
    thresholds.add_argument(
        "--incorrect-miss",
        type=_share_argument,
        default=0.1,
        metavar="M",
        help="largest share of Incorrect questions whose passages hold an answer (default 0.1)",
    )
    thresholds.add_argument("--json", action="store_true", help="print the report as JSON")
    store_options(thresholds)
    thresholds.set_defaults(func=functools.partial(cmd_thresholds, settings_of=settings_of))
