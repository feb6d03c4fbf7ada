"""DPR's open-domain QA question sets, read from the Anserini jar that ``pyserini`` ships.

``pyserini==0.17.0`` carries ``anserini-0.14.3-fatjar.jar``, whose ``topics-and-qrels/``
folder holds the question sets of Karpukhin et al. (2020) with their gold answer lists. The jar
is only read as a zip file: pyserini is never imported nor installed.

Formats, by set:

* NQ and TriviaQA: one tab-separated row per question, the question then a Python-literal list
  of answers. Cells holding quotes are CSV-quoted (read with :mod:`csv`); the answer list is read
  with :func:`ast.literal_eval` because some answers are in double quotes. TriviaQA questions
  that were quoted twice (``"How many... ""Animal Crackers"" ...?"``) are unquoted once more.
* WebQuestions, SQuAD and CuratedTREC: JSON lines ``{"question": ..., "answer": [...]}``.
  CuratedTREC answers are regular expressions; :func:`literal_answers` turns a pattern that is
  only an alternation of literal strings into those strings, and the question is left out when
  any pattern is more than that (see its docstring for why).
"""

from __future__ import annotations

import ast
import csv
import functools
import io
import logging
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from crag_bench.answer_lists import distinct_nonblank, json_lines, string_list

logger = logging.getLogger(__name__)

PYSERINI_DISTRIBUTION = "pyserini==0.17.0"
JAR_IN_WHEEL = "pyserini/resources/jars/anserini-0.14.3-fatjar.jar"
TOPICS_FOLDER = "topics-and-qrels"

Format = Literal["tsv", "jsonl", "regex"]


class DprSetError(ValueError):
    """A DPR question set cannot be read; the message names the set, the place and the problem."""


@dataclass(frozen=True)
class DprSet:
    """One DPR question set.

    Attributes:
        name: The name of the set here (``nq-dev``); also its output file's stem.
        topic: The set's name in the jar (``nq.dev`` for ``topics.dpr.nq.dev.txt``).
        format: How its file is written.
    """

    name: str
    topic: str
    format: Format

    @property
    def member(self) -> str:
        """The set's path inside the Anserini jar."""
        return f"{TOPICS_FOLDER}/topics.dpr.{self.topic}.txt"


DPR_SETS = (
    DprSet("nq-dev", "nq.dev", "tsv"),
    DprSet("trivia-dev", "trivia.dev", "tsv"),
    DprSet("nq-test", "nq.test", "tsv"),
    DprSet("trivia-test", "trivia.test", "tsv"),
    DprSet("wq-test", "wq.test", "jsonl"),
    DprSet("squad-test", "squad.test", "jsonl"),
    DprSet("curated-test", "curated.test", "regex"),
)
"""Every set, dev sets first."""


@dataclass(frozen=True)
class SourceQuestion:
    """A question as the set gives it.

    Attributes:
        position: 1-based position of the question in its set.
        question: The question text.
        answers: The gold answers, duplicates removed, in the set's order.
    """

    position: int
    question: str
    answers: tuple[str, ...]


def dpr_set(name: str) -> DprSet:
    """The set called ``name``.

    Raises:
        DprSetError: no set has that name (the message lists the names).
    """
    for spec in DPR_SETS:
        if spec.name == name:
            return spec
    raise DprSetError(
        f"unknown DPR set {name!r}; valid: {', '.join(spec.name for spec in DPR_SETS)}"
    )


def read_jar(jar: Path, sets: tuple[DprSet, ...] = DPR_SETS) -> dict[str, list[SourceQuestion]]:
    """Read question sets from the Anserini jar.

    Returns:
        Each set's name and its questions, in the order of ``sets``.

    Raises:
        DprSetError: the jar cannot be opened, lacks a set, or a set is malformed.
    """
    try:
        with zipfile.ZipFile(jar) as archive:
            texts = {spec.name: _member_text(archive, jar, spec) for spec in sets}
    except (OSError, zipfile.BadZipFile) as exc:
        raise DprSetError(f"cannot read the Anserini jar {jar}: {exc}") from exc
    return {spec.name: parse_set(spec, texts[spec.name]) for spec in sets}


def _member_text(archive: zipfile.ZipFile, jar: Path, spec: DprSet) -> str:
    try:
        data = archive.read(spec.member)
    except KeyError as exc:
        raise DprSetError(f"{jar} holds no {spec.member} (not the Anserini 0.14.3 jar?)") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DprSetError(f"{jar}: {spec.member} is not UTF-8 text ({exc.reason})") from exc


def jar_from_wheel(wheel: Path, folder: Path) -> Path:
    """Extract the Anserini jar from a downloaded pyserini wheel into ``folder``.

    Raises:
        DprSetError: the wheel cannot be read or holds no jar.
    """
    try:
        with zipfile.ZipFile(wheel) as archive:
            return Path(archive.extract(JAR_IN_WHEEL, folder))
    except KeyError as exc:
        raise DprSetError(f"{wheel} holds no {JAR_IN_WHEEL}") from exc
    except (OSError, zipfile.BadZipFile) as exc:
        raise DprSetError(f"cannot read the pyserini wheel {wheel}: {exc}") from exc


def download_jar(folder: Path) -> Path:
    """Fetch the pyserini wheel with pip (no dependencies) and extract its Anserini jar."""
    logger.info("downloading %s (about 110 MB) into %s", PYSERINI_DISTRIBUTION, folder)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
    try:
        subprocess.run([*command, PYSERINI_DISTRIBUTION, "-d", str(folder)], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise DprSetError(f"could not download {PYSERINI_DISTRIBUTION}: {exc}") from exc
    wheels = sorted(folder.glob("pyserini-*.whl"))
    if not wheels:
        raise DprSetError(f"pip download left no pyserini wheel in {folder}")
    return jar_from_wheel(wheels[0], folder)


def parse_set(spec: DprSet, text: str) -> list[SourceQuestion]:
    """The questions of one set's file.

    CuratedTREC questions whose answer patterns are not plain alternations are left out.

    Raises:
        DprSetError: a row or line is malformed (the message says which and why).
    """
    rows = _tsv_rows(spec, text) if spec.format == "tsv" else _jsonl_rows(spec, text)
    questions: list[SourceQuestion] = []
    for position, (where, question, answers) in enumerate(rows, start=1):
        if spec.format == "regex":
            literal = _literal_lists(answers)
            if literal is None:
                continue
            answers = literal
        kept = distinct_nonblank(answers)
        if not question.strip():
            raise DprSetError(f"{spec.member} {where}: empty question")
        if kept:
            questions.append(SourceQuestion(position, " ".join(question.split()), kept))
    return questions


def _tsv_rows(spec: DprSet, text: str) -> list[tuple[str, str, list[str]]]:
    rows: list[tuple[str, str, list[str]]] = []
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t")
    try:
        for number, row in enumerate(reader, start=1):
            where = f"row {number}"
            if not row:
                continue
            if len(row) != 2:
                raise DprSetError(f"{spec.member} {where}: {len(row)} cells, expected 2")
            rows.append((where, _unquote(row[0]), _answer_list(spec, where, row[1])))
    except csv.Error as exc:
        raise DprSetError(f"{spec.member}: not tab-separated text ({exc})") from exc
    return rows


def _error(spec: DprSet, where: str, problem: str) -> DprSetError:
    return DprSetError(f"{spec.member} {where}: {problem}")


def _answer_list(spec: DprSet, where: str, cell: str) -> list[str]:
    fail = functools.partial(_error, spec, where)
    try:
        value: Any = ast.literal_eval(cell)
    except (ValueError, SyntaxError) as exc:
        raise fail("answers are not a Python list") from exc
    return string_list(value, "answers", fail)


def _jsonl_rows(spec: DprSet, text: str) -> list[tuple[str, str, list[str]]]:
    rows: list[tuple[str, str, list[str]]] = []
    for where, record in json_lines(text, functools.partial(_error, spec)):
        fail = functools.partial(_error, spec, where)
        if not isinstance(record, dict) or not isinstance(record.get("question"), str):
            raise fail("no 'question' text")
        rows.append((where, record["question"], string_list(record.get("answer"), "answers", fail)))
    return rows


def _unquote(question: str) -> str:
    """Undo a second level of CSV quoting: ``"say ""hi"" now"`` becomes ``say "hi" now``.

    Only when the whole text is in quotes and every quote inside is doubled, so a question
    that merely starts and ends with a quotation is left as it is.
    """
    if len(question) >= 2 and question[0] == question[-1] == '"':
        inner = question[1:-1]
        if '"' not in inner.replace('""', ""):
            return inner.replace('""', '"')
    return question


# --- CuratedTREC patterns --------------------------------------------------------------------

_REGEX_SYNTAX = frozenset("^$*+?{}[]()")


def literal_answers(pattern: str) -> tuple[str, ...] | None:
    r"""The literal strings a CuratedTREC pattern stands for, or ``None`` when it is a real regex.

    A pattern counts as literal when, after dropping ``\b`` (a word boundary, which whole-token
    matching already demands) and unescaping escaped punctuation and non-ASCII letters
    (``\,``, ``P\étain``), it is only alternatives separated by ``|`` without other regex
    syntax. An unescaped ``.`` is read as a dot (``St. Louis``): the authors write it so.
    Patterns with groups, classes, repetition or other escapes (``20,?237\s*f(oo|ee)?t``,
    ``strawberr.*cream``) cannot be checked with the benchmark's whole-token answer match, so
    their questions are left out rather than guessed.
    """
    alternatives: list[list[str]] = [[]]
    position = 0
    while position < len(pattern):
        char = pattern[position]
        if char == "\\":
            escaped = pattern[position + 1 : position + 2]
            if escaped and not (escaped.isascii() and escaped.isalnum()):
                alternatives[-1].append(escaped)
            elif escaped != "b":
                return None
            position += 2
            continue
        if char in _REGEX_SYNTAX:
            return None
        if char == "|":
            alternatives.append([])
        else:
            alternatives[-1].append(char)
        position += 1
    answers = tuple(dict.fromkeys(a for a in ("".join(c).strip() for c in alternatives) if a))
    return answers or None


def _literal_lists(patterns: list[str]) -> list[str] | None:
    answers: list[str] = []
    for pattern in patterns:
        literal = literal_answers(pattern)
        if literal is None:
            return None
        answers.extend(literal)
    return answers
