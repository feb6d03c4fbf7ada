"""The scoring every backend shares (crag.evaluator.base.BatchedEvaluator), on a toy backend."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

import pytest

from crag.core.cancellation import RunCancelledError, cancellation_scope
from crag.evaluator.base import BatchedEvaluator, BatchScorer, EvaluatorError, RetrievalEvaluator


class TableEvaluator(BatchedEvaluator):
    """Scores each passage from a table; records its batches; sizes are passage lengths."""

    name = "table"

    def __init__(self, table: dict[str, float], batch_size: int = 2, ordered: bool = True):
        self.table = table
        self.batch_size = batch_size
        self.ordered = ordered
        self.batches: list[list[int]] = []
        self.on_batch: Callable[[], None] = lambda: None

    def _batch_scorer(
        self, question: str, passages: Sequence[str], indices: list[int]
    ) -> BatchScorer:
        def score(batch: list[int]) -> list[float]:
            self.batches.append(batch)
            self.on_batch()
            return [self.table[passages[i]] for i in batch]

        sizes = [len(passages[i]) for i in indices] if self.ordered else None
        return BatchScorer(score, sizes=sizes)


def test_empty_passages_clipping_and_nan() -> None:
    evaluator = TableEvaluator({"a": 2.0, "ccc": math.nan, "bb": -0.5, "dddd": -3.0})
    assert isinstance(evaluator, RetrievalEvaluator)
    scores = evaluator.score("q", ["a", "", "ccc", "  ", "bb", "dddd"])
    assert scores == [1.0, -1.0, -1.0, -1.0, -0.5, -1.0]
    assert evaluator.batches == [[5, 2], [4, 0]]  # longest first, empty passages never scored
    assert evaluator.score("q", []) == [] and evaluator.score("q", [" "]) == [-1.0]
    assert len(evaluator.batches) == 2


def test_nan_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="crag.evaluator.base"):
        TableEvaluator({"x": math.nan}).score("q", ["", "x"])
    assert "table evaluator: NaN score for passage 1; using -1" in caplog.text


def test_without_sizes_batches_keep_the_order_given() -> None:
    evaluator = TableEvaluator({"a": 0.1, "bbb": 0.2, "cc": 0.3}, batch_size=1, ordered=False)
    assert evaluator.score("q", ["a", "bbb", "cc"]) == [0.1, 0.2, 0.3]
    assert evaluator.batches == [[0], [1], [2]]


def test_a_lone_string_and_a_wrong_count_are_errors() -> None:
    evaluator = TableEvaluator({"a": 0.5})
    with pytest.raises(EvaluatorError, match="sequence of strings"):
        evaluator.score("q", "a")

    class Short(TableEvaluator):
        def _batch_scorer(
            self, question: str, passages: Sequence[str], indices: list[int]
        ) -> BatchScorer:
            return BatchScorer(lambda batch: [0.0])

    with pytest.raises(EvaluatorError, match="gave 1 scores for 2 passages"):
        Short({}).score("q", ["a", "b"])


def test_a_cancelled_run_stops_before_the_next_batch() -> None:
    evaluator = TableEvaluator({"a": 0.1, "b": 0.2, "c": 0.3}, batch_size=1)
    with cancellation_scope() as token:
        evaluator.on_batch = token.cancel
        with pytest.raises(RunCancelledError):
            evaluator.score("q", ["a", "b", "c"])
    assert len(evaluator.batches) == 1
