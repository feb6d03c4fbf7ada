"""Paired statistics of crag-bench eval: McNemar's exact test and the paired bootstrap."""

from math import comb

import pytest
from scipy.stats import binomtest

from crag_bench.significance import (
    PairedRate,
    compare_outcomes,
    mcnemar_exact,
    paired_bootstrap,
    paired_rate,
)


@pytest.mark.parametrize(
    ("a_only", "b_only"),
    [(0, 1), (1, 0), (2, 3), (5, 0), (0, 6), (7, 2), (10, 10), (3, 17), (25, 9), (60, 40)],
)
def test_mcnemar_matches_an_exact_binomial_test(a_only: int, b_only: int) -> None:
    expected = binomtest(a_only, a_only + b_only, 0.5, alternative="two-sided").pvalue
    assert mcnemar_exact(a_only, b_only) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_small_tables_by_hand() -> None:
    # 5 discordant pairs, all one way: 2 * (1/2)^5.
    assert mcnemar_exact(5, 0) == pytest.approx(2 / 32)
    # 6 against 1: 2 * (C(7,0) + C(7,1)) / 2^7 = 16 / 128.
    assert mcnemar_exact(6, 1) == pytest.approx(16 / 128)
    # Even split: the doubled tail passes 1 and is capped.
    assert mcnemar_exact(4, 4) == 1.0
    # No discordant pairs: nothing to tell the two apart.
    assert mcnemar_exact(0, 0) == 1.0


def test_mcnemar_large_counts_stay_exact() -> None:
    p_value = mcnemar_exact(1200, 1000)
    tail = sum(comb(2200, i) for i in range(1001))
    assert p_value == pytest.approx(2 * tail / 2**2200, rel=1e-12)
    assert 0 < p_value < 0.001
    assert mcnemar_exact(5000, 0) == 0.0  # far below the smallest float: underflows, no error


def test_mcnemar_rejects_negative_counts() -> None:
    with pytest.raises(ValueError, match="discordant counts"):
        mcnemar_exact(-1, 2)


def test_bootstrap_interval_holds_the_difference_and_is_seeded() -> None:
    a = [1.0] * 30 + [0.0] * 10 + [1.0] * 5 + [0.0] * 55
    b = [1.0] * 30 + [1.0] * 10 + [0.0] * 5 + [0.0] * 55
    difference, low, high = paired_bootstrap(a, b, seed=3)
    assert difference == pytest.approx(-0.05)
    assert low < difference < high
    assert low > -0.2 and high < 0.1
    assert paired_bootstrap(a, b, seed=3) == (difference, low, high)
    # 0/1 outcomes put the interval's ends on a grid; scores show the seed at work.
    scores_a = [((i * 37) % 101) / 101 for i in range(60)]
    scores_b = [((i * 53) % 97) / 97 for i in range(60)]
    first = paired_bootstrap(scores_a, scores_b, seed=3)
    assert paired_bootstrap(scores_a, scores_b, seed=3) == first
    assert paired_bootstrap(scores_a, scores_b, seed=4) != first


def test_bootstrap_interval_covers_a_known_difference() -> None:
    # 100 questions: A alone right on 20, B alone right on 5: true difference 0.15,
    # standard error about sqrt((0.20 + 0.05 - 0.15^2) / 100) = 0.048.
    a = [True] * 20 + [False] * 5 + [True] * 25 + [False] * 50
    b = [False] * 20 + [True] * 5 + [True] * 25 + [False] * 50
    difference, low, high = paired_bootstrap([float(x) for x in a], [float(x) for x in b])
    assert difference == pytest.approx(0.15)
    assert low == pytest.approx(0.15 - 1.96 * 0.048, abs=0.02)
    assert high == pytest.approx(0.15 + 1.96 * 0.048, abs=0.02)


def test_bootstrap_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        paired_bootstrap([1.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="no paired outcomes"):
        paired_bootstrap([], [])
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap([1.0], [0.0], confidence=1.5)


def test_identical_systems_differ_by_nothing() -> None:
    outcomes = [True, False, True, True, False]
    rate = paired_rate(outcomes, outcomes)
    assert (rate.difference, rate.low, rate.high) == (0.0, 0.0, 0.0)
    assert rate.p_value == 1.0
    assert rate.verdict == "not significant"


def test_a_clear_win_is_significant() -> None:
    a = [True] * 40 + [False] * 60
    b = [False] * 40 + [False] * 60
    rate = paired_rate(a, b)
    assert (rate.a, rate.b, rate.a_only, rate.b_only) == (0.4, 0.0, 40, 0)
    assert rate.p_value < 1e-10
    assert rate.low > 0
    assert rate.verdict == "better"
    assert paired_rate(b, a).verdict == "worse"


def test_verdict_needs_both_interval_and_p() -> None:
    def rate(low: float, high: float, p_value: float, difference: float = 0.1) -> PairedRate:
        return PairedRate(0.5, 0.4, difference, low, high, 5, 0, p_value)

    assert rate(0.02, 0.2, 0.01).verdict == "better"
    assert rate(-0.2, -0.02, 0.01, -0.1).verdict == "worse"
    assert rate(0.02, 0.2, 0.0625).verdict == "not significant"  # interval clear, p not
    assert rate(-0.01, 0.2, 0.01).verdict == "not significant"  # p clear, interval holds 0
    assert rate(0.0, 0.2, 0.01).verdict == "not significant"


def test_compare_outcomes_pairs_by_question() -> None:
    a = {
        "q1": {"accuracy": True, "knowledge_recall": True},
        "q2": {"accuracy": True, "knowledge_recall": True},
        "q3": {"accuracy": False, "knowledge_recall": True},
    }
    b = {
        "q3": {"accuracy": False, "knowledge_recall": False},
        "q2": {"accuracy": False, "knowledge_recall": True},
        "q9": {"accuracy": True, "knowledge_recall": True},
    }
    figures = compare_outcomes(a, b, ("accuracy", "knowledge_recall"), seed=1)
    assert figures is not None
    assert figures["questions"] == 2  # q2 and q3: the questions both ran
    assert figures["accuracy"]["difference"] == pytest.approx(0.5)
    assert (figures["accuracy"]["a_only"], figures["accuracy"]["b_only"]) == (1, 0)
    assert figures["accuracy"]["p_value"] == 1.0
    assert figures["accuracy"]["verdict"] == "not significant"
    assert figures["accuracy"]["significant"] is False
    assert figures["knowledge_recall"]["difference"] == pytest.approx(0.5)
    assert compare_outcomes(a, {"other": a["q1"]}, ("accuracy",)) is None
