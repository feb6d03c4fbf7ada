"""The question file that ships with crag (``examples/bundled-questions.jsonl``) keeps its promise.

docs/evaluation.md prints a real ``crag eval`` report made on it against the bundled corpus, and
tells a reader to run the same command. So the file must be what ``crag eval`` reads (its own
reader, :func:`crag.app.cli.eval_command.read_eval_questions`), every question must carry
answers to be judged by, and the mix the page describes must hold: most answers are in the
bundled corpus, a few are not (those show the Incorrect action and abstention offline).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crag.app.cli.eval_command import EvalQuestion, read_eval_questions
from crag.knowledge.answer_match import normalize_text
from crag.settings.deployment import DeploymentSettings
from crag.vectorstore.corpus import load_corpus

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = ROOT / "examples" / "bundled-questions.jsonl"
EVALUATION_PAGE = ROOT / "docs" / "evaluation.md"
ANSWERED_BY_THE_CORPUS = 18
"""Questions whose answer the bundled corpus holds (docs/evaluation.md says so)."""
NOT_IN_THE_CORPUS = 4
"""Questions whose answer it does not hold."""


@pytest.fixture(scope="module")
def questions() -> list[EvalQuestion]:
    limit = DeploymentSettings().max_question_chars
    return read_eval_questions(QUESTIONS, limit)


def test_the_shipped_file_is_what_crag_eval_reads(questions: list[EvalQuestion]) -> None:
    assert 15 <= len(questions) <= 25
    assert len({item.question for item in questions}) == len(questions), "a question repeats"
    for item in questions:
        assert item.answers, f"line {item.line} has no answers: {item.question!r}"
        assert all(normalize_text(answer) for answer in item.answers), (
            f"line {item.line} has an answer that matches nothing: {item.answers!r}"
        )
        assert item.verdict is None


def _in_corpus(answers: list[str], corpus: list[str]) -> bool:
    """Whether a normalised corpus text holds one of ``answers`` as whole words.

    :func:`crag.knowledge.answer_match.holds_answer` normalises every text per call; the
    corpus (10,033 summaries) is normalised once here instead, with the same rule.
    """
    needles = [f" {normalize_text(answer)} " for answer in answers]
    return any(needle in text for text in corpus for needle in needles)


def test_the_corpus_holds_the_answers_the_page_says_it_holds(
    questions: list[EvalQuestion],
) -> None:
    corpus = [f" {normalize_text(document.text)} " for document in load_corpus()]
    held = [item.question for item in questions if _in_corpus(item.answers, corpus)]
    missing = [item.question for item in questions if item.question not in held]
    assert len(held) == ANSWERED_BY_THE_CORPUS, held
    assert len(missing) == NOT_IN_THE_CORPUS, missing
    page = EVALUATION_PAGE.read_text(encoding="utf-8")
    assert "examples/bundled-questions.jsonl" in page
    assert f"{ANSWERED_BY_THE_CORPUS} of them" in page and f"{NOT_IN_THE_CORPUS} are not" in page
