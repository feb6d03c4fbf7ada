"""Mining labelled pairs from question sets over a corpus: labels, hard negatives, splits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crag_bench.dpr_sets import SourceQuestion
from crag_bench.held_out import HeldOutError, is_test_id, refuse_held_out
from crag_bench.pair_mining import (
    Labeller,
    MinedPair,
    MiningError,
    MiningOptions,
    Unit,
    check_mining_sets,
    measured_ids,
    mine_pairs,
    question_pairs,
    read_mined,
    sample_train,
    split_of,
    thin_negatives,
    write_mined,
)
from crag_bench.ranking_figures import ranking_figures, retriever_scores

FILLER = "It is a subject of many books and of some films, and of a few songs as well."
CORPUS = [
    (
        "wikipedia:Mona Lisa",
        "Mona Lisa\nThe Mona Lisa is a portrait painting. It was painted by Leonardo da Vinci "
        "in Florence. " + FILLER,
    ),
    ("wikipedia:Leonardo da Vinci", "Leonardo da Vinci\nLeonardo da Vinci was a polymath."),
    (
        "wikipedia:Florence",
        "Florence\nFlorence is a city in Italy. Leonardo da Vinci lived there. " + FILLER,
    ),
    ("wikipedia:Paris", "Paris\nParis is the capital of France. The Louvre is in Paris."),
    ("wikipedia:Rome", "Rome\nRome is the capital of Italy."),
] + [
    (f"wikipedia:Filler {i}", f"Filler {i}\nA city of Italy with a river. {FILLER}")
    for i in range(60)
]


def retrieved(*sources: str) -> list[dict[str, Any]]:
    texts = dict(CORPUS)
    return [{"text": texts[s], "source": s} for s in sources]


@pytest.fixture(scope="module")
def labeller() -> Labeller:
    return Labeller(CORPUS)


MONA = SourceQuestion(1, "Who painted the Mona Lisa?", ("Leonardo da Vinci",))


def test_answer_in_a_document_about_the_question_is_positive(labeller: Labeller) -> None:
    pairs = question_pairs(
        MONA,
        "nq-dev-1",
        "train",
        retrieved("wikipedia:Mona Lisa", "wikipedia:Paris"),
        labeller,
        MiningOptions(),
    )
    passages = {p.source: p for p in pairs if p.unit == "passage"}
    assert passages["wikipedia:Mona Lisa"].label == 1
    assert passages["wikipedia:Paris"].label == -1
    strips = [p for p in pairs if p.unit == "strip" and p.source == "wikipedia:Mona Lisa"]
    labels = {s.passage.partition("\n")[2]: s.label for s in strips}
    assert labels["It was painted by Leonardo da Vinci in Florence."] == 1
    assert labels["The Mona Lisa is a portrait painting."] == -1  # same document, no answer
    assert all(s.passage.startswith("Mona Lisa\n") for s in strips)  # as refinement sees them


def test_missed_gold_and_coincidences_are_added(labeller: Labeller) -> None:
    pairs = question_pairs(
        MONA, "nq-dev-1", "train", retrieved("wikipedia:Paris"), labeller, MiningOptions()
    )
    added = {p.source: p for p in pairs if p.unit == "passage" and p.rank is None}
    assert added["wikipedia:Mona Lisa"].origin == "gold" and added["wikipedia:Mona Lisa"].label == 1
    # Leonardo's own page holds the answer but shares no word of the question: a coincidence
    assert added["wikipedia:Leonardo da Vinci"].origin == "coincidence"
    assert added["wikipedia:Leonardo da Vinci"].label == -1


def test_a_generic_answer_gives_no_positive_and_no_answer_holding_pair(labeller: Labeller) -> None:
    generic = SourceQuestion(2, "Which country has a river city?", ("Italy",))
    pairs = question_pairs(
        generic,
        "nq-dev-2",
        "train",
        retrieved("wikipedia:Rome", "wikipedia:Paris", "wikipedia:Filler 1"),
        labeller,
        MiningOptions(),
    )
    assert pairs and all(p.label == -1 and not p.holds_answer for p in pairs)
    assert {p.source for p in pairs} == {"wikipedia:Paris"}


def test_train_questions_without_a_positive_keep_their_hardest_negatives(
    labeller: Labeller,
) -> None:
    nothing = SourceQuestion(3, "Who wrote the novel Emma?", ("Jane Austen",))
    pairs = question_pairs(
        nothing,
        "nq-dev-3",
        "train",
        retrieved("wikipedia:Paris", "wikipedia:Rome", "wikipedia:Florence"),
        labeller,
        MiningOptions(),
    )
    kept = sample_train(pairs, MiningOptions(negatives_without_positive=1))
    assert [(p.unit, p.rank) for p in kept] == [("passage", 0), ("strip", 0)]
    assert thin_negatives(pairs, 1) == kept


def test_splits_refuse_test_sets_and_hold_the_measured_half_out() -> None:
    measured = measured_ids()
    assert "nq-dev-3" in measured  # the first line of nq-dev.jsonl
    assert split_of("nq-dev-3", measured) == "measure"
    assert {split_of(f"trivia-dev-{i}", frozenset()) for i in range(200)} == {"train", "select"}
    assert check_mining_sets(["nq-dev"]) == ("nq-dev",)
    with pytest.raises(MiningError, match="only the dev sets"):
        check_mining_sets(["nq-dev", "nq-test"])
    with pytest.raises(MiningError, match="only the dev sets"):
        list(mine_pairs({"trivia-test": []}, lambda qs: [], Labeller(CORPUS), measured))


def test_mining_writes_splits_and_reads_them_back(labeller: Labeller, tmp_path: Path) -> None:
    questions = {
        "nq-dev": [SourceQuestion(100000 + i, MONA.question, MONA.answers) for i in range(20)]
    }

    def retrieve(batch: Any) -> list[list[dict[str, Any]]]:
        return [retrieved("wikipedia:Mona Lisa", "wikipedia:Paris") for _ in batch]

    counts = write_mined(tmp_path, mine_pairs(questions, retrieve, labeller, frozenset()))
    assert sum(counts.questions.values()) == 20
    back = read_mined(tmp_path / "train.jsonl") if (tmp_path / "train.jsonl").exists() else []
    assert all(isinstance(p, MinedPair) and p.split == "train" for p in back)
    (tmp_path / "bad.jsonl").write_text('{"question": "q"}\n', encoding="utf-8")
    with pytest.raises(MiningError, match=r"bad\.jsonl:1"):
        read_mined(tmp_path / "bad.jsonl")


def test_held_out_questions_are_refused_in_code() -> None:
    assert is_test_id("nq-test-12") and is_test_id("curated-test-3")
    assert not is_test_id("nq-dev-12") and not is_test_id("my-test-question")
    with pytest.raises(HeldOutError, match="test set"):
        refuse_held_out(["nq-dev-5", "trivia-test-9"], "calibrate")
    with pytest.raises(HeldOutError, match="measured half"):
        refuse_held_out(["nq-dev-3"], "train")
    refuse_held_out(["nq-dev-3", "hand-made-1"], "calibrate")  # measuring is not training
    from crag_bench.evaluator_report import read_split
    from crag_bench.fanoutqa import leaf_owners

    allowed = set(read_split(None)["train"]) | set(read_split(None)["dev"])
    held = next(leaf for leaf, tops in leaf_owners().items() if not tops <= allowed)
    with pytest.raises(HeldOutError, match="held-out FanOutQA"):
        refuse_held_out([held], "fit")


def test_ranking_figures_on_a_hand_made_question() -> None:
    def pair(unit: Unit, source: str, rank: int, label: int, holds: bool) -> MinedPair:
        return MinedPair(
            "q",
            "question",
            f"{unit} {source} {rank}",
            label,
            source,
            rank,
            unit,
            "select",
            holds,
            True,
        )

    pairs = [
        pair("passage", "a", 0, -1, False),
        pair("passage", "b", 1, 1, True),
        pair("strip", "a", 0, -1, False),
        pair("strip", "b", 1, 1, True),
    ]
    figures = ranking_figures(pairs, [0.9, 0.1, 0.9, 0.1])
    assert figures.pair_auc == 0.0 and figures.best_passage_gold == 0.0
    assert figures.strip_recall_at_5 == 1.0  # both strips are among the five kept
    better = ranking_figures(pairs, [0.1, 0.9, 0.1, 0.9])
    assert better.pair_auc == 1.0 and better.best_passage_gold == 1.0
    assert ranking_figures(pairs, retriever_scores(pairs)).best_passage_gold == 0.0
