"""``crag eval FILE``: does CRAG beat plain RAG on the operator's own store and model server.

Every question of FILE (JSON Lines: ``{"question": ..., "answers": [...]}``, answers optional;
or the lines of ``crag feedback export``: question, expected, verdict, record) is answered by
the CRAG graph (:func:`crag.graph.builder.build_graph`), by standard RAG
(:func:`crag.graph.baselines.build_rag_graph`) and, with ``--closed-book``, by the generator
alone, all under the command's settings (store, generator, evaluator: as ``crag ask``).

An answer is right when it holds one of the question's answers
(:mod:`crag.knowledge.answer_match`, as ``crag thresholds``); the statistics are crag's
(:mod:`crag.knowledge.evaluation_stats`, shared with crag-bench). A question without answers
is run and counted, but only its feedback verdict judges it (:mod:`crag.app.cli.eval_output`).

Every finished run is appended to ``DIR/rows.jsonl`` as it ends, so a run that stops (a model
server that dies, Ctrl-C, SIGTERM) keeps what it did; the same command with ``--output DIR``
again resumes, skipping the runs already there. Without ``--output`` DIR is a new folder
``FILE-STEM-YYYYMMDD-HHMMSS`` in the evaluations folder (setting ``eval_dir``: ``.crag/eval``
by default), where the chat page's quality view finds the newest.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from crag.app.cli.eval_question import EvalQuestion
from crag.app.cli.question_answers import answers_of as _answers_of
from crag.app.cli.terminal_text import terminal_text
from crag.knowledge.answer_match import holds_answer

if TYPE_CHECKING:
    from crag.app.cli.settings import CommandSettings
    from crag.settings.deployment import DeploymentSettings

__all__ = ["EvalQuestion", "add_eval_command", "read_eval_questions"]

logger = logging.getLogger(__name__)

SYSTEMS = ("crag", "rag")
"""What every question is answered by; ``--closed-book`` adds :data:`CLOSED_BOOK`."""
CLOSED_BOOK = "closed-book"
VERDICTS = ("good", "bad")
"""A feedback line's verdicts (``crag feedback export``)."""
PROGRESS_EVERY = 50
"""Questions between two progress log lines (``-v``), beside the progress bar."""


def _feedback_fields(record: dict[str, Any]) -> tuple[list[str], str | None, str | None]:
    """A feedback line's answers (its expected answer), verdict and recorded answer.

    Raises:
        ValueError: the verdict is neither ``good`` nor ``bad``.
    """
    verdict = record.get("verdict")
    if verdict is not None and verdict not in VERDICTS:
        raise ValueError(f'"verdict" must be "good" or "bad", not {str(verdict)[:40]!r}')
    expected = record.get("expected")
    answers = [expected] if isinstance(expected, str) and expected.strip() else []
    run = record.get("record")
    recorded = run.get("answer") if isinstance(run, dict) else None
    return answers, verdict, recorded if isinstance(recorded, str) else None


def _parse_line(number: int, raw: bytes, max_question_chars: int) -> EvalQuestion:
    """One non-blank line.

    Raises:
        ValueError: the line's problem, in a few words.
    """
    from crag.core.validation import InvalidQuestionError, validate_question

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
    try:
        question = validate_question(question, max_question_chars)
    except InvalidQuestionError as exc:
        raise ValueError(str(exc)) from None
    answers, verdict, recorded = _feedback_fields(record)
    for key in ("answers", "possible_answers"):
        value = record.get(key)
        if value is not None and not (
            isinstance(value, list) and all(isinstance(a, str) for a in value)
        ):
            raise ValueError(f'"{key}" must be a list of strings')
    return EvalQuestion(number, question, _answers_of(record) or answers, verdict, recorded)


def read_eval_questions(path: Path, max_question_chars: int) -> list[EvalQuestion]:
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
            questions.append(_parse_line(number, raw, max_question_chars))
        except ValueError as exc:
            raise ValueError(f"{path}, line {number}: {exc}") from None
    if not questions:
        raise ValueError(f"questions file {path} holds no questions")
    return questions


def run_fingerprint(settings: CommandSettings) -> dict[str, Any]:
    """The settings a row was answered under: a resumed run must have the same."""
    run = settings.run_settings()
    upper, lower = run.action_thresholds()
    return {
        "store": run.deployment.store_path,
        "collection": run.deployment.collection,
        "generator": run.deployment.generator,
        "evaluator": run.deployment.evaluator,
        "evaluator_model": run.deployment.evaluator_model,
        "upper_threshold": upper,
        "lower_threshold": lower,
        "top_k": run.top_k,
        "retrieval": run.retrieval,
    }


def build_graphs(settings: CommandSettings, closed_book: bool) -> dict[str, Any]:
    """System name → its graph, on the app's components under the command's settings."""
    from crag.app.graphs import components
    from crag.graph.baselines import build_no_retrieval_graph, build_rag_graph
    from crag.graph.builder import build_graph

    method, deployment = settings.method, settings.deployment
    graphs: dict[str, Any] = {
        "crag": build_graph(components, method=method, deployment=deployment),
        "rag": build_rag_graph(components, method=method, deployment=deployment),
    }
    if closed_book:
        graphs[CLOSED_BOOK] = build_no_retrieval_graph(
            components, method=method, deployment=deployment
        )
    return graphs


def _best_score(documents: Sequence[dict[str, Any]]) -> float | None:
    scores = [d["score"] for d in documents if d.get("score") is not None]
    return max(scores) if scores else None


def answer_row(
    graph: Any, system: str, item: EvalQuestion, settings: CommandSettings
) -> dict[str, Any]:
    """Run one question on one system: its row (answer, action, outcome, seconds)."""
    started = time.perf_counter()
    output = graph.invoke({"question": item.question}, context=settings.context)
    seconds = time.perf_counter() - started
    answer = str(output.get("answer") or "")
    knowledge = [str(k.get("text", "")) for k in output.get("knowledge") or []]
    judged = bool(item.answers)
    row: dict[str, Any] = {
        "key": item.key,
        "line": item.line,
        "system": system,
        "question": item.question,
        "answers": item.answers,
        "verdict": item.verdict,
        "answer": answer,
        "action": output.get("action"),
        "best_score": _best_score(output.get("documents") or []),
        "correct": holds_answer(item.answers, [answer]) if judged else None,
        "answer_in_knowledge": holds_answer(item.answers, knowledge) if judged else None,
        "abstained": bool(output.get("abstained", False)),
        "notes": list(output.get("notes") or []),
        "seconds": seconds,
    }
    if system == "crag" and item.recorded_answer is not None:
        row["same_as_recorded"] = " ".join(answer.split()) == " ".join(item.recorded_answer.split())
    return row


class RowsFile:
    """``DIR/rows.jsonl``: the rows of earlier runs, and each new one appended as it ends."""

    def __init__(self, directory: Path | None, fingerprint: dict[str, Any]) -> None:
        self.directory = directory
        self.fingerprint = fingerprint
        self.rows: list[dict[str, Any]] = []
        self._out: IO[str] | None = None

    @property
    def path(self) -> Path | None:
        return None if self.directory is None else self.directory / "rows.jsonl"

    def load(self) -> int:
        """Read the rows already there; the count.

        Raises:
            ValueError: the directory cannot be made, or its rows were run under other
                settings.
        """
        if self.directory is None or self.path is None:
            return 0
        try:
            # 0700: the rows hold members' questions when FILE is a feedback export
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            text = self.path.read_text(encoding="utf-8") if self.path.exists() else ""
        except OSError as exc:
            raise ValueError(f"cannot use --output {self.directory}: {exc.strerror}") from None
        for number, line in enumerate(text.splitlines(), start=1):
            row = self._row(line, number)
            if row is not None:
                self.rows.append(row)
        self._rewrite()  # without a line cut short by a kill
        return len(self.rows)

    def _row(self, line: str, number: int) -> dict[str, Any] | None:
        if not line.strip():
            return None
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            logger.warning("%s, line %d: not a row (cut short?): run again", self.path, number)
            return None
        if not isinstance(row, dict) or "key" not in row or "system" not in row:
            logger.warning("%s, line %d: not a row: run again", self.path, number)
            return None
        for name, value in self.fingerprint.items():
            if (row.get("run") or {}).get(name) != value:
                raise ValueError(
                    f"{self.path} holds rows answered with {name} "
                    f"{(row.get('run') or {}).get(name)!r}, not {value!r}: give another "
                    "--output, or the same settings to resume"
                )
        return row

    def _rewrite(self) -> None:
        assert self.path is not None
        partial = self.path.with_name(self.path.name + ".tmp")
        partial.write_text("".join(json.dumps(r) + "\n" for r in self.rows), encoding="utf-8")
        partial.replace(self.path)

    def done(self) -> set[tuple[str, str]]:
        """(question key, system) of every row."""
        return {(str(r["key"]), str(r["system"])) for r in self.rows}

    @contextmanager
    def appending(self) -> Iterator[None]:
        """Keep the file open for :meth:`add` during the block."""
        if self.path is not None:
            self._out = self.path.open("a", encoding="utf-8")
        try:
            yield
        finally:
            if self._out is not None:
                self._out.close()
                self._out = None

    def add(self, row: dict[str, Any]) -> None:
        """Keep ``row``; written at once, so a kill after this loses nothing of it."""
        row = {**row, "run": self.fingerprint}
        self.rows.append(row)
        if self._out is not None:
            self._out.write(json.dumps(row) + "\n")
            self._out.flush()


@dataclass
class Progress:
    """Where the evaluation is: for the line that says where it stopped."""

    total: int
    done: int = 0
    current: EvalQuestion | None = None

    def where(self) -> str:
        if self.current is None:
            return f"after {self.done} of {self.total} questions"
        return f"at question {self.done + 1} of {self.total} (line {self.current.line} of the file)"


def evaluate(
    questions: Sequence[EvalQuestion],
    graphs: dict[str, Any],
    settings: CommandSettings,
    rows: RowsFile,
    progress: Progress,
) -> None:
    """Answer every question on every system not in ``rows`` yet, adding each row."""
    from tqdm import tqdm

    done = rows.done()
    bar = tqdm(
        total=len(questions), desc="crag eval", unit="question", file=sys.stderr, disable=None
    )
    with bar, rows.appending():
        for item in questions:
            progress.current = item
            for system, graph in graphs.items():
                if (item.key, system) not in done:
                    rows.add(answer_row(graph, system, item, settings))
            progress.current = None
            progress.done += 1
            bar.update()
            if progress.done % PROGRESS_EVERY == 0:
                logger.info("answered %d of %d questions", progress.done, len(questions))


def default_output(file: str, deployment: DeploymentSettings) -> Path:
    """A new folder for a run given no ``--output``: FILE's stem and the time, in ``eval_dir``."""
    from crag.settings.deployment import evaluations_folder

    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = evaluations_folder(deployment.eval_dir, deployment.store_path)
    return folder / f"{Path(file).stem or 'questions'}-{stamp}"


def _stopped_line(progress: Progress, rows: RowsFile, reason: str, given: bool) -> str:
    again = (
        "run the same command again to resume"
        if given
        else f"to resume, run the same command with --output {rows.directory}"
    )
    kept = (
        f"the {len(rows.rows)} rows done are kept in {rows.path}; {again}"
        if rows.path is not None
        else "no rows were kept (give --output DIR to keep them and resume)"
    )
    return f"crag eval: stopped {progress.where()}: {reason}; {kept}"


def _print_error(message: str) -> None:
    sys.stderr.write(terminal_text(message) + "\n")
    sys.stderr.flush()


def cmd_eval(
    args: argparse.Namespace, settings_of: Callable[[argparse.Namespace], CommandSettings]
) -> int:
    """Answer FILE's questions with CRAG, RAG (and closed book); print and write the figures."""
    from crag.app.cli.eval_output import evaluation_results, table_lines, write_outputs
    from crag.core.cancellation import cancellation_scope

    settings = settings_of(args)
    run = settings.run_settings()
    questions = read_eval_questions(Path(args.file), run.deployment.max_question_chars)
    output = Path(args.output) if args.output else default_output(args.file, run.deployment)
    rows = RowsFile(output, run_fingerprint(settings))
    if not args.output:
        _print_error(f"crag eval: writing to {output} (--output DIR to choose)")
    earlier = rows.load()
    if earlier:
        _print_error(f"crag eval: resuming: {earlier} rows already in {rows.path}")
    graphs = build_graphs(settings, args.closed_book)
    progress = Progress(len(questions))
    try:
        with cancellation_scope() as token:
            try:
                evaluate(questions, graphs, settings, rows, progress)
            except KeyboardInterrupt:
                token.cancel()  # a parallel branch's model work stops too
                raise
    except KeyboardInterrupt:
        _print_error(_stopped_line(progress, rows, "interrupted", bool(args.output)))
        raise
    except Exception as exc:  # any failure of a run stops the evaluation here
        logger.debug("the evaluation stopped", exc_info=True)
        _print_error(
            _stopped_line(progress, rows, f"{type(exc).__name__}: {exc}", bool(args.output))
        )
        return 1
    results = evaluation_results(questions, rows.rows, list(graphs), run, args.file)
    sys.stdout.write("".join(terminal_text(line) + "\n" for line in table_lines(results)))
    write_outputs(output, results)
    _print_error(f"crag eval: wrote results.json, report.md and report.svg to {output}")
    return 0


def add_eval_command(
    sub: Any,
    store_options: Callable[[argparse.ArgumentParser], None],
    settings_of: Callable[[argparse.Namespace], CommandSettings],
) -> None:
    """``crag eval FILE``; ``settings_of`` reads the store options into settings."""
    parser = sub.add_parser(
        "eval",
        help="answer your own questions with CRAG and plain RAG and compare them",
        description="Answer every question of FILE (JSON Lines: "
        '{"question": "...", "answers": ["..."]}, answers optional; or the lines of `crag '
        "feedback export`) with the CRAG graph and with standard RAG (and the generator "
        "alone with --closed-book) as `crag ask` would, and print each one's accuracy with "
        "its 95% interval, McNemar's p of CRAG against RAG, the accuracy per action, the "
        "knowledge recall, the abstentions and the median latency.",
    )
    parser.add_argument("file", metavar="FILE", help="the questions (JSON Lines)")
    parser.add_argument(
        "--closed-book", action="store_true", help="also answer with the generator alone"
    )
    parser.add_argument(
        "--output",
        "-o",
        metavar="DIR",
        help="write results.json, report.md, report.svg and rows.jsonl there (default: a new "
        "folder FILE-STEM-DATE-TIME in the evaluations folder, setting eval_dir: .crag/eval); "
        "run again with the same DIR to resume a run that stopped",
    )
    store_options(parser)
    parser.set_defaults(func=functools.partial(cmd_eval, settings_of=settings_of))
