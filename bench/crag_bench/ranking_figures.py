"""How well an evaluator ranks each question's passages and strips, on mined pairs.

The figures are computed from the pairs of :mod:`crag_bench.pair_mining` and their scores.

Per question, over its retrieved top-k (pairs added from outside the top-k are left out, as
the graph never sees them):

* **pair AUC**: ROC AUC of the passage scores against "the passage is from a gold document",
  over all passages of all questions;
* **best passage gold**: of the questions with a gold passage in the top-k, the share whose
  best-scored passage is from a gold document;
* **strip recall@5**: of all questions, the share where one of the five best-scored strips (of
  all the top-k passages' strips) holds a gold answer in its body: what the paper's "keep the
  top 5 strips" can hand the generator. ``strip ceiling`` is the share where any strip does.

"Gold document" follows the pairs: for the bundled dev questions (the ``measure`` split) it is
the set's ``gold_sources`` (:func:`gold_documents`), as in the benchmark; for other questions,
the mined label.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from crag_bench.datasets import load_dataset
from crag_bench.evaluator_metrics import roc_auc
from crag_bench.pair_mining import MINING_SETS, MinedPair

KEPT_STRIPS = 5


@dataclass(frozen=True)
class RankingFigures:
    """The figures of one evaluator on one set of questions."""

    questions: int
    pair_auc: float | None
    best_passage_gold: float
    questions_with_gold: int
    strip_recall_at_5: float
    strip_ceiling: float


def gold_documents(sets: Sequence[str] = MINING_SETS) -> dict[str, frozenset[str]]:
    """The bundled dev sets' gold sources by question id."""
    return {q.id: frozenset(q.gold_sources) for name in sets for q in load_dataset(name)}


def _by_question(pairs: Sequence[MinedPair]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = defaultdict(list)
    for i, pair in enumerate(pairs):
        if pair.rank is not None:
            grouped[pair.question_id].append(i)
    return grouped


def ranking_figures(
    pairs: Sequence[MinedPair],
    scores: Sequence[float],
    gold: Mapping[str, frozenset[str]] | None = None,
) -> RankingFigures:
    """The figures of ``scores`` (one per pair, in order) on ``pairs``.

    Args:
        pairs: Mined passage and strip pairs of some questions.
        scores: The evaluator's score of each pair.
        gold: Gold sources by question id; a question not in it uses the pairs' labels.
    """
    gold = gold or {}

    def is_gold(pair: MinedPair) -> bool:
        sources = gold.get(pair.question_id)
        return pair.source in sources if sources is not None else pair.label == 1

    labels: list[int] = []
    flat: list[float] = []
    best_hits = with_gold = strip_hits = strip_possible = 0
    grouped = _by_question(pairs)
    for indices in grouped.values():
        passages = [i for i in indices if pairs[i].unit == "passage"]
        strips = [i for i in indices if pairs[i].unit == "strip"]
        marks = [is_gold(pairs[i]) for i in passages]
        labels += [int(m) for m in marks]
        flat += [scores[i] for i in passages]
        if any(marks):
            with_gold += 1
            best = max(range(len(passages)), key=lambda j: scores[passages[j]])
            best_hits += marks[best]
        ranked = sorted(strips, key=lambda i: -scores[i])[:KEPT_STRIPS]
        strip_hits += any(pairs[i].holds_answer for i in ranked)
        strip_possible += any(pairs[i].holds_answer for i in strips)
    count = len(grouped)
    return RankingFigures(
        questions=count,
        pair_auc=roc_auc(flat, labels),
        best_passage_gold=best_hits / with_gold if with_gold else 0.0,
        questions_with_gold=with_gold,
        strip_recall_at_5=strip_hits / count if count else 0.0,
        strip_ceiling=strip_possible / count if count else 0.0,
    )


def retriever_scores(pairs: Sequence[MinedPair]) -> list[float]:
    """Scores that rank by retrieval order: a passage's rank, its strips in passage order."""
    return [-(pair.rank if pair.rank is not None else 10**6) for pair in pairs]


def score_mined(
    score: Callable[[str, list[str]], list[float]], pairs: Sequence[MinedPair]
) -> list[float]:
    """Score every pair, one call per question (as the graph does), in the pairs' order."""
    out = [0.0] * len(pairs)
    grouped: dict[str, list[int]] = defaultdict(list)
    for i, pair in enumerate(pairs):
        grouped[pair.question_id].append(i)
    for indices in grouped.values():
        values = score(pairs[indices[0]].question, [pairs[i].passage for i in indices])
        for i, value in zip(indices, values, strict=True):
            out[i] = value
    return out


@dataclass(frozen=True)
class ThresholdMeaning:
    """What a pair of action thresholds means on some questions (their best passage score)."""

    upper: float
    lower: float
    correct: int
    """Questions whose best passage scores above ``upper``."""
    correct_with_gold: int
    """Of those, questions with a gold passage in the top-k."""
    incorrect: int
    """Questions whose every passage scores below ``lower``."""
    incorrect_without_gold: int
    """Of those, questions with no gold passage in the top-k."""
    questions: int

    @property
    def correct_precision(self) -> float | None:
        """P(gold in the top-k | Correct)."""
        return self.correct_with_gold / self.correct if self.correct else None

    @property
    def incorrect_precision(self) -> float | None:
        """P(no gold in the top-k | Incorrect)."""
        return self.incorrect_without_gold / self.incorrect if self.incorrect else None


def best_passages(
    pairs: Sequence[MinedPair],
    scores: Sequence[float],
    gold: Mapping[str, frozenset[str]] | None = None,
) -> list[tuple[float, bool]]:
    """Per question: its best passage score and whether a gold passage is in its top-k."""
    gold = gold or {}
    out: list[tuple[float, bool]] = []
    for indices in _by_question(pairs).values():
        passages = [i for i in indices if pairs[i].unit == "passage"]
        if not passages:
            continue
        qid = pairs[passages[0]].question_id
        sources = gold.get(qid)
        has_gold = any(
            (pairs[i].source in sources) if sources is not None else pairs[i].label == 1
            for i in passages
        )
        out.append((max(scores[i] for i in passages), has_gold))
    return out


def threshold_meaning(
    best: Sequence[tuple[float, bool]], upper: float, lower: float
) -> ThresholdMeaning:
    """How the trigger with ``upper`` and ``lower`` splits the questions, against gold."""
    correct = [has for score, has in best if score > upper]
    incorrect = [has for score, has in best if score < lower]
    return ThresholdMeaning(
        upper=upper,
        lower=lower,
        correct=len(correct),
        correct_with_gold=sum(correct),
        incorrect=len(incorrect),
        incorrect_without_gold=sum(1 for has in incorrect if not has),
        questions=len(best),
    )
