"""Evaluator tools: threshold fitting, metrics, the backend report, `crag-bench evaluator`."""

from __future__ import annotations

import argparse
import itertools
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from crag.knowledge.action_trigger import trigger_action
from crag.settings.method import MethodConfig
from crag.settings.run_settings import RunSettings
from crag_bench.evaluator_calibration import (
    PAPER_LOWER,
    PAPER_UPPER,
    fit_thresholds,
    threshold_between,
)
from crag_bench.evaluator_cli import add_evaluator_commands
from crag_bench.evaluator_metrics import average_ranks, pair_accuracy, roc_auc
from crag_bench.evaluator_report import (
    BackendReport,
    check_ids,
    evaluate_backend,
    format_report,
    read_ids_file,
)
from crag_bench.fanoutqa import LeafQuestion, dev_file, leaf_questions, load_split
from crag_bench.pairs import RetrievalCase, read_pairs

TRAIN_IDS = ("f384f0d0b3af54e4", "220852c6d47dfd38")
"""Two train questions with some gold pages in the corpus (moons; mountains)."""

DEV_IDS = ("515d3a311f403f78", "b857dc3ac7ad967e")
"""Two dev questions with some gold pages in the corpus (Chinese leaders; bulbs)."""


# --- fit_thresholds --------------------------------------------------------------------------


def test_default_thresholds_are_the_dev_calibrated_ones_not_the_papers() -> None:
    # calibrated on the open-domain dev sets for the embedding evaluator (README); the paper's
    # PopQA values for its T5 stay the calibration tool's fallback
    method = MethodConfig()
    assert (method.upper_threshold, method.lower_threshold) == (None, None)
    assert RunSettings().action_thresholds() == (-0.4, -0.9)
    assert method.thresholds_for("embedding") == (-0.4, -0.9)
    assert (PAPER_UPPER, PAPER_LOWER) == (0.59, -0.99)


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0.2, 0.9, 0.6),
        (-0.5, 0.8, 0.0),
        (0.11, 0.12, 0.115),
        (0.3, 0.31, 0.305),
        (-1.01, -1.0, -1.005),
    ],
)
def test_threshold_between_is_short_and_central(low: float, high: float, expected: float) -> None:
    value = threshold_between(low, high)
    assert low < value < high
    assert value == pytest.approx(expected)


def test_threshold_between_rejects_an_empty_interval() -> None:
    with pytest.raises(ValueError):
        threshold_between(0.5, 0.5)


FIT_TABLE: list[tuple[str, list[float], list[int], float, dict[str, Any]]] = [
    (
        "perfect separation: one cut, nothing ambiguous",
        [0.9, 0.8, -0.5, -0.6],
        [1, 1, -1, -1],
        0.9,
        {
            "upper": 0.0,
            "lower": 0.0,
            "upper_fitted": True,
            "lower_fitted": True,
            "crossed": False,
            "correct": 2,
            "ambiguous": 0,
            "incorrect": 2,
            "upper_precision": 1.0,
            "upper_recall": 1.0,
            "lower_precision": 1.0,
            "lower_recall": 1.0,
        },
    ),
    (
        "overlap: an ambiguous band in the middle",
        # scores:  -0.9 -0.7 -0.5 -0.3 -0.1  0.1  0.3  0.5  0.7  0.9
        [-0.9, -0.7, -0.5, -0.3, -0.1, 0.1, 0.3, 0.5, 0.7, 0.9],
        [-1, -1, -1, 1, -1, 1, -1, 1, 1, 1],
        0.9,
        {
            # above 0.4: 0.5 0.7 0.9 all positive (0.3 is negative, so 0.2 gives 3/4 < 0.9)
            "upper": 0.4,
            # below -0.4: -0.9 -0.7 -0.5 all negative (-0.3 is positive: 3/4 < 0.9)
            "lower": -0.4,
            "upper_fitted": True,
            "lower_fitted": True,
            "crossed": False,
            "correct": 3,
            "ambiguous": 4,
            "incorrect": 3,
            "upper_precision": 1.0,
            "upper_recall": 0.6,
            "lower_precision": 1.0,
            "lower_recall": 0.6,
        },
    ),
    (
        "overlap at a lower target: smaller upper, larger lower",
        [-0.9, -0.7, -0.5, -0.3, -0.1, 0.1, 0.3, 0.5, 0.7, 0.9],
        [-1, -1, -1, 1, -1, 1, -1, 1, 1, 1],
        0.75,
        {
            # above 0.0: 0.1 0.3 0.5 0.7 0.9 -> 4/5 = 0.8 >= 0.75; above -0.2 gives 4/6 < 0.75
            "upper": 0.0,
            # below 0.0: 4 of 5 negative (0.8); below 0.2 gives 4/6 < 0.75
            "lower": 0.0,
            "upper_fitted": True,
            "lower_fitted": True,
            "crossed": False,
            "correct": 5,
            "ambiguous": 0,
            "incorrect": 5,
            "upper_precision": 0.8,
            "upper_recall": 0.8,
            "lower_precision": 0.8,
            "lower_recall": 0.8,
        },
    ),
    (
        "no threshold reaches the target: the paper's defaults, flagged",
        [0.1, 0.2, 0.3, 0.4],
        [1, -1, 1, -1],
        0.9,
        {
            "upper": PAPER_UPPER,
            "lower": PAPER_LOWER,
            "upper_fitted": False,
            "lower_fitted": False,
            "crossed": False,
            "correct": 0,
            "ambiguous": 4,
            "incorrect": 0,
            "upper_precision": None,
            "upper_recall": 0.0,
            "lower_precision": None,
            "lower_recall": 0.0,
        },
    ),
    (
        "crossing thresholds merge at the most accurate cut",
        [-0.9, -0.5, 0.0, 0.5, 0.9],
        [-1, 1, -1, -1, 1],
        0.5,
        {
            "upper": 0.7,
            "lower": 0.7,
            "upper_fitted": True,
            "lower_fitted": True,
            "crossed": True,
            "correct": 1,
            "ambiguous": 0,
            "incorrect": 4,
            "upper_precision": 1.0,
            "upper_recall": 0.5,
            "lower_precision": 0.75,
            "lower_recall": 1.0,
        },
    ),
    (
        "only positives: upper below every score, lower falls back",
        [0.1, 0.2],
        [1, 1],
        0.9,
        {
            "upper": 0.095,
            "lower": PAPER_LOWER,
            "upper_fitted": True,
            "lower_fitted": False,
            "crossed": False,
            "correct": 2,
            "ambiguous": 0,
            "incorrect": 0,
            "upper_precision": 1.0,
            "upper_recall": 1.0,
            "lower_precision": None,
            "lower_recall": None,
        },
    ),
    (
        "a fallback that would cross the fitted threshold moves onto it",
        [0.8, 0.9],
        [-1, -1],
        0.9,
        {
            "upper": 0.905,
            "lower": 0.905,
            "upper_fitted": False,
            "lower_fitted": True,
            "crossed": True,
            "correct": 0,
            "ambiguous": 0,
            "incorrect": 2,
            "upper_precision": None,
            "upper_recall": None,
            "lower_precision": 1.0,
            "lower_recall": 1.0,
        },
    ),
    (
        "ties: a threshold never splits pairs of equal score",
        [0.5, 0.5, 0.5, -0.5, -0.5],
        [1, 1, -1, -1, -1],
        0.65,
        {
            # above 0.0: three pairs at 0.5, 2/3 >= 0.65; below 0.0: two negatives
            "upper": 0.0,
            "lower": 0.0,
            "crossed": False,
            "correct": 3,
            "ambiguous": 0,
            "incorrect": 2,
            "upper_precision": pytest.approx(2 / 3),
            "lower_precision": 1.0,
        },
    ),
]


@pytest.mark.parametrize(
    ("scores", "labels", "target", "expected"),
    [row[1:] for row in FIT_TABLE],
    ids=[row[0] for row in FIT_TABLE],
)
def test_fit_thresholds_table(
    scores: list[float], labels: list[int], target: float, expected: dict[str, Any]
) -> None:
    fit = fit_thresholds(scores, labels, target)
    got = {key: getattr(fit, key) for key in expected}
    assert got == expected
    assert fit.pairs == len(scores) == fit.correct + fit.ambiguous + fit.incorrect
    assert fit.lower <= fit.upper
    assert fit.used_defaults == (not (fit.upper_fitted and fit.lower_fitted))
    # the thresholds work with the graph's action trigger
    trigger_action(scores, fit.upper, fit.lower)
    assert f"upper_threshold={fit.upper!r}" in fit.set_arguments()


def test_fit_thresholds_on_random_data_meets_the_target_and_is_minimal() -> None:
    rng = random.Random(3)
    labels = [1 if rng.random() < 0.3 else -1 for _ in range(300)]
    scores = [round(rng.gauss(0.4 if y > 0 else -0.2, 0.35), 2) for y in labels]
    fit = fit_thresholds(scores, labels, 0.9)
    assert fit.upper_fitted and fit.lower_fitted and not fit.crossed
    assert fit.upper_precision is not None and fit.upper_precision >= 0.9
    assert fit.lower_precision is not None and fit.lower_precision >= 0.9

    def precision_above(t: float) -> float:
        above = [y for s, y in zip(scores, labels, strict=True) if s > t]
        return sum(y > 0 for y in above) / len(above) if above else 0.0

    # no cut below the upper threshold reaches the target (the cut just below it is upper's own)
    below = sorted(s for s in set(scores) if s < fit.upper)
    assert all(precision_above(s) < 0.9 for s in [min(scores) - 1, *below[:-1]])


@pytest.mark.parametrize(
    ("scores", "labels", "target"),
    [
        ([], [], 0.9),
        ([0.1], [1, -1], 0.9),
        ([0.1], [1], 0.0),
        ([0.1], [1], 1.5),
        ([float("nan")], [1], 0.9),
    ],
)
def test_fit_thresholds_rejects_bad_input(
    scores: list[float], labels: list[int], target: float
) -> None:
    with pytest.raises(ValueError):
        fit_thresholds(scores, labels, target)


# --- metrics ---------------------------------------------------------------------------------


def brute_force_auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    pos = [s for s, y in zip(scores, labels, strict=True) if y > 0]
    neg = [s for s, y in zip(scores, labels, strict=True) if y <= 0]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


@pytest.mark.parametrize("seed", range(6))
def test_roc_auc_matches_a_brute_force_pairwise_count_with_ties(seed: int) -> None:
    rng = random.Random(seed)
    labels = [rng.choice([1, -1]) for _ in range(60)] + [1, -1]
    scores = [rng.choice([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0]) for _ in labels]  # many ties
    assert roc_auc(scores, labels) == pytest.approx(brute_force_auc(scores, labels))


def test_roc_auc_edge_cases() -> None:
    assert roc_auc([0.1, 0.9], [-1, 1]) == 1.0
    assert roc_auc([0.9, 0.1], [-1, 1]) == 0.0
    assert roc_auc([0.5, 0.5], [-1, 1]) == 0.5
    assert roc_auc([0.5, 0.6], [1, 1]) is None
    assert roc_auc([], []) is None
    with pytest.raises(ValueError):
        roc_auc([0.5], [1, -1])


def test_average_ranks_share_ties() -> None:
    assert average_ranks([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]


def test_pair_accuracy() -> None:
    assert pair_accuracy([0.5, -0.5, 0.0, 0.2], [1, -1, 1, -1]) == 0.5
    assert pair_accuracy([], []) is None


# --- evaluate_backend ------------------------------------------------------------------------


class KeywordEvaluator:
    """Scores a passage by the first keyword it contains; ``default`` otherwise."""

    name = "keywords"

    def __init__(self, scores: dict[str, float], default: float = -1.0) -> None:
        self.scores = scores
        self.default = default
        self.calls: list[tuple[str, list[str]]] = []

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        self.calls.append((question, list(passages)))
        return [next((s for k, s in self.scores.items() if k in p), self.default) for p in passages]


def leaf(n: int, title: str) -> LeafQuestion:
    return LeafQuestion(f"leaf{n}", "top", f"question {n}?", "answer", title)


def hand_made_cases() -> list[RetrievalCase]:
    """Six questions covering every cell of the action x gold table."""
    return [
        # gold retrieved, scored high -> correct, agrees
        RetrievalCase(
            leaf(1, "A"),
            [("A high", "wikipedia:A"), ("B low", "wikipedia:B")],
            ["A high", "A other mid"],
        ),
        # gold retrieved but scored in the middle -> ambiguous
        RetrievalCase(
            leaf(2, "C"), [("C mid", "wikipedia:C"), ("B low", "wikipedia:B")], ["C mid"]
        ),
        # gold not in store, a distractor scores high -> correct, disagrees
        RetrievalCase(leaf(3, "Z"), [("D high", "wikipedia:D"), ("B low", "wikipedia:B")], []),
        # gold not in store, everything low -> incorrect, agrees
        RetrievalCase(leaf(4, "Y"), [("E low", "wikipedia:E")], []),
        # gold in store but not retrieved, everything low -> incorrect, agrees
        RetrievalCase(leaf(5, "F"), [("G low", "wikipedia:G")], ["F high"]),
        # nothing retrieved -> incorrect (trigger_action on no scores), agrees
        RetrievalCase(leaf(6, "X"), [], []),
    ]


def test_evaluate_backend_table_and_agreement() -> None:
    evaluator = KeywordEvaluator({"high": 0.9, "mid": 0.0, "low": -1.0})
    cases = hand_made_cases()
    report = evaluate_backend(evaluator, cases, upper=0.59, lower=-0.99)
    assert isinstance(report, BackendReport)
    assert report.table == {
        "correct": {"gold_in_top_k": 1, "gold_not_in_top_k": 1},
        "ambiguous": {"gold_in_top_k": 1, "gold_not_in_top_k": 0},
        "incorrect": {"gold_in_top_k": 0, "gold_not_in_top_k": 3},
    }
    assert (report.questions, report.questions_with_gold, report.gold_in_top_k) == (6, 3, 2)
    assert (report.agreeing, report.decided) == (4, 5)
    assert report.agreement == pytest.approx(4 / 6)
    assert report.agreement_excluding_ambiguous == pytest.approx(4 / 5)
    # pairs: case 1: 2 gold + "B low"; case 2: 1 gold + "B low"; case 5: 1 gold + "G low"
    assert (report.pairs, report.positives, report.negatives) == (7, 4, 3)
    # positives 0.9, 0.0, 0.0, 0.9 vs negatives -1, -1, -1: every positive above every negative
    assert report.auc == 1.0
    # score > 0 agrees for 0.9, 0.9 and the three -1 negatives, not for the two 0.0 positives
    assert report.pair_accuracy == pytest.approx(5 / 7)
    # one evaluator call per question with passages, each passage once
    assert len(evaluator.calls) == 5
    assert evaluator.calls[0] == ("question 1?", ["A high", "B low", "A other mid"])
    assert report.backend == "keywords"
    text = format_report(report, 10)
    assert "agreement 0.667 (4/6)" in text and "excluding Ambiguous 0.800 (4/5)" in text
    assert json.loads(json.dumps(report.to_dict()))["table"] == report.table


def test_evaluate_backend_rejects_crossed_thresholds_and_short_scores() -> None:
    with pytest.raises(ValueError):
        evaluate_backend(KeywordEvaluator({}), hand_made_cases(), upper=-0.5, lower=0.5)

    class Short(KeywordEvaluator):
        def score(self, question: str, passages: Sequence[str]) -> list[float]:
            return [0.0]

    with pytest.raises(ValueError, match="scores"):
        evaluate_backend(Short({}), hand_made_cases(), upper=0.59, lower=-0.99)


# --- split guards ----------------------------------------------------------------------------


def held_out_id() -> str:
    """A held-out question with leaf questions (used only to check that it is refused)."""
    split = load_split()
    known = set(split["train"]) | set(split["dev"])
    questions = json.loads(dev_file().read_text(encoding="utf-8"))
    return str(
        next(q["id"] for q in questions if q["id"] not in known and leaf_questions([q["id"]]))
    )


def test_check_ids_refuses_held_out_and_other_parts() -> None:
    split = load_split()
    check_ids(list(TRAIN_IDS), split, ("train",))
    check_ids([*TRAIN_IDS, *DEV_IDS], split, ("train", "dev"))
    with pytest.raises(ValueError, match="held out"):
        check_ids([TRAIN_IDS[0], held_out_id()], split, ("train", "dev"))
    with pytest.raises(ValueError, match="not in the train split"):
        check_ids(list(DEV_IDS), split, ("train",))


def test_read_ids_file_errors(tmp_path: Path) -> None:
    path = tmp_path / "ids.json"
    path.write_text('["a", "b", "a"]', encoding="utf-8")
    assert read_ids_file(path) == ["a", "b"]
    for content in ("{}", "[]", "[1]", "not json"):
        path.write_text(content, encoding="utf-8")
        with pytest.raises(ValueError):
            read_ids_file(path)
    with pytest.raises(ValueError):
        read_ids_file(tmp_path / "missing.json")


# --- the commands ----------------------------------------------------------------------------


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="crag")
    add_evaluator_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["evaluator", *argv])
    return int(args.func(args))


def ids_file(tmp_path: Path, ids: Sequence[str], name: str) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(list(ids)), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small real store: gold pages of the test questions in the corpus, plus distractors."""
    from crag.vectorstore.corpus import load_corpus
    from crag.vectorstore.embeddings import load_embeddings
    from crag.vectorstore.ingest import QUIET, ingest_documents
    from crag.vectorstore.store import open_store

    titles = {leaf.gold_title for leaf in leaf_questions([*TRAIN_IDS, *DEV_IDS])}
    corpus = load_corpus()
    chosen = [doc for doc in corpus if doc.title in titles]
    assert len(chosen) >= 6
    chosen += [doc for doc in corpus[::400] if doc.title not in titles][: 30 - len(chosen)]
    path = tmp_path_factory.mktemp("evaluator_tools") / "chroma"
    report = ingest_documents(
        chosen, open_store(path, "crag", load_embeddings(), create=True), QUIET
    )
    assert not report.failed
    return path


@pytest.mark.integration
def test_pairs_command_writes_labelled_pairs(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "train.jsonl"
    ids = ids_file(tmp_path, TRAIN_IDS, "train_ids.json")
    argv = ["pairs", "--split", "train", "--ids", str(ids), "--k", "5"]
    assert run([*argv, "--store", str(store), "--out", str(out)]) == 0
    pairs = read_pairs([out])
    leaves = leaf_questions(list(TRAIN_IDS))
    assert pairs and {p.label for p in pairs} == {1, -1}
    assert {p.question_id for p in pairs} <= {leaf.id for leaf in leaves}
    assert all(p.rank is None or 0 <= p.rank < 5 for p in pairs)
    text = capsys.readouterr().out
    assert f"wrote {len(pairs)} pairs" in text and f"{len(leaves)} leaf questions" in text


@pytest.mark.integration
def test_pairs_command_refuses_held_out_and_other_split_ids(store: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "x.jsonl")
    held = ids_file(tmp_path, [TRAIN_IDS[0], held_out_id()], "held.json")
    with pytest.raises(ValueError, match="held out"):
        run(["pairs", "--split", "train", "--ids", str(held), "--store", str(store), "--out", out])
    dev = ids_file(tmp_path, DEV_IDS, "dev.json")
    with pytest.raises(ValueError, match="not in the train split"):
        run(["pairs", "--split", "train", "--ids", str(dev), "--store", str(store), "--out", out])
    assert not Path(out).exists()


@pytest.mark.integration
def test_report_json_on_dev_ids(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = ids_file(tmp_path, DEV_IDS, "dev_ids.json")
    argv = ["report", "--json", "--ids", str(ids), "--k", "5", "--store", str(store)]
    assert run(argv) == 0
    (report,) = json.loads(capsys.readouterr().out)
    leaves = leaf_questions(list(DEV_IDS))
    assert report["backend"] == "embedding" and report["k"] == 5
    assert report["questions"] == len(leaves)
    assert report["top_level_questions"] == 2
    assert sum(sum(row.values()) for row in report["table"].values()) == len(leaves)
    assert report["gold_in_top_k"] == sum(row["gold_in_top_k"] for row in report["table"].values())
    assert report["agreement"] == pytest.approx(report["agreeing"] / len(leaves))
    assert 0 < report["questions_with_gold"] < len(leaves)
    assert report["pairs"] == report["positives"] + report["negatives"] > 0
    assert 0.0 <= report["auc"] <= 1.0 and 0.0 <= report["pair_accuracy"] <= 1.0
    # the table form prints too
    assert run(["report", "--ids", str(ids), "--k", "5", "--store", str(store)]) == 0
    assert "agreement" in capsys.readouterr().out


def test_report_refuses_held_out_ids_and_missing_models(tmp_path: Path) -> None:
    held = ids_file(tmp_path, [held_out_id()], "held.json")
    with pytest.raises(ValueError, match="held out"):
        run(["report", "--ids", str(held)])
    dev = ids_file(tmp_path, DEV_IDS, "dev.json")
    with pytest.raises(ValueError, match="--model t5=PATH"):
        run(["report", "--ids", str(dev), "--backends", "embedding,t5"])
    with pytest.raises(ValueError, match="BACKEND=PATH"):
        run(["report", "--ids", str(dev), "--model", "t5"])


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


CALIBRATION_ROWS = [
    {"question": "Who painted the Mona Lisa?", "passage": p, "label": y}
    for p, y in [
        ("The Mona Lisa is a portrait painted by Leonardo da Vinci.", 1),
        ("Leonardo da Vinci painted the Mona Lisa in Florence.", 1),
        ("Photosynthesis converts light into chemical energy in plants.", -1),
        ("The Pacific Ocean is the largest ocean on Earth.", -1),
        ("Mount Everest is the highest mountain above sea level.", -1),
    ]
] + [
    {"question": "What is photosynthesis?", "passage": p, "label": y}
    for p, y in [
        ("Photosynthesis is how plants turn light, water and CO2 into sugar.", 1),
        ("The Louvre is the world's most visited museum, in Paris.", -1),
    ]
]


@pytest.mark.integration
def test_calibrate_command_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pairs = write_jsonl(tmp_path / "cal.jsonl", CALIBRATION_ROWS)
    argv = ["calibrate", "--evaluator", "embedding", "--pairs", str(pairs)]
    assert run([*argv, "--target-precision", "0.9", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["pairs"] == 7 and result["positives"] == 3 and result["negatives"] == 4
    assert result["correct"] + result["ambiguous"] + result["incorrect"] == 7
    assert result["lower"] <= result["upper"]
    assert result["auc"] == 1.0  # the embedding evaluator separates these easily
    assert result["upper_fitted"] and result["lower_fitted"] and not result["used_defaults"]
    assert result["arguments"].startswith("--set evaluator=embedding --set upper_threshold=")
    assert run(argv) == 0
    text = capsys.readouterr().out
    assert "--set upper_threshold=" in text and "Correct / Ambiguous / Incorrect" in text


def test_calibrate_refuses_pairs_of_held_out_questions(tmp_path: Path) -> None:
    held = leaf_questions([held_out_id()])[0]
    rows = [{**row, "question_id": held.id} for row in CALIBRATION_ROWS]
    pairs = write_jsonl(tmp_path / "held.jsonl", rows)
    with pytest.raises(ValueError, match="held-out"):
        run(["calibrate", "--evaluator", "embedding", "--pairs", str(pairs)])


def test_train_command_calls_the_trainer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import crag_bench.evaluator_training.trainer as trainer
    from crag_bench.evaluator_training.options import TrainingOptions

    calls: list[tuple[Any, ...]] = []

    def fake_train(
        kind: str, pairs: Any, out_dir: Path, options: TrainingOptions
    ) -> dict[str, Any]:
        calls.append((kind, list(pairs), out_dir, options))
        return {"steps": 3}

    monkeypatch.setattr(trainer, "train_evaluator", fake_train)
    train_leaf = leaf_questions([TRAIN_IDS[0]])[0]
    rows = [{**row, "question_id": train_leaf.id} for row in CALIBRATION_ROWS]
    pairs = write_jsonl(tmp_path / "train.jsonl", rows)
    argv = ["train", "--kind", "cross-encoder", "--pairs", str(pairs), "--out", str(tmp_path / "m")]
    assert run([*argv, "--epochs", "2", "--batch-size", "4", "--seed", "7", "--no-resume"]) == 0
    ((kind, got, out_dir, options),) = calls
    assert (kind, len(got), out_dir) == ("cross-encoder", 7, tmp_path / "m")
    assert options == TrainingOptions(
        base_model=None,
        epochs=2,
        batch_size=4,
        seed=7,
        resume=False,
        progress=True,
    )
    assert "--set evaluator=cross-encoder" in capsys.readouterr().out

    dev_leaf = leaf_questions([DEV_IDS[0]])[0]
    write_jsonl(pairs, [{**row, "question_id": dev_leaf.id} for row in CALIBRATION_ROWS])
    assert run(argv) == 0
    assert "dev questions" in capsys.readouterr().out

    held = leaf_questions([held_out_id()])[0]
    write_jsonl(pairs, [{**row, "question_id": held.id} for row in CALIBRATION_ROWS])
    with pytest.raises(ValueError, match="held-out"):
        run(argv)
    assert len(calls) == 2


@pytest.mark.integration
def test_bench_minilm_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "--models", "minilm", "--pairs", "3", "--repeat", "1", "--json"]
    assert run(argv) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["model"] == "minilm" and result["pairs"] == 3 and result["repeats"] == 1
    assert result["device"] == "cpu" and result["torch_threads"] >= 1
    assert result["batched_pairs_per_s"] > 0 and result["per_pair_pairs_per_s"] > 0
    assert result["speedup"] == pytest.approx(
        result["batched_pairs_per_s"] / result["per_pair_pairs_per_s"]
    )
    assert result["max_score_difference"] < 1e-3  # batching does not change scores
    assert result["paper_way_pairs_per_s"] > 0
    assert result["speedup_vs_paper_way"] == pytest.approx(
        result["batched_pairs_per_s"] / result["paper_way_pairs_per_s"]
    )
    with pytest.raises(ValueError):
        run(["bench", "--models", "gpt"])
