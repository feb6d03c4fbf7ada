from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from crag_bench.answers import answer_in_text, normalize_answer
from crag_bench.fanoutqa import leaf_questions, load_split
from crag_bench.questions import (
    EvalQuestion,
    QuestionFileError,
    fanoutqa_questions,
    read_popqa,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  An   apple a day ", "apple day"),
        ("Theatre", "theatre"),
        ("1,234,567 people", "1234567 people"),
        ("1,2 and 3", "1 2 and 3"),
        ("$3.5 million", "35 million"),
        ("U.S.A.", "u s"),
        ("Newton's laws", "newton s laws"),
        ("1452\u20131519", "1452 1519"),
        ("\u201cQuoted\u201d", "quoted"),
        ("Jean-Paul Sartre", "jean paul sartre"),
        ("", ""),
        ("the a an", ""),
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


@pytest.mark.parametrize(
    ("answers", "text"),
    [
        (["Leonardo da Vinci"], "It was painted by Leonardo Da Vinci."),
        (["1,234"], "The town had 1234 inhabitants."),
        (["1519"], "Leonardo (1452\u20131519) was a polymath."),
        (["Paris", "City of Light"], "the city of light"),
        (["The Louvre"], "It hangs in the Louvre, in Paris."),
        (["Newton"], "Newton's laws of motion"),
    ],
)
def test_answer_in_text_matches(answers: list[str], text: str) -> None:
    assert answer_in_text(answers, text)


@pytest.mark.parametrize(
    ("answers", "text"),
    [
        (["4"], "It ended in 1945."),
        (["Paris"], "A Parisian painter."),
        (["da Vinci"], "Vincent van Gogh"),
        (["12"], "It cost 1,200 dollars."),
        (["the"], "the the the"),
        (["..."], "anything ..."),
        ([], "anything"),
        (["Paris"], ""),
    ],
)
def test_answer_in_text_rejects(answers: list[str], text: str) -> None:
    assert not answer_in_text(answers, text)


# --- PopQA files ----------------------------------------------------------------------------

RECORDS = [
    {
        "id": 4222362,
        "question": "What is George Rankin's occupation?",
        "possible_answers": '["politician", "political leader"]',
        "s_wiki_title": "George Rankin",
    },
    {"question": "  What is the capital of France? ", "possible_answers": ["Paris"]},
]
EXPECTED = [
    EvalQuestion(
        "4222362",
        "What is George Rankin's occupation?",
        ("politician", "political leader"),
        ("wikipedia:George Rankin",),
    ),
    EvalQuestion("2", "What is the capital of France?", ("Paris",)),
]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_read_popqa_jsonl(tmp_path: Path) -> None:
    lines = "\n".join(json.dumps(r) for r in RECORDS)
    assert read_popqa(write(tmp_path / "q.jsonl", lines + "\n\n")) == EXPECTED


def test_read_popqa_json(tmp_path: Path) -> None:
    assert read_popqa(write(tmp_path / "q.json", json.dumps(RECORDS))) == EXPECTED


@pytest.mark.parametrize(("suffix", "sep"), [(".tsv", "\t"), (".csv", ",")])
def test_read_popqa_tables(tmp_path: Path, suffix: str, sep: str) -> None:
    def cell(value: str) -> str:
        return '"' + value.replace('"', '""') + '"'

    rows = [
        sep.join(["id", "subj", "question", "possible_answers", "s_wiki_title"]),
        sep.join(
            [
                "4222362",
                "George Rankin",
                cell("What is George Rankin's occupation?"),
                cell('["politician", "political leader"]'),
                "George Rankin",
            ]
        ),
        sep.join(["", "Paris", "What is the capital of France?", cell('["Paris"]'), ""]),
    ]
    questions = read_popqa(write(tmp_path / f"q{suffix}", "\n".join(rows) + "\n"))
    assert questions == EXPECTED


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("q.txt", "question", "unknown question file type '.txt'"),
        ("q.jsonl", "", "no questions in"),
        ("q.json", "[]", "no questions in"),
        ("q.tsv", "question\tpossible_answers\n", "no questions in"),
        ("q.jsonl", '{"question": "Q?", "possible_answers": ["a"]}\n{oops', "line 2: invalid JSON"),
        ("q.json", '[{"question": "Q?",', "line 1: invalid JSON"),
        ("q.json", '{"question": "Q?"}', "must hold a JSON list"),
        ("q.jsonl", '["not", "an object"]', "line 1: not an object"),
        ("q.jsonl", '{"possible_answers": ["a"]}', "line 1: missing 'question'"),
        ("q.json", '[{"question": "  ", "possible_answers": ["a"]}]', "item 1: empty 'question'"),
        ("q.jsonl", '{"question": 5, "possible_answers": ["a"]}', "'question' must be text"),
        ("q.jsonl", '{"question": "Q?"}', "line 1: missing 'possible_answers'"),
        ("q.jsonl", '{"question": "Q?", "possible_answers": []}', "empty 'possible_answers'"),
        ("q.jsonl", '{"question": "Q?", "possible_answers": [" "]}', "empty 'possible_answers'"),
        ("q.jsonl", '{"question": "Q?", "possible_answers": ""}', "empty 'possible_answers'"),
        (
            "q.jsonl",
            '{"question": "Q?", "possible_answers": [1, 2]}',
            "'possible_answers' must be a list of strings",
        ),
        (
            "q.jsonl",
            '{"question": "Q?", "possible_answers": "{\\"a\\": 1}"}',
            "'possible_answers' must be a list of strings",
        ),
        ("q.tsv", "question\tpossible_answers\nQ?\t[oops\n", "row 1: 'possible_answers' is not"),
        ("q.csv", 'question,possible_answers\nQ?,"[""a""]"\nR?\n', "row 2: missing 'possible"),
        (
            "q.jsonl",
            '{"id": "x", "question": "Q?", "possible_answers": ["a"]}\n'
            '{"id": "x", "question": "R?", "possible_answers": ["b"]}',
            "line 2: duplicate id 'x'",
        ),
    ],
)
def test_read_popqa_bad_input(tmp_path: Path, name: str, content: str, message: str) -> None:
    path = write(tmp_path / name, content)
    with pytest.raises(QuestionFileError, match=re.escape(message)) as caught:
        read_popqa(path)
    assert str(path) in str(caught.value)


def test_read_popqa_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(QuestionFileError, match=re.escape(f"cannot read {missing}")):
        read_popqa(missing)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(QuestionFileError, match="not UTF-8"):
        read_popqa(binary)
    assert issubclass(QuestionFileError, ValueError)


# --- FanOutQA -------------------------------------------------------------------------------


def test_fanoutqa_questions_keep_leaves_with_gold_pages_in_the_corpus() -> None:
    ids = load_split()["dev"][:10]
    leaves = leaf_questions(ids)
    assert len({leaf.gold_title for leaf in leaves}) > 2
    titles = {leaf.gold_title for leaf in leaves[::2]}
    wanted = [leaf for leaf in leaves if leaf.gold_title in titles]
    questions = fanoutqa_questions(ids + ids[:2], titles)
    assert [q.id for q in questions] == [leaf.id for leaf in wanted]
    assert len({q.id for q in questions}) == len(questions)
    first, leaf = questions[0], wanted[0]
    assert first == EvalQuestion(
        leaf.id, leaf.question, (leaf.answer,), (f"wikipedia:{leaf.gold_title}",)
    )
    assert fanoutqa_questions(ids, set()) == []
    with pytest.raises(ValueError, match="not FanOutQA dev question ids"):
        fanoutqa_questions(["no-such-id"], titles)


def test_read_popqa_gold_sources_come_before_the_title(tmp_path: Path) -> None:
    records = [
        {
            "question": "Who painted the Mona Lisa?",
            "possible_answers": ["Leonardo da Vinci"],
            "gold_sources": ["wikipedia:Mona Lisa", " wikipedia:Louvre ", "wikipedia:Mona Lisa"],
            "s_wiki_title": "Leonardo da Vinci",
        },
        {"question": "Q?", "possible_answers": ["a"], "gold_sources": []},
    ]
    questions = read_popqa(write(tmp_path / "q.json", json.dumps(records)))
    assert questions[0].gold_sources == (
        "wikipedia:Mona Lisa",
        "wikipedia:Louvre",
        "wikipedia:Leonardo da Vinci",
    )
    assert questions[1].gold_sources == ()


def test_read_popqa_gold_sources_as_json_text_in_a_table(tmp_path: Path) -> None:
    rows = 'question\tpossible_answers\tgold_sources\nQ?\t["a"]\t"[""docs/a.txt"", ""b""]"\n'
    questions = read_popqa(write(tmp_path / "q.tsv", rows))
    assert questions[0].gold_sources == ("docs/a.txt", "b")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[1]", "line 1: 'gold_sources' must be a list of strings"),
        ('"wikipedia:Paris"', "line 1: 'gold_sources' is not a JSON list"),
        ('{"a": 1}', "'gold_sources' must be a list of strings"),
    ],
)
def test_read_popqa_bad_gold_sources(tmp_path: Path, value: str, message: str) -> None:
    line = f'{{"question": "Q?", "possible_answers": ["a"], "gold_sources": {value}}}'
    with pytest.raises(QuestionFileError, match=re.escape(message)):
        read_popqa(write(tmp_path / "q.jsonl", line))
