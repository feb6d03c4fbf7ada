"""Fitting the action trigger's thresholds on made-up scores, and the answer matching it uses."""

from __future__ import annotations

import pytest

from crag.knowledge.answer_match import holds_answer, normalize_text
from crag.knowledge.threshold_fit import (
    ActionShare,
    Observation,
    candidate_thresholds,
    fit_lower,
    fit_thresholds,
    fit_upper,
    pair_outcome,
)


def observations(*pairs: tuple[float | None, bool]) -> list[Observation]:
    return [Observation(score, held) for score, held in pairs]


# Eleven questions: nothing retrieved for one; answers held at -0.5, 0.1, 0.5, 0.7 and 0.9.
SPREAD = observations(
    (None, False),
    (-0.9, False),
    (-0.7, False),
    (-0.5, True),
    (-0.3, False),
    (-0.1, False),
    (0.1, True),
    (0.3, False),
    (0.5, True),
    (0.7, True),
    (0.9, True),
)


def test_candidates_are_the_midpoints_between_distinct_scores() -> None:
    given = observations((0.3, True), (None, False), (-0.2, False), (0.3, False), (0.1, True))
    assert candidate_thresholds(given) == [-0.05, 0.2]
    # midpoints of four-decimal scores print as written
    assert candidate_thresholds(observations((0.1234, True), (0.1235, False))) == [0.12345]


def test_upper_is_the_lowest_candidate_reaching_the_precision() -> None:
    # above 0.0: 0.1 0.3 0.5 0.7 0.9, four holding an answer: exactly 0.8
    assert fit_upper(SPREAD, 0.8) == 0.0
    # above 0.4: all three hold one
    assert fit_upper(SPREAD, 0.9) == 0.4
    assert fit_upper(SPREAD, 0.5) == -0.8  # above -0.8: 5 of 9 hold one


def test_lower_is_the_highest_candidate_within_the_miss_and_the_ceiling() -> None:
    # below -0.6: nothing retrieved, -0.9, -0.7: none holds an answer
    assert fit_lower(SPREAD, 0.1, ceiling=0.0) == -0.6
    # below 0.0: one of six (-0.5) holds one
    assert fit_lower(SPREAD, 0.2, ceiling=0.5) == 0.0
    # below -0.2: one of five, exactly 0.2; -0.4 would give one of four
    assert fit_lower(SPREAD, 0.2, ceiling=-0.2) == -0.2
    assert fit_lower(SPREAD, 0.2, ceiling=-0.3) == -0.6
    # no candidate at or under the ceiling
    assert fit_lower(SPREAD, 0.1, ceiling=-0.85) is None


def test_fit_thresholds_fits_both() -> None:
    fit = fit_thresholds(SPREAD, correct_precision=0.8, incorrect_miss=0.1, current=(0.1, -0.9))
    assert (fit.upper, fit.lower, fit.upper_fitted, fit.lower_fitted) == (0.0, -0.6, True, True)


def test_targets_not_met_fall_back_to_the_current_thresholds() -> None:
    nowhere = observations((-0.5, False), (0.2, False), (0.6, False))
    fit = fit_thresholds(nowhere, correct_precision=0.8, incorrect_miss=0.1, current=(0.7, -0.9))
    assert (fit.upper, fit.upper_fitted) == (0.7, False)
    # the lower one is still fitted, under the current upper one
    assert (fit.lower, fit.lower_fitted) == (0.4, True)

    everywhere = observations((-0.9, True), (-0.5, True), (0.5, True))
    fit = fit_thresholds(everywhere, correct_precision=0.8, incorrect_miss=0.1, current=(0.1, -0.9))
    assert (fit.upper, fit.upper_fitted) == (-0.7, True)
    assert (fit.lower, fit.lower_fitted) == (-0.9, False)


def test_a_current_lower_above_the_fitted_upper_is_capped_at_it() -> None:
    everywhere = observations((-0.9, True), (-0.5, True), (0.5, True))
    fit = fit_thresholds(everywhere, correct_precision=0.8, incorrect_miss=0.1, current=(0.1, -0.2))
    assert (fit.upper, fit.lower, fit.lower_fitted) == (-0.7, -0.7, False)


def test_one_distinct_score_gives_no_candidate() -> None:
    same = observations((0.4, True), (0.4, False), (None, False))
    assert candidate_thresholds(same) == []
    fit = fit_thresholds(same, correct_precision=0.5, incorrect_miss=0.5, current=(0.1, -0.9))
    assert (fit.upper, fit.lower, fit.upper_fitted, fit.lower_fitted) == (0.1, -0.9, False, False)


def test_ties_are_never_split() -> None:
    tied = observations((0.5, True), (0.5, False), (0.2, False), (0.2, False))
    # one candidate, 0.35; splitting the two 0.5s would reach 0.8, but they score the same
    assert fit_upper(tied, 0.8) is None
    assert fit_upper(tied, 0.5) == 0.35
    assert fit_lower(tied, 0.0, ceiling=1.0) == 0.35


def test_pair_outcome_follows_the_action_trigger() -> None:
    outcome = pair_outcome(SPREAD, 0.0, -0.6)
    assert outcome.total == 11
    assert outcome.actions == {
        "correct": ActionShare(questions=5, holding_answer=4),
        "ambiguous": ActionShare(questions=3, holding_answer=1),
        "incorrect": ActionShare(questions=3, holding_answer=0),
    }
    assert outcome.answers_discarded == 0
    assert outcome.web_skipped_without_answer == 1  # 0.3


def test_a_score_on_a_threshold_is_ambiguous() -> None:
    outcome = pair_outcome(observations((0.3, True), (-0.3, True)), 0.3, -0.3)
    assert outcome.actions["ambiguous"].questions == 2
    costly = pair_outcome(observations((-0.5, True), (0.5, False)), 0.3, -0.3)
    assert (costly.answers_discarded, costly.web_skipped_without_answer) == (1, 1)


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("Newton's laws", "newton s laws"),
        ("1,234 people in 3.5 hours", "1234 people in 35 hours"),
        ("Leonardo da Vinci (1452\u20131519)", "leonardo da vinci 1452 1519"),
        ("An apple a day", "apple day"),
    ],
)
def test_normalize_text(text: str, normalised: str) -> None:
    assert normalize_text(text) == normalised


def test_holds_answer_matches_whole_words_in_any_passage() -> None:
    passages = ["Born in 1945 in Parisian circles.", "The Mona Lisa, by Leonardo da Vinci."]
    assert holds_answer(["leonardo DA vinci"], passages)
    assert holds_answer(["Nobody", "the Mona Lisa"], passages)
    assert not holds_answer(["4"], passages)
    assert not holds_answer(["Paris"], passages)
    assert not holds_answer(["The", "..."], passages)  # normalises to nothing
    assert not holds_answer(["Leonardo"], [])
