"""Partial training (top layers, frozen embeddings, LoRA), the embedding prior, length grouping."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from crag.evaluator.prior_cross_encoder import PriorCrossEncoderEvaluator
from crag.evaluator.registry import load_evaluator
from crag_bench.evaluator_training import METADATA_FILE, TrainingError, TrainingOptions
from crag_bench.evaluator_training.data import epoch_order
from crag_bench.evaluator_training.trainer import train_evaluator
from tests.bench.test_training import FAST, PAIRS, class_means, tiny_bert  # noqa: F401 - fixture
from tests.process_caches import clear_evaluator_cache

BASE_KEYS = ("embeddings.word_embeddings.weight", "encoder.layer.0.attention.self.query.weight")


def trained(folder: Path) -> dict[str, torch.Tensor]:
    return {
        k.removeprefix("bert."): v for k, v in load_file(str(folder / "model.safetensors")).items()
    }


def test_top_layers_and_frozen_embeddings_leave_the_rest_as_the_base(
    tiny_bert: Path,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    base = load_file(str(tiny_bert / "model.safetensors"))
    options = TrainingOptions(base_model=str(tiny_bert), epochs=2, train_layers=1, **FAST)
    result = train_evaluator("cross-encoder", PAIRS, tmp_path / "top1", options)
    weights = trained(tmp_path / "top1")
    for key in BASE_KEYS:  # embeddings and the lower layer are frozen
        assert torch.equal(weights[key], base[key])
    top = "encoder.layer.1.attention.self.query.weight"
    assert not torch.equal(weights[top], base[top])
    assert 0 < result.trainable_parameters < sum(v.numel() for v in weights.values())

    frozen = TrainingOptions(base_model=str(tiny_bert), epochs=2, freeze_embeddings=True, **FAST)
    train_evaluator("cross-encoder", PAIRS, tmp_path / "frozen", frozen)
    weights = trained(tmp_path / "frozen")
    assert torch.equal(weights[BASE_KEYS[0]], base[BASE_KEYS[0]])
    assert not torch.equal(weights[BASE_KEYS[1]], base[BASE_KEYS[1]])
    meta = json.loads((tmp_path / "frozen" / METADATA_FILE).read_text(encoding="utf-8"))
    assert meta["freeze_embeddings"] is True and meta["train_layers"] is None


def test_lora_adapters_train_and_merge_into_a_plain_model(
    tiny_bert: Path,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    pytest.importorskip("peft")
    from sentence_transformers import CrossEncoder

    options = replace(
        TrainingOptions(base_model=str(tiny_bert), epochs=12, lora_rank=4, **FAST),
        learning_rate=1e-2,
    )
    result = train_evaluator("cross-encoder", PAIRS, tmp_path / "lora", options)
    assert result.finished and result.epoch_losses[-1] < result.epoch_losses[0]
    weights = trained(tmp_path / "lora")
    assert not any("lora" in key for key in weights)  # merged: a plain BERT
    model = CrossEncoder(str(tmp_path / "lora"), device="cpu")
    scores = [float(s) for s in model.predict([(p.question, p.passage) for p in PAIRS])]
    positive, negative = class_means(scores, PAIRS)
    assert positive > negative


def test_lora_runs_resume_from_their_adapter(
    tiny_bert: Path,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    pytest.importorskip("peft")
    options = TrainingOptions(
        base_model=str(tiny_bert), epochs=2, lora_rank=4, checkpoint_every=3, **FAST
    )
    first = train_evaluator(
        "cross-encoder", PAIRS, tmp_path / "cut", replace(options, stop_after=4)
    )
    assert not first.finished
    second = train_evaluator("cross-encoder", PAIRS, tmp_path / "cut", options)
    assert second.resumed_from_step == 4 and second.finished


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"train_layers": -1}, "train_layers must be 0 or more"),
        ({"lora_rank": -2}, "lora_rank must be 0 or more"),
        ({"lora_rank": 4, "train_layers": 1}, "choose one of lora_rank and train_layers"),
        ({"train_layers": 9}, "the model has 2 layers"),
    ],
)
def test_partial_training_options_are_checked(
    changes: dict[str, int],
    message: str,
    tiny_bert: Path,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    options = TrainingOptions(base_model=str(tiny_bert), **FAST, **changes)  # type: ignore[arg-type]
    with pytest.raises(TrainingError, match=message):
        train_evaluator("cross-encoder", PAIRS, tmp_path / "bad", options)


def test_partial_training_is_for_the_cross_encoder_only(tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match="cross-encoder only"):
        train_evaluator("t5", PAIRS, tmp_path / "t5", TrainingOptions(prior=True))


def test_prior_run_records_its_map_and_loads_as_a_prior_evaluator(
    tiny_bert: Path,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    out = tmp_path / "prior"
    options = TrainingOptions(base_model=str(tiny_bert), epochs=3, prior=True, **FAST)
    train_evaluator("cross-encoder", PAIRS, out, options)
    meta = json.loads((out / METADATA_FILE).read_text(encoding="utf-8"))
    assert meta["output"] == "logit" and meta["prior"]["slope"] > 0
    clear_evaluator_cache()
    try:
        evaluator = load_evaluator("cross-encoder", model=str(out))
        assert isinstance(evaluator, PriorCrossEncoderEvaluator)
        scores = [evaluator.score(p.question, [p.passage])[0] for p in PAIRS]
        positive, negative = class_means(scores, PAIRS)
        assert positive > negative
        # one scale: a text scores the same as a passage and as a strip or web paragraph
        from crag.evaluator.base import score_strips

        texts = [p.passage for p in PAIRS[:4]]
        assert score_strips(evaluator, PAIRS[0].question, texts) == evaluator.score(
            PAIRS[0].question, texts
        )
        # the correction is the cross-encoder's raw output added to the prior's logit
        raw = evaluator.cross_encoder.raw_outputs(PAIRS[0].question, texts)
        assert len(raw) == 4 and all(
            -1 <= s <= 1 for s in evaluator.score(PAIRS[0].question, texts)
        )
    finally:
        clear_evaluator_cache()


def test_length_grouped_order_is_a_permutation_with_full_batches_first() -> None:
    lengths = [(i * 37) % 23 for i in range(103)]
    order = epoch_order(103, seed=1, epoch=0, lengths=lengths, batch_size=8)
    assert sorted(order) == list(range(103))
    assert order == epoch_order(103, seed=1, epoch=0, lengths=lengths, batch_size=8)
    assert order != epoch_order(103, seed=1, epoch=1, lengths=lengths, batch_size=8)
    batches = [order[i : i + 8] for i in range(0, 103, 8)]
    spread = [max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches[:-1]]
    assert sum(spread) / len(spread) < 8  # similar lengths share a batch
    assert len(batches[-1]) == 103 % 8  # the short batch is last


def test_listwise_run_ranks_each_question_and_records_its_calibration(
    tiny_bert: Path,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    out = tmp_path / "listwise"
    options = replace(
        TrainingOptions(base_model=str(tiny_bert), epochs=6, prior=True, loss="listwise", **FAST),
        batch_size=2,
    )
    result = train_evaluator("cross-encoder", PAIRS, out, options)
    assert result.finished and result.steps == 6 * 5  # 9 questions, 2 a step
    meta = json.loads((out / METADATA_FILE).read_text(encoding="utf-8"))
    assert meta["loss"] == "listwise" and set(meta["correction"]) == {
        "prior_weight",
        "weight",
        "bias",
    }
    clear_evaluator_cache()
    try:
        evaluator = load_evaluator("cross-encoder", model=str(out))
        assert isinstance(evaluator, PriorCrossEncoderEvaluator)
        assert evaluator.correction == tuple(meta["correction"].values())
        for index in range(0, len(PAIRS), 4):  # each question's positive ranks first
            group = PAIRS[index : index + 4]
            scores = evaluator.score(group[0].question, [p.passage for p in group])
            assert scores[0] == max(scores)
    finally:
        clear_evaluator_cache()
    with pytest.raises(TrainingError, match="set prior"):
        train_evaluator("cross-encoder", PAIRS, tmp_path / "x", TrainingOptions(loss="listwise"))
