"""Building the open-domain QA sets: reading DPR's files from a jar, and the answerable rule."""

import csv
import io
import json
import re
import zipfile
from pathlib import Path

import pytest

from crag_bench.dpr_sets import (
    DPR_SETS,
    JAR_IN_WHEEL,
    DprSetError,
    SourceQuestion,
    dpr_set,
    jar_from_wheel,
    literal_answers,
    parse_set,
    read_jar,
)
from crag_bench.open_domain import AnswerIndex, answerable, build_sets, topic_words
from crag_bench.questions import read_popqa

FILLERS = 400
"""Unrelated summaries, so that the test corpus's words have realistic rarity."""

DOCUMENTS = [
    (
        "wikipedia:Mona Lisa",
        "Mona Lisa\nThe Mona Lisa, also called La Gioconda, is a portrait by Leonardo da Vinci. "
        "It is kept in the Louvre in Paris.",
    ),
    (
        "wikipedia:Leonardo da Vinci",
        "Leonardo da Vinci\nLeonardo da Vinci was an Italian polymath who painted the Mona Lisa.",
    ),
    (
        "wikipedia:McDonald's",
        "McDonald's\nMcDonald's is an American fast food company with many employees.",
    ),
    ("wikipedia:Paris", "Paris\nParis is the capital and largest city of France."),
    *(
        (f"wikipedia:Topic {i}", f"Topic {i}\nSome words about things numbered {i}.")
        for i in range(FILLERS)
    ),
]


def _tsv(rows: list[tuple[str, str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, delimiter="\t", lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def _quoted(question: str) -> str:
    """A question quoted once more, as some TriviaQA questions are in DPR's files."""
    return '"' + question.replace('"', '""') + '"'


SET_FILES = {
    "nq.dev": _tsv(
        [
            ("who painted the mona lisa", "['Leonardo da Vinci']"),
            ("list of companies with the most employees", "['Walmart', \"McDonald 's\"]"),
            ("what are topics about", "['things']"),
            ("who owns the red bicycle", "['Louvre']"),
            ("who sang the song", "['The']"),
        ]
    ),
    "trivia.dev": _tsv(
        [(_quoted('Which painting is "La Gioconda"?'), "['Mona Lisa', 'Gioconda']")]
    ),
    "nq.test": _tsv([("what is the capital of france", "['Paris']")]),
    "trivia.test": _tsv([("Which city is the capital of France?", "['Paris', 'City of Light']")]),
    "wq.test": json.dumps({"question": "what is the capital of france?", "answer": ["Paris"]})
    + "\n",
    "squad.test": json.dumps(
        {
            "question": "Which museum keeps the Mona Lisa?",
            "answer": ["Louvre", "Louvre", "the Louvre"],
        }
    )
    + "\n",
    "curated.test": "\n".join(
        json.dumps(record)
        for record in [
            {"question": "Who painted the Mona Lisa?", "answer": ["Leonardo\\b|da Vinci"]},
            {"question": "How tall is the Mona Lisa?", "answer": ["77\\s?cm|30\\s*in(ches)?"]},
        ]
    ),
}


def _jar(path: Path, files: dict[str, str] = SET_FILES) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        for topic, text in files.items():
            archive.writestr(f"topics-and-qrels/topics.dpr.{topic}.txt", text)
    return path


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_build_sets_writes_the_answerable_questions_of_every_set(tmp_path: Path) -> None:
    out = tmp_path / "sets"
    counts = build_sets(_jar(tmp_path / "anserini.jar"), DOCUMENTS, out)
    assert counts == {
        "nq-dev": (5, 2),
        "trivia-dev": (1, 1),
        "nq-test": (1, 1),
        "trivia-test": (1, 1),
        "wq-test": (1, 1),
        "squad-test": (1, 1),
        "curated-test": (1, 1),
    }
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{s.name}.jsonl" for s in DPR_SETS)
    assert _records(out / "nq-dev.jsonl") == [
        {
            "id": "nq-dev-1",
            "question": "who painted the mona lisa",
            "possible_answers": ["Leonardo da Vinci"],
            "gold_sources": ["wikipedia:Leonardo da Vinci", "wikipedia:Mona Lisa"],
        },
        {
            "id": "nq-dev-2",
            "question": "list of companies with the most employees",
            "possible_answers": ["Walmart", "McDonald 's"],
            "gold_sources": ["wikipedia:McDonald's"],
        },
    ]
    trivia = _records(out / "trivia-dev.jsonl")[0]
    assert trivia["question"] == 'Which painting is "La Gioconda"?'
    assert trivia["gold_sources"] == ["wikipedia:Mona Lisa", "wikipedia:Leonardo da Vinci"]
    squad = _records(out / "squad-test.jsonl")[0]
    assert squad["possible_answers"] == ["Louvre", "the Louvre"]
    assert squad["gold_sources"] == ["wikipedia:Mona Lisa"]
    curated = _records(out / "curated-test.jsonl")[0]
    assert curated["possible_answers"] == ["Leonardo", "da Vinci"]
    for spec in DPR_SETS:
        questions = read_popqa(out / f"{spec.name}.jsonl")
        assert all(q.gold_sources and q.answers for q in questions)


def _index(*texts: str, fillers: int = 0) -> AnswerIndex:
    documents = [(f"doc:{i}", text) for i, text in enumerate(texts)]
    documents += [(f"filler:{i}", f"nothing {i} here") for i in range(fillers)]
    return AnswerIndex(documents)


def test_answer_in_more_than_k_summaries_drops_the_question() -> None:
    index = _index(*(f"Ada Lovelace wrote note {i}" for i in range(4)))
    question = SourceQuestion(7, "Which note did she write?", ("Ada Lovelace",))
    assert answerable("s", [question], index, max_gold=3, min_support=0) == []
    [kept] = answerable("s", [question], index, max_gold=4, min_support=0)
    assert kept.id == "s-7"
    assert kept.gold_sources == ("doc:0", "doc:1", "doc:2", "doc:3")


def test_every_answer_counts_towards_k() -> None:
    index = _index("Ada Lovelace", "Ada", "Lovelace", "Countess of Lovelace")
    question = SourceQuestion(1, "Who was Ada?", ("Ada Lovelace", "Lovelace"))
    assert answerable("s", [question], index, max_gold=2, min_support=0) == []
    [kept] = answerable("s", [question], index, max_gold=3, min_support=0)
    assert set(kept.gold_sources) == {"doc:0", "doc:2", "doc:3"}


def test_answers_match_as_whole_normalised_tokens() -> None:
    index = _index("The Parisian café", "Population: 1,234 people", "Ben-Gurion airport")
    assert index.documents_with("Paris") == frozenset()
    assert index.documents_with("1234") == {1}
    assert index.documents_with("Ben - Gurion") == {2}
    assert index.documents_with("The") == frozenset()


def test_a_gold_summary_must_be_about_the_question() -> None:
    index = _index("Kepler studied planetary orbits", "Kepler was a ship", fillers=300)
    about = SourceQuestion(1, "Who studied planetary orbits?", ("Kepler",))
    unrelated = SourceQuestion(2, "Who owns the red bicycle?", ("Kepler",))
    [kept] = answerable("s", [about, unrelated], index)
    assert kept.id == "s-1"
    assert kept.gold_sources == ("doc:0", "doc:1")


def test_topic_words_leave_out_question_words_and_the_answer() -> None:
    words = topic_words("Who wrote the novel Emma, by Jane Austen?", ["Jane Austen"])
    assert words == {"wrote", "novel", "emma"}


@pytest.mark.parametrize(
    ("pattern", "answers"),
    [
        ("After the Fall|Finishing the Play", ("After the Fall", "Finishing the Play")),
        ("\\b15\\b|fifteen", ("15", "fifteen")),
        ("6\\,194 m|St. Louis", ("6,194 m", "St. Louis")),
        ("AC\\|DC", ("AC|DC",)),
        ("Marshal P\\étain", ("Marshal Pétain",)),
        ("\\d+ km", None),
        ("trailing\\", None),
        ("China", ("China",)),
        ("Ital(y|ian)", None),
        ("New\\s?York", None),
        ("strawberr.*cream", None),
        ("Qu[eé]bec", None),
        ("|", None),
    ],
)
def test_literal_answers_of_curated_patterns(pattern: str, answers: tuple[str, ...] | None) -> None:
    assert literal_answers(pattern) == answers


@pytest.mark.parametrize(
    ("topic", "text", "message"),
    [
        ("nq.dev", "q\t['a']\textra\n", "row 1: 3 cells, expected 2"),
        ("nq.dev", "q\t['a']\nr\t[oops\n", "row 2: answers are not a Python list"),
        ("nq.dev", "q\t[1]\n", "row 1: answers must be a list of strings"),
        ("nq.dev", "\t['a']\n", "row 1: empty question"),
        ("wq.test", '{"question": "q", "answer": ["a"]}\n{oops\n', "line 2: invalid JSON"),
        ("wq.test", '{"answer": ["a"]}\n', "line 1: no 'question' text"),
        ("squad.test", '{"question": "q", "answer": "a"}\n', "line 1: answers must be a list"),
    ],
)
def test_malformed_sets_are_one_line_errors(topic: str, text: str, message: str) -> None:
    spec = next(s for s in DPR_SETS if s.topic == topic)
    with pytest.raises(DprSetError, match=re.escape(f"topics.dpr.{topic}.txt {message}")):
        parse_set(spec, text)


def test_read_jar_names_a_missing_set(tmp_path: Path) -> None:
    jar = _jar(tmp_path / "partial.jar", {"nq.dev": SET_FILES["nq.dev"]})
    assert [q.position for q in read_jar(jar, (dpr_set("nq-dev"),))["nq-dev"]] == [1, 2, 3, 4, 5]
    with pytest.raises(
        DprSetError, match=re.escape("holds no topics-and-qrels/topics.dpr.trivia.dev.txt")
    ):
        read_jar(jar)
    with pytest.raises(DprSetError, match="cannot read the Anserini jar"):
        read_jar(tmp_path / "missing.jar")
    with pytest.raises(DprSetError, match="unknown DPR set 'nq-train'; valid: nq-dev, trivia-dev"):
        dpr_set("nq-train")


def test_jar_from_wheel_extracts_the_jar(tmp_path: Path) -> None:
    wheel = tmp_path / "pyserini-0.17.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(JAR_IN_WHEEL, b"jar bytes")
    jar = jar_from_wheel(wheel, tmp_path / "out")
    assert jar.read_bytes() == b"jar bytes"
    empty = tmp_path / "empty.whl"
    zipfile.ZipFile(empty, "w").close()
    with pytest.raises(DprSetError, match="holds no pyserini/resources/jars"):
        jar_from_wheel(empty, tmp_path / "out")
