"""Attribution of an answer to its numbered knowledge: the model's markers, else overlap."""

from __future__ import annotations

from crag.knowledge.attribution import (
    attribute,
    cited_numbers,
    overlap_citations,
    strip_markers,
)

QUESTION = "Who painted the Mona Lisa?"
TEXTS = [
    "Mona Lisa\nThe Mona Lisa is held at the Louvre in Paris.",
    "Mona Lisa\nThe Mona Lisa was painted by Leonardo da Vinci.",
    "Photosynthesis\nPlants convert light energy into chemical energy.",
]


def test_the_models_valid_numbers_are_kept_in_order_once() -> None:
    assert cited_numbers("Leonardo [2], in Paris [1][2].", 3) == [2, 1]
    assert cited_numbers("Leonardo [3, 1] and [2;3].", 3) == [3, 1, 2]
    result = attribute("Leonardo da Vinci painted it [2].", TEXTS, QUESTION)
    assert result.answer == "Leonardo da Vinci painted it."
    assert (result.citations, result.method) == ([2], "model")


def test_out_of_range_numbers_are_dropped() -> None:
    assert cited_numbers("It is [0] or [4] or [2, 9].", 3) == [2]
    assert cited_numbers("Nothing here [7].", 3) == []
    # Every marker the model wrote was out of range: its text is cleaned, overlap decides.
    result = attribute("Leonardo da Vinci [7].", TEXTS, QUESTION)
    assert result.answer == "Leonardo da Vinci."
    assert (result.citations, result.method) == ([2], "overlap")


def test_a_year_in_brackets_is_not_a_marker() -> None:
    assert cited_numbers("Painted in [1503].", 3) == []
    assert strip_markers("Painted in [1503] [1].") == "Painted in [1503]."
    assert strip_markers("[1] Mona Lisa: Leonardo.") == "Mona Lisa: Leonardo."


def test_overlap_cites_the_entry_with_the_answers_own_words() -> None:
    # "Mona Lisa" and "painted" come from the question; "Leonardo" decides.
    assert overlap_citations("The Mona Lisa was painted by Leonardo.", TEXTS, QUESTION) == [2]
    assert overlap_citations("It is in the Louvre.", TEXTS, QUESTION) == [1]
    # Without words of its own, the words shared in all decide; a tie cites both.
    assert overlap_citations("The Mona Lisa.", TEXTS, QUESTION) == [1, 2]
    # Its own word is in no entry: unsupported, though it shares the question's words.
    assert overlap_citations("Raphael painted the Mona Lisa.", TEXTS, QUESTION) == []


def test_nothing_is_cited_when_nothing_overlaps() -> None:
    result = attribute("I do not know.", TEXTS, QUESTION)
    assert (result.answer, result.citations, result.method) == ("I do not know.", [], "none")
    assert overlap_citations("Leonardo.", [], QUESTION) == []
    assert overlap_citations("", TEXTS, QUESTION) == []
