"""The shipped evaluator: a delta over the base model, built into the cache, loaded by default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import crag.evaluator.shipped as shipped
from crag.evaluator.base import EvaluatorError
from crag.evaluator.cross_encoder import CrossEncoderEvaluator
from crag.evaluator.prior_cross_encoder import PriorCrossEncoderEvaluator, prior_of
from crag_bench.evaluator_training import TrainingOptions, train_evaluator
from tests.bench.test_training import FAST, PAIRS, tiny_bert  # noqa: F401 - fixture


@pytest.fixture
def tiny_shipped(
    tiny_bert: Path,  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Path:
    """A prior cross-encoder trained from the tiny BERT, shipped as a delta over it."""
    trained = tmp_path / "trained"
    options = TrainingOptions(
        base_model=str(tiny_bert), epochs=3, prior=True, freeze_embeddings=True, **FAST
    )
    train_evaluator("cross-encoder", PAIRS, trained, options)
    delta = tmp_path / "weights" / "delta.safetensors"
    monkeypatch.setattr(shipped, "DELTA_FILE", delta)
    monkeypatch.setattr(shipped, "DELTA_METADATA_FILE", delta.with_suffix(".json"))
    monkeypatch.setattr(shipped, "_base_model_path", lambda: tiny_bert)
    written = shipped.write_delta(trained, delta, base=tiny_bert)
    assert 0 < written["parameters"] < 10**6
    return trained


def test_the_delta_holds_only_what_training_changed(
    tiny_shipped: Path,
    tiny_bert: Path,  # noqa: F811 - the fixture
) -> None:
    from safetensors import safe_open

    with safe_open(str(shipped.DELTA_FILE), framework="pt") as delta:
        keys = set(delta.keys())
        assert all(delta.get_tensor(k).dtype == torch.float16 for k in keys)
    assert "classifier.weight" in keys
    assert not any("word_embeddings" in k for k in keys)  # frozen: not copied
    meta = json.loads(shipped.DELTA_METADATA_FILE.read_text(encoding="utf-8"))
    assert meta["prior"]["slope"] > 0 and meta["base_sha256"]


def test_the_built_folder_scores_like_the_trained_one(tiny_shipped: Path, tmp_path: Path) -> None:
    folder = shipped.shipped_folder(tmp_path / "cache")
    assert shipped.shipped_folder(tmp_path / "cache") == folder  # built once
    built = CrossEncoderEvaluator(str(folder), device="cpu")
    original = CrossEncoderEvaluator(str(tiny_shipped), device="cpu")
    assert prior_of(built.metadata) == prior_of(original.metadata)
    question = PAIRS[0].question
    texts = [p.passage for p in PAIRS[:6]]
    assert built.raw_outputs(question, texts) == pytest.approx(
        original.raw_outputs(question, texts), abs=5e-3
    )  # float16 storage


def test_damaged_or_foreign_weights_are_refused(tiny_shipped: Path, tmp_path: Path) -> None:
    shipped.DELTA_FILE.write_bytes(b"not safetensors")
    with pytest.raises(EvaluatorError, match="damaged"):
        shipped.shipped_folder(tmp_path / "cache2")
    shipped.DELTA_FILE.unlink()
    with pytest.raises(EvaluatorError, match="missing"):
        shipped.shipped_folder(tmp_path / "cache3")


@pytest.mark.integration
def test_the_real_shipped_evaluator_prefers_the_answering_sentence() -> None:
    """The shipped weights on the installed MiniLM: the README's Mona Lisa strips."""
    if not shipped.shipped_available():
        pytest.skip("no shipped evaluator weights in this checkout")
    from crag.evaluator.registry import clear_evaluator_cache, load_evaluator

    clear_evaluator_cache()
    evaluator = load_evaluator("cross-encoder")
    assert isinstance(evaluator, PriorCrossEncoderEvaluator)
    question = "Who painted the Mona Lisa?"
    strips = [
        "Mona Lisa\nThe Mona Lisa is a half-length portrait painting by the Italian artist "
        "Leonardo da Vinci.",
        "Henri Matisse\nHenri Émile Benoît Matisse was a French visual artist, known for both "
        "his use of colour and his fluid and original draughtsmanship.",
        "Along the River During the Qingming Festival\nThe painting is considered to be the "
        "most renowned work among all Chinese paintings.",
    ]
    scores = evaluator.score(question, strips)
    assert scores[0] == max(scores) and scores[0] - max(scores[1:]) > 0.2
