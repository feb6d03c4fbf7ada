"""``crag thresholds FILE``: fit the action trigger's thresholds to the operator's own questions.

Every question of FILE (JSON Lines of ``{"question": ..., "answers": [...]}``, or the lines of
``crag feedback export``, read by ``crag eval``'s reader: :func:`read_questions` says which
feedback lines tell an answer) is retrieved and graded by the graph's own ``retrieve`` and
``grade`` nodes, under the command's settings (store, evaluator, ``top_k``, retrieval mode).
Its best score and whether its passages hold an answer (:mod:`crag.knowledge.answer_match`)
feed the fitting (:mod:`crag.knowledge.threshold_fit`); the command prints the fitted pair
beside the current one, what each does to the questions, and the line that sets them;
``--write`` sets them in the server's ``.env`` (:mod:`crag.app.cli.env_file`).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crag.app.cli.terminal_text import json_text, terminal_text
from crag.knowledge.answer_match import holds_answer
from crag.settings.setting_checks import env_name

if TYPE_CHECKING:  # the rest is imported where used: every crag command builds this parser
    from crag.app.cli.env_file import Change
    from crag.app.cli.eval_question import EvalQuestion
    from crag.app.cli.settings import CommandSettings
    from crag.core.state import Action
    from crag.knowledge.threshold_fit import Observation, PairOutcome, ThresholdFit
    from crag.settings.run_settings import RunSettings

__all__ = ["QuestionWithAnswers", "QuestionsFile", "add_thresholds_command", "read_questions"]

logger = logging.getLogger(__name__)

PROGRESS_EVERY = 50
"""Questions between two progress lines (``-v``)."""
NO_ANSWERS = 'no answers: "answers" must be a list of non-empty strings'


@dataclass(frozen=True)
class QuestionWithAnswers:
    """One line of the questions file that tells its answers."""

    question: str
    answers: list[str]


@dataclass(frozen=True)
class QuestionsFile:
    """The questions of a file, and its feedback lines that cannot say what the answer is."""

    questions: list[QuestionWithAnswers]
    bad_without_expected: int = 0
    """``bad`` verdicts without an expected answer: crag's answer was wrong, the right unknown."""
    good_without_answer: int = 0
    """``good`` verdicts whose record holds no answer (nor an expected one)."""
    good_by_record: int = 0
    """``good`` verdicts without an expected answer, fitted on the answer crag gave then."""

    def _reasons(self) -> list[tuple[int, str, str]]:
        """(lines, what they are, what they cannot say) of each kind of line left out."""
        kinds = [
            (
                self.bad_without_expected,
                "marked bad without an expected answer",
                "whether the passages hold an answer",
            ),
            (
                self.good_without_answer,
                "marked good whose record holds no answer",
                "what the answer is",
            ),
        ]
        return [kind for kind in kinds if kind[0]]

    def feedback_lines(self) -> list[str]:
        """Why lines were left out of the fit, and which answers are crag's own (if any)."""
        lines = [
            f"left out: {_feedback_lines(count)} {what} ({_they(count)} cannot say {unknown})"
            for count, what, unknown in self._reasons()
        ]
        if self.good_by_record:
            lines.append(
                f"answers from crag: {_feedback_lines(self.good_by_record)} marked good without "
                "an expected answer: the answer crag gave then is the answer (passages hold it "
                "only if they hold all its words in order)"
            )
        return lines

    def none_left(self) -> str:
        """Why no line is left to fit on (all were feedback lines left out)."""
        return " and ".join(
            f"{_feedback_lines(count)} {what} {'was' if count == 1 else 'were'} left out"
            for count, what, _ in self._reasons()
        )

    def as_json(self) -> dict[str, int]:
        """The lines left out, by kind (``--json``'s ``left_out``)."""
        return {
            "bad_without_expected": self.bad_without_expected,
            "good_without_answer": self.good_without_answer,
        }

    def sources_json(self) -> dict[str, int]:
        """How many questions' answers are crag's own answer, marked good."""
        return {"good_by_record": self.good_by_record}


def _feedback_lines(count: int) -> str:
    return f"{count} feedback line" + ("" if count == 1 else "s")


def _they(count: int) -> str:
    return "it" if count == 1 else "they"


def _with_answers(item: EvalQuestion) -> QuestionWithAnswers | None:
    """The line's question and answers; ``None`` for a feedback line that tells no answer.

    A feedback line's answers are its expected answer; without one, a ``good`` verdict makes
    the answer crag gave then the answer (the person said it was right). A ``bad`` one without
    an expected answer says only that crag's answer was wrong, not what the right one is.

    Raises:
        ValueError: a line that is no feedback line has no answers.
    """
    if item.answers:
        return QuestionWithAnswers(item.question, item.answers)
    if item.verdict is None:
        raise ValueError(NO_ANSWERS)
    recorded = (item.recorded_answer or "").strip()
    if item.verdict == "good" and recorded:
        return QuestionWithAnswers(item.question, [recorded])
    return None


def read_questions(path: Path, max_question_chars: int) -> QuestionsFile:
    """The questions of a JSON Lines file (``crag eval``'s reader: feedback lines too).

    Raises:
        ValueError: one line naming the file (and the line) and what is wrong with it, or
            saying that no line tells an answer.
    """
    from crag.app.cli.eval_command import read_eval_questions

    questions: list[QuestionWithAnswers] = []
    left_out = {"bad": 0, "good": 0}
    by_record = 0
    for item in read_eval_questions(path, max_question_chars):
        try:
            found = _with_answers(item)
        except ValueError as exc:
            raise ValueError(f"{path}, line {item.line}: {exc}") from None
        if found is None:
            left_out[item.verdict or "bad"] += 1
        else:
            questions.append(found)
            by_record += not item.answers
    read = QuestionsFile(questions, left_out["bad"], left_out["good"], by_record)
    if not questions:
        raise ValueError(
            f"questions file {path} holds no question with an answer: {read.none_left()}"
        )
    return read


def _retrieve_and_grade(settings: CommandSettings) -> Any:
    """A graph of the CRAG graph's ``retrieve`` and ``grade`` nodes, on the app's components.

    The same nodes, settings and components as ``crag ask``: the same search (scope, retrieval
    mode, ``top_k``) and the same scoring (with its fallback evaluator), so the scores are
    those the action trigger sees.
    """
    from langgraph.graph import END, START, StateGraph

    from crag.app.graphs import components
    from crag.core.state import State
    from crag.nodes.grade import grade
    from crag.nodes.node_runtime import GraphSettings, graph_node
    from crag.nodes.retrieve import retrieve
    from crag.settings.run_context import QUESTION_SCHEMA

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
    read: QuestionsFile
    observations: list[Observation]
    targets: tuple[float, float]
    """(correct_precision, incorrect_miss)."""
    fit: ThresholdFit
    fitted: PairOutcome
    current: PairOutcome
    env_file: Path | None = None
    """The ``.env`` file ``--write`` set the fitted pair in, if it did."""
    changes: list[Change] = field(default_factory=list)
    """What ``--write`` changed there."""

    @property
    def holding_answer(self) -> int:
        return sum(o.holds_answer for o in self.observations)

    def environment(self) -> dict[str, str]:
        """The variables that set the fitted pair for ``crag ask`` and the server."""
        return {
            env_name("upper_threshold"): str(self.fit.upper),
            env_name("lower_threshold"): str(self.fit.lower),
        }

    def environment_line(self) -> str:
        """The variables as one line: ``CRAG_UPPER_THRESHOLD=... CRAG_LOWER_THRESHOLD=...``."""
        return " ".join(f"{name}={value}" for name, value in self.environment().items())

    def written_json(self) -> dict[str, Any] | None:
        """What ``--write`` did: the file and each variable's old and new value."""
        if self.env_file is None:
            return None
        changes = [{"variable": c.name, "old": c.old, "new": c.new} for c in self.changes]
        return {"path": str(self.env_file), "changes": changes}

    def as_json(self) -> dict[str, Any]:
        total = len(self.observations)
        return {
            "questions_file": self.source,
            "questions": total,
            "left_out": self.read.as_json(),
            "answers_from": self.read.sources_json(),
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
            "env_file": self.written_json(),
            "scores": [
                {"question": q.question, "best_score": o.best_score, "holds_answer": o.holds_answer}
                for q, o in zip(self.read.questions, self.observations, strict=True)
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
        *report.read.feedback_lines(),
        f"passages hold an answer: {_percent(report.holding_answer, total)}",
        *_fit_lines(report),
        "",
        *_table_lines(report.fitted, report.current),
        "",
        *_cost_lines("fitted", report.fitted),
        *_cost_lines("current", report.current),
        "",
        report.environment_line(),
        *_written_lines(report),
    ]


def _written_lines(report: ThresholdReport) -> list[str]:
    """What ``--write`` changed: the file, then ``NAME: old -> new`` for each variable."""
    if report.env_file is None:
        return []
    return [f"wrote {report.env_file}:", *(change.line() for change in report.changes)]


def fit_report(args: argparse.Namespace, settings: CommandSettings) -> ThresholdReport:
    """Retrieve and grade FILE's questions and fit the pair on them."""
    from crag.knowledge.threshold_fit import fit_thresholds, pair_outcome

    run = settings.run_settings()
    read = read_questions(Path(args.file), run.deployment.max_question_chars)
    questions = read.questions
    logger.info("fitting the thresholds on %d questions from %s", len(questions), args.file)
    observations = observe(questions, settings)
    current = run.action_thresholds()
    fit = fit_thresholds(
        observations,
        correct_precision=args.correct_precision,
        incorrect_miss=args.incorrect_miss,
        current=current,
    )
    return ThresholdReport(
        source=args.file,
        run=run,
        read=read,
        observations=observations,
        targets=(args.correct_precision, args.incorrect_miss),
        fit=fit,
        fitted=pair_outcome(observations, fit.upper, fit.lower),
        current=pair_outcome(observations, *current),
    )


def cmd_thresholds(
    args: argparse.Namespace, settings_of: Callable[[argparse.Namespace], CommandSettings]
) -> int:
    """Fit the thresholds on FILE's questions and print them beside the current ones.

    With ``--write``, the fitted pair is set in the ``.env`` file first; the report then says
    what each variable was and is.
    """
    from crag.app.cli.env_file import default_env_file, set_variables

    if args.env_file is not None and not args.write:
        raise ValueError("--env-file names the file --write changes: give --write too")
    if args.top_k is not None:
        args.set = [*(args.set or []), f"top_k={args.top_k}"]
    report = fit_report(args, settings_of(args))
    if args.write:
        env_file = Path(args.env_file) if args.env_file else default_env_file(Path.cwd())
        changes = set_variables(env_file, report.environment())
        logger.info("set the fitted thresholds in %s", env_file)
        report = dataclasses.replace(report, env_file=env_file, changes=changes)
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
        '{"question": "...", "answers": ["..."]}, or the lines `crag feedback export` writes) '
        "as `crag ask` does, then fit the upper "
        "threshold (Correct: the passages hold an answer) and the lower one (Incorrect: they "
        "do not), and print what the fitted and the current pair do to the questions.",
    )
    thresholds.add_argument(
        "file", metavar="FILE", help="questions with answers, or feedback (JSON Lines)"
    )
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
    thresholds.add_argument(
        "--write",
        action="store_true",
        help="set the fitted pair in the .env file the server reads (CRAG_UPPER_THRESHOLD, "
        "CRAG_LOWER_THRESHOLD), keeping its other lines, and print each old and new value",
    )
    thresholds.add_argument(
        "--env-file",
        metavar="PATH",
        help="the file --write changes (default: the .env langgraph.json names, here: .env)",
    )
    store_options(thresholds)
    thresholds.set_defaults(func=functools.partial(cmd_thresholds, settings_of=settings_of))
