"""The bundled open-domain QA sets and ``crag-bench eval --dataset``."""

import argparse
import json
import logging
import re
from pathlib import Path

import pytest

from crag.vectorstore.corpus import load_corpus
from crag_bench.answers import answer_in_text
from crag_bench.cli import build_parser, main
from crag_bench.datasets import (
    DATA_DIR,
    UnknownDatasetError,
    dataset_names,
    dataset_path,
    is_dev,
    load_dataset,
)
from crag_bench.eval_cli import build_options
from crag_bench.open_domain import MAX_GOLD_DOCUMENTS

SETS = ["nq-dev", "trivia-dev", "curated-test", "nq-test", "squad-test", "trivia-test", "wq-test"]


def test_every_set_is_bundled_dev_sets_first() -> None:
    assert dataset_names() == SETS
    assert [is_dev(name) for name in SETS] == [True, True] + [False] * 5


@pytest.mark.parametrize("name", SETS)
def test_bundled_sets_are_well_formed(name: str) -> None:
    texts = {doc.source: doc.text for doc in load_corpus()}
    questions = load_dataset(name)
    assert questions
    for question in questions:
        assert question.id.startswith(f"{name}-")
        assert question.question and question.answers
        assert 1 <= len(question.gold_sources) <= MAX_GOLD_DOCUMENTS, question.id
        for source in question.gold_sources:
            assert answer_in_text(question.answers, texts[source]), (question.id, source)


def test_readme_counts_match_the_files() -> None:
    readme = (DATA_DIR / "README.md").read_text(encoding="utf-8")
    for name in SETS:
        row = re.search(rf"^\| {name} \|.*\*\*([\d,]+)\*\* \|$", readme, re.MULTILINE)
        assert row, name
        lines = dataset_path(name).read_text(encoding="utf-8").splitlines()
        assert int(row.group(1).replace(",", "")) == len(lines), name


def test_unknown_dataset_lists_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(
        UnknownDatasetError, match="unknown dataset 'nq'; valid: nq-dev, trivia-dev"
    ):
        dataset_path("nq")
    (tmp_path / "mine-dev.jsonl").write_text(
        json.dumps({"question": "Q?", "possible_answers": ["a"]}) + "\n", encoding="utf-8"
    )
    assert dataset_names(tmp_path) == ["mine-dev"]
    assert load_dataset("mine-dev", tmp_path)[0].answers == ("a",)
    with pytest.raises(UnknownDatasetError, match=r"valid: none \(no .jsonl files in"):
        dataset_path("x", tmp_path / "empty")


def _args(tmp_path: Path, *extra: str) -> argparse.Namespace:
    return build_parser().parse_args(["eval", "--out", str(tmp_path / "out"), *extra])


def test_dataset_option_loads_the_set(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    args = _args(tmp_path, "--dataset", "nq-dev", "--limit", "2")
    with caplog.at_level(logging.WARNING):
        options = build_options(args)
    assert [q.id for q in options.questions] == [q.id for q in load_dataset("nq-dev")[:2]]
    assert options.question_source.startswith("open-domain QA set nq-dev")
    assert options.default_corpus
    assert all(q.gold_source in options.gold_texts for q in options.questions)
    assert "test set" not in caplog.text


def test_a_test_set_warns_that_it_is_for_acceptance_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        options = build_options(_args(tmp_path, "--dataset", "wq-test", "--limit", "1"))
    assert len(options.questions) == 1
    assert "wq-test is a test set: use it for acceptance runs only" in caplog.text


def test_unknown_dataset_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "--dataset", "nq-train", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "unknown dataset 'nq-train'; valid: nq-dev, trivia-dev, curated-test" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("other", [["--questions", "q.jsonl"], ["--ids", "ids.json"]])
def test_dataset_excludes_other_question_sources(
    other: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(["eval", "--dataset", "nq-dev", *other])
    assert caught.value.code == 2
    assert "not allowed with argument --dataset" in capsys.readouterr().err


def test_dataset_runs_use_the_bundled_corpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["eval", "--dataset", "nq-dev", "--corpus", "docs", "--out", str(tmp_path / "out")]
    assert main(args) == 2
    assert "--corpus needs --questions" in capsys.readouterr().err
