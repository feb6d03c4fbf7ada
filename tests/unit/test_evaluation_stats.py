"""crag's evaluation statistics (crag.knowledge.evaluation_stats), shared with crag-bench."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from scipy.stats import binomtest

import crag_bench.per_set
import crag_bench.runner
import crag_bench.significance
from crag.knowledge import evaluation_stats
from crag.knowledge.evaluation_stats import by_action, mcnemar_exact, spread, wilson_interval


@pytest.mark.parametrize(("successes", "trials"), [(0, 1), (2, 4), (3, 4), (7, 7), (40, 97)])
def test_wilson_interval_is_scipys(successes: int, trials: int) -> None:
    expected = binomtest(successes, trials).proportion_ci(0.95, method="wilson")
    low, high = wilson_interval(successes, trials) or (None, None)
    assert low == pytest.approx(expected.low, abs=1e-12)
    assert high == pytest.approx(expected.high, abs=1e-12)


def test_wilson_interval_without_trials_and_refusals() -> None:
    assert wilson_interval(0, 0) is None
    with pytest.raises(ValueError, match="3 successes of 2 trials"):
        wilson_interval(3, 2)
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(1, 2, confidence=1.0)


def test_spread_median_and_p95() -> None:
    assert spread([]) == {"median": None, "p95": None, "n": 0}
    assert spread([2.0]) == {"median": 2.0, "p95": 2.0, "n": 1}
    figures = spread([float(v) for v in range(1, 21)])
    assert figures["median"] == 10.5 and figures["p95"] == pytest.approx(19.05)


def _rates(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {"questions": len(rows), "right": sum(r["correct"] for r in rows)}


def test_by_action_pairs_the_baselines_rows_of_the_same_questions() -> None:
    crag: list[dict[str, Any]] = [
        {"id": "1", "action": "correct", "correct": True},
        {"id": "2", "action": "correct", "correct": False},
        {"id": "3", "action": "incorrect", "correct": True},
        {"id": "4", "action": None, "correct": True},  # no action: left out
    ]
    rag = {"1": {"correct": False}, "2": {"correct": False}}  # nothing for question 3
    split = by_action(crag, rag, _rates)
    assert split["correct"] == {
        "questions": 2,
        "share": 2 / 3,
        "crag": {"questions": 2, "right": 1},
        "rag": {"questions": 2, "right": 0},
    }
    assert split["incorrect"]["crag"] == {"questions": 1, "right": 1}
    assert split["incorrect"]["rag"] is None  # the baseline lacks one of its questions
    assert split["ambiguous"] == {"questions": 0, "share": 0.0, "crag": None, "rag": None}
    assert by_action([], {}, _rates)["correct"]["share"] is None


def test_crag_bench_uses_crags_statistics_not_a_copy() -> None:
    for name in (
        "mcnemar_exact",
        "paired_bootstrap",
        "paired_rate",
        "compare_outcomes",
        "format_p",
        "PairedRate",
        "MEASURES",
        "RESAMPLES",
    ):
        assert getattr(crag_bench.significance, name) is getattr(evaluation_stats, name), name
    assert vars(crag_bench.per_set)["split_by_action"] is evaluation_stats.by_action
    assert vars(crag_bench.runner)["spread"] is evaluation_stats.spread


def test_mcnemar_exact_is_scipys_two_sided_binomial_test() -> None:
    """The docstring's claim: the same p-value as scipy, which crag does not depend on."""
    from scipy.stats import binomtest

    for a_only in range(25):
        for b_only in range(25):
            if a_only + b_only:
                expected = binomtest(min(a_only, b_only), a_only + b_only, 0.5).pvalue
                assert abs(mcnemar_exact(a_only, b_only) - expected) < 1e-12, (a_only, b_only)
