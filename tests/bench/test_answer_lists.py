"""The parsing shared by the question-file readers."""

from __future__ import annotations

import pytest

from crag_bench.answer_lists import distinct_nonblank, json_lines, string_list


def test_json_lines_numbers_lines_and_skips_blank_ones() -> None:
    text = '{"a": 1}\n\n  \n["b"]\n'
    assert list(json_lines(text, lambda where, problem: ValueError(where))) == [
        ("line 1", {"a": 1}),
        ("line 4", ["b"]),
    ]


def test_json_lines_reports_the_line_through_fail() -> None:
    lines = json_lines(
        '{"a": 1}\n{oops\n', lambda where, problem: ValueError(f"{where}: {problem}")
    )
    with pytest.raises(ValueError, match=r"^line 2: invalid JSON \(Expecting property name"):
        list(lines)


def test_string_list_accepts_only_lists_of_strings() -> None:
    assert string_list(["a", "b"], "answers", ValueError) == ["a", "b"]
    for bad in ("a", ["a", 1], None, {"a": "b"}):
        with pytest.raises(ValueError, match=r"^'answers' must be a list of strings$"):
            string_list(bad, "'answers'", ValueError)


def test_distinct_nonblank_strips_drops_blanks_and_keeps_first_places() -> None:
    assert distinct_nonblank([" b ", "a", "", "  ", "b", "a "]) == ("b", "a")
    assert distinct_nonblank([]) == ()
