"""Open-domain QA questions the bundled corpus can answer, with their gold documents.

The DPR question sets (:mod:`crag_bench.dpr_sets`) were written for the whole of Wikipedia; the
corpus here holds only 10,033 lead summaries, so most of their answers are nowhere in it and a
benchmark on all of them would measure nothing. A question is kept when:

1. **a gold answer is in the corpus**: some answer occurs, as whole tokens after the benchmark's
   own normalisation (:func:`crag_bench.answers.normalize_answer`, the check that scores the
   generated answers), in at least one summary (title and text);
2. **in few summaries**: all its answers together occur in at most ``K = 3`` summaries. Those
   summaries are the question's gold documents, so the degraded-retriever experiment, which
   hides the gold documents, takes every copy of the answer out of the store. Generic answers
   (a stop word, a single digit, a year, a country) occur in many summaries: they fail this
   rule, which is the only filter on answers; no answer is dropped from a kept question, since
   every one of them still counts as correct when generated. K = 3 keeps a third to a half
   of the questions whose answer is in the corpus; larger K mostly adds broader answers;
3. **a gold document is about the question**: at least one of them shares words with the
   question worth at least ``log(100)`` in summed inverse document frequency over the corpus
   (one word found in at most 1% of the summaries, or a few commoner ones), not counting
   question and function words or the answer's own words. An answer string alone is often a
   coincidence (a name that also occurs in an unrelated summary); this rule keeps the
   questions whose gold summary a retriever can find and a reader can answer from (30-45%
   of those that pass rules 1 and 2; counts per set in ``bench/crag_bench/data/open_domain``).

Gold sources are ordered by that word overlap, largest first (ties by source), so the first
one is the summary most about the question.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crag_bench.answers import normalize_answer
from crag_bench.dpr_sets import DPR_SETS, DprSet, SourceQuestion, read_jar

logger = logging.getLogger(__name__)

MAX_GOLD_DOCUMENTS = 3
"""K: the most summaries a kept question's answers may occur in."""

MIN_SUPPORT = math.log(100)
"""Least summed IDF of the question words a gold document must share with the question."""

QUESTION_STOP_WORDS = frozenset(
    """a an the of in on at to for from by with and or not no is are was were be been being am
    do does did has have had will would can could should may might must shall who what when
    where which why how whom whose that this these those there here it its he she his her hers
    him they them their we our you your i me my name named called known""".split()
)
"""Words that say nothing about a question's topic (normalised form)."""


@dataclass(frozen=True)
class OpenDomainQuestion:
    """A kept question, as written to its set's JSONL file.

    Attributes:
        id: ``<set>-<position in the source set>``.
        question: The question text.
        answers: Every gold answer of the source set.
        gold_sources: Store sources of the summaries that hold an answer (1 to K).
    """

    id: str
    question: str
    answers: tuple[str, ...]
    gold_sources: tuple[str, ...]

    def record(self) -> dict[str, Any]:
        """The question in the PopQA format :func:`crag_bench.questions.read_popqa` reads."""
        return {
            "id": self.id,
            "question": self.question,
            "possible_answers": list(self.answers),
            "gold_sources": list(self.gold_sources),
        }


class AnswerIndex:
    """Which summaries hold a text as whole normalised tokens, and how rare each word is."""

    def __init__(self, documents: Iterable[tuple[str, str]]) -> None:
        """Index ``(source, text)`` pairs."""
        self.sources: list[str] = []
        self._padded: list[str] = []
        self._tokens: list[frozenset[str]] = []
        self._postings: dict[str, set[int]] = {}
        for number, (source, text) in enumerate(documents):
            normalised = normalize_answer(text)
            tokens = frozenset(normalised.split())
            self.sources.append(source)
            self._padded.append(f" {normalised} ")
            self._tokens.append(tokens)
            for token in tokens:
                self._postings.setdefault(token, set()).add(number)
        self._found: dict[str, frozenset[int]] = {}

    def __len__(self) -> int:
        return len(self.sources)

    def documents_with(self, answer: str) -> frozenset[int]:
        """Numbers of the documents that hold ``answer`` as whole tokens (none for an empty one)."""
        needle = normalize_answer(answer)
        if needle not in self._found:
            self._found[needle] = self._search(needle)
        return self._found[needle]

    def _search(self, needle: str) -> frozenset[int]:
        tokens = needle.split()
        if not tokens:
            return frozenset()
        postings = sorted((self._postings.get(t, set()) for t in tokens), key=len)
        candidates = set.intersection(*postings)
        return frozenset(n for n in candidates if f" {needle} " in self._padded[n])

    def idf(self, token: str) -> float:
        """``log(N / df)`` of a normalised token (0 for a token in no document)."""
        found = len(self._postings.get(token, ()))
        return math.log(len(self.sources) / found) if found else 0.0

    def support(self, words: frozenset[str], document: int) -> float:
        """Summed IDF of the ``words`` that ``document`` holds."""
        return sum(self.idf(t) for t in words & self._tokens[document])


def topic_words(question: str, answers: Sequence[str]) -> frozenset[str]:
    """The question's normalised words, less stop words and the answers' words."""
    answer_words = {t for a in answers for t in normalize_answer(a).split()}
    return frozenset(
        t
        for t in normalize_answer(question).split()
        if t not in QUESTION_STOP_WORDS and t not in answer_words
    )


def answerable(
    name: str,
    questions: Iterable[SourceQuestion],
    index: AnswerIndex,
    max_gold: int = MAX_GOLD_DOCUMENTS,
    min_support: float = MIN_SUPPORT,
) -> list[OpenDomainQuestion]:
    """The questions that pass the module's three rules, in their source order.

    Args:
        name: The set's name, the prefix of every id.
        questions: The set's questions.
        index: The corpus.
        max_gold: K, the most summaries the answers may occur in.
        min_support: Least summed IDF of shared question words for a gold summary.
    """
    if max_gold < 1:
        raise ValueError(f"max_gold must be at least 1, not {max_gold}")
    kept: list[OpenDomainQuestion] = []
    for question in questions:
        documents: set[int] = set()
        for answer in question.answers:
            documents |= index.documents_with(answer)
            if len(documents) > max_gold:
                break
        if not 1 <= len(documents) <= max_gold:
            continue
        words = topic_words(question.question, question.answers)
        support = {n: index.support(words, n) for n in documents}
        if max(support.values()) < min_support:
            continue
        ordered = sorted(documents, key=lambda n: (-support[n], index.sources[n]))
        kept.append(
            OpenDomainQuestion(
                id=f"{name}-{question.position}",
                question=question.question,
                answers=question.answers,
                gold_sources=tuple(index.sources[n] for n in ordered),
            )
        )
    return kept


def write_set(path: Path, questions: Sequence[OpenDomainQuestion]) -> None:
    """Write questions as JSON lines (UTF-8, one record a line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = (json.dumps(q.record(), ensure_ascii=False) + "\n" for q in questions)
    path.write_text("".join(lines), encoding="utf-8")


def build_sets(
    jar: Path,
    documents: Iterable[tuple[str, str]],
    out: Path,
    sets: tuple[DprSet, ...] = DPR_SETS,
    max_gold: int = MAX_GOLD_DOCUMENTS,
) -> dict[str, tuple[int, int]]:
    """Write ``out/<set>.jsonl`` for each set: its questions the corpus can answer.

    Args:
        jar: The Anserini jar holding the DPR sets.
        documents: The corpus as ``(source, text)`` pairs.
        out: The output folder.
        sets: The sets to build.
        max_gold: K, the most summaries a question's answers may occur in.

    Returns:
        Each set's name and ``(questions read, questions kept)``.

    Raises:
        DprSetError: the jar or a set cannot be read.
    """
    index = AnswerIndex(documents)
    counts: dict[str, tuple[int, int]] = {}
    for name, questions in read_jar(jar, sets).items():
        kept = answerable(name, questions, index, max_gold)
        write_set(out / f"{name}.jsonl", kept)
        counts[name] = (len(questions), len(kept))
        logger.info("%s: %d of %d questions kept", name, len(kept), len(questions))
    return counts
