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
from crag.evaluator.registry import load_evaluator
from crag_bench.evaluator_training import TrainingOptions, train_evaluator
from tests.bench.test_training import FAST, PAIRS, tiny_bert  # noqa: F401 - fixture
from tests.process_caches import clear_evaluator_cache


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
    with pytest.raises(EvaluatorError, match="no cross-encoder weights ship"):
        shipped.shipped_folder(tmp_path / "cache3")


@pytest.mark.integration  # the prior reads the installed MiniLM embedder
def test_cross_encoder_without_a_model_loads_the_shipped_delta(
    tiny_shipped: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``evaluator=cross-encoder`` with no ``evaluator_model``: the shipped delta, built once."""
    monkeypatch.setenv("CRAG_CACHE_DIR", str(tmp_path / "crag-cache"))
    clear_evaluator_cache()
    try:
        default = load_evaluator("cross-encoder")
        trained = load_evaluator("cross-encoder", model=str(tiny_shipped))
        assert isinstance(default, PriorCrossEncoderEvaluator)
        assert (tmp_path / "crag-cache" / "models").is_dir()  # built in the cache
        question = PAIRS[0].question
        texts = [p.passage for p in PAIRS[:6]]
        assert default.score(question, texts) == pytest.approx(
            trained.score(question, texts), abs=5e-3
        )
    finally:
        clear_evaluator_cache()


WEIGHTS_README = shipped.WEIGHTS_DIR / "README.md"
NONE_SHIP = "**No weights ship today.**"


def test_what_ships_is_what_the_weights_readme_says() -> None:
    """The checkout's own weights, checked for what they are (this used to skip when none ship).

    None ship today (``evaluator/weights/README.md``): the cross-encoder without a model then
    says, in one line, that no weights ship and how to name a checkpoint. Once weights
    ship, that README changes and the weights must prefer the README's answering sentence.
    """
    clear_evaluator_cache()
    none_ship = NONE_SHIP in WEIGHTS_README.read_text(encoding="utf-8")
    assert shipped.shipped_available() is not none_ship, (
        f"{WEIGHTS_README} says weights ship {'not ' if none_ship else ''}but the checkout "
        f"{'has' if shipped.shipped_available() else 'lacks'} {shipped.DELTA_FILE.name}"
    )
    if none_ship:
        with pytest.raises(EvaluatorError) as missing:
            load_evaluator("cross-encoder")
        message = str(missing.value)
        assert "no cross-encoder weights ship" in message and "evaluator_model" in message
        assert "\n" not in message
        return
    _assert_prefers_the_answering_sentence(load_evaluator("cross-encoder"))


def _assert_prefers_the_answering_sentence(evaluator: object) -> None:
    """The shipped weights on the installed MiniLM: the README's Mona Lisa strips."""
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
