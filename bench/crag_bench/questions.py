"""What the benchmark asks: FanOutQA leaf questions and PopQA-style question files.

Every question carries its gold answers and, where known, the store source of its gold
article (``"wikipedia:<Title>"``, as :mod:`crag.vectorstore.corpus` names sources).
"""

from __future__ import annotations

import csv
import functools
import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crag.vectorstore.sources import SOURCE_PREFIX
from crag_bench.answer_lists import Fail, distinct_nonblank, json_lines, string_list
from crag_bench.fanoutqa import leaf_questions

POPQA_SUFFIXES = (".jsonl", ".json", ".tsv", ".csv")
"""The question file formats :func:`read_popqa` reads."""


class QuestionFileError(ValueError):
    """A question file cannot be read; the message names the file, the place and the problem."""


@dataclass(frozen=True)
class EvalQuestion:
    """One benchmark question.

    Attributes:
        id: Unique id within its set.
        question: The question text.
        answers: Gold answers; matching any of them counts.
        gold_sources: Store sources of the gold documents (``"wikipedia:<Title>"``): the
            documents that hold the answer; empty when unknown.
    """

    id: str
    question: str
    answers: tuple[str, ...]
    gold_sources: tuple[str, ...] = ()

    @property
    def gold_source(self) -> str | None:
        """The first gold source, or ``None`` when none is known."""
        return self.gold_sources[0] if self.gold_sources else None


def gold_source(title: str | None) -> str | None:
    """The store source of a Wikipedia page title (``None`` for no title)."""
    title = (title or "").strip()
    return f"{SOURCE_PREFIX}{title}" if title else None


def _sources(title: str | None) -> tuple[str, ...]:
    source = gold_source(title)
    return (source,) if source else ()


def fanoutqa_questions(top_ids: Sequence[str], corpus_titles: set[str]) -> list[EvalQuestion]:
    """The leaf questions of FanOutQA top-level questions whose gold page is in the corpus.

    Leaves shared with other top-level questions are left out (see
    :func:`crag_bench.fanoutqa.leaf_questions`); a leaf met twice is kept once.

    Args:
        top_ids: FanOutQA dev top-level question ids, in the order wanted.
        corpus_titles: Titles of the corpus pages; leaves whose gold page is not one are dropped.

    Raises:
        ValueError: an id is not a FanOutQA dev question.
    """
    questions: list[EvalQuestion] = []
    seen: set[str] = set()
    for leaf in leaf_questions(top_ids):
        if leaf.id in seen or leaf.gold_title not in corpus_titles:
            continue
        seen.add(leaf.id)
        questions.append(
            EvalQuestion(leaf.id, leaf.question, (leaf.answer,), _sources(leaf.gold_title))
        )
    return questions


# --- PopQA files ----------------------------------------------------------------------------


def read_popqa(path: Path) -> list[EvalQuestion]:
    """Read PopQA-style questions from a ``.jsonl``, ``.json``, ``.tsv`` or ``.csv`` file.

    Each record has ``question`` and ``possible_answers`` (a list of strings, or such a list
    encoded as JSON text, as in PopQA's TSV), and optionally ``id`` (default: the record's
    1-based position), ``gold_sources`` (store sources of the gold documents, exactly as the
    store names them: ``"wikipedia:<Title>"`` for the bundled corpus; a list or JSON text
    like ``possible_answers``) and ``s_wiki_title`` (the subject's Wikipedia title, which
    gives the source ``"wikipedia:<Title>"``, added after ``gold_sources``).

    Raises:
        QuestionFileError: the file cannot be read, has an unknown extension, holds no
            questions, or a record is malformed (the message says where and why).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in POPQA_SUFFIXES:
        raise QuestionFileError(
            f"{path}: unknown question file type {suffix or '(none)'!r}; "
            f"use one of {', '.join(POPQA_SUFFIXES)}"
        )
    text = _read_text(path)
    questions: list[EvalQuestion] = []
    ids: set[str] = set()
    for number, (where, record) in enumerate(_records(path, suffix, text), start=1):
        question = _question(path, where, record, number)
        if question.id in ids:
            raise QuestionFileError(f"{path} {where}: duplicate id {question.id!r}")
        ids.add(question.id)
        questions.append(question)
    if not questions:
        raise QuestionFileError(f"no questions in {path}")
    return questions


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise QuestionFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise QuestionFileError(f"cannot read {path}: not UTF-8 text ({exc.reason})") from exc


def _records(path: Path, suffix: str, text: str) -> Iterator[tuple[str, Any]]:
    """``(place, record)`` pairs: ``"line N"``, ``"item N"`` or ``"row N"`` and the raw record."""
    if suffix == ".jsonl":
        return json_lines(text, functools.partial(_error, path))
    if suffix == ".json":
        return _json_records(path, text)
    return _table_records(path, text, "\t" if suffix == ".tsv" else ",")


def _json_records(path: Path, text: str) -> Iterator[tuple[str, Any]]:
    if not text.strip():
        return
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise QuestionFileError(f"{path} line {exc.lineno}: invalid JSON ({exc.msg})") from exc
    if not isinstance(data, list):
        raise QuestionFileError(f"{path}: must hold a JSON list of question objects")
    for number, item in enumerate(data, start=1):
        yield f"item {number}", item


def _table_records(path: Path, text: str, delimiter: str) -> Iterator[tuple[str, Any]]:
    """Rows after the header row, numbered from 1; cells missing from a short row are absent."""
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    number = 0
    try:
        for number, row in enumerate(reader, start=1):
            yield f"row {number}", {k: v for k, v in row.items() if v is not None}
    except csv.Error as exc:
        raise QuestionFileError(
            f"{path} row {number + 1}: not valid {delimiter!r}-separated text ({exc})"
        ) from exc


def _error(path: Path, where: str, problem: str) -> QuestionFileError:
    return QuestionFileError(f"{path} {where}: {problem}")


def _question(path: Path, where: str, record: Any, number: int) -> EvalQuestion:
    """Check one record and turn it into a question."""
    fail = functools.partial(_error, path, where)
    if not isinstance(record, dict):
        raise fail("not an object with 'question' and 'possible_answers'")
    question = record.get("question")
    if question is None:
        raise fail("missing 'question'")
    if not isinstance(question, str):
        raise fail("'question' must be text")
    if not question.strip():
        raise fail("empty 'question'")
    answers = _answers(record.get("possible_answers"), fail)
    raw_id = record.get("id")
    qid = str(raw_id).strip() if isinstance(raw_id, str | int) else ""
    title = record.get("s_wiki_title")
    sources = _gold_sources(record.get("gold_sources"), fail)
    sources += _sources(title if isinstance(title, str) else None)
    return EvalQuestion(
        id=qid or str(number),
        question=" ".join(question.split()),
        answers=answers,
        gold_sources=tuple(dict.fromkeys(sources)),
    )


def _string_list(value: Any, field: str, fail: Fail) -> list[str]:
    """A list of strings, given as such or as JSON text (a TSV or CSV cell)."""
    if isinstance(value, str):
        if not value.strip():
            raise fail(f"empty {field!r}")
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise fail(f"{field!r} is not a JSON list ({exc.msg})") from exc
    return string_list(value, repr(field), fail)


def _gold_sources(value: Any, fail: Fail) -> tuple[str, ...]:
    """``gold_sources`` as a tuple of distinct non-empty sources (none when absent or empty)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return ()
    sources = _string_list(value, "gold_sources", fail)
    return distinct_nonblank(sources)


def _answers(value: Any, fail: Fail) -> tuple[str, ...]:
    """``possible_answers`` as a tuple of distinct non-empty strings."""
    if value is None:
        raise fail("missing 'possible_answers'")
    value = _string_list(value, "possible_answers", fail)
    answers = distinct_nonblank(value)
    if not answers:
        raise fail("empty 'possible_answers'")
    return answers
