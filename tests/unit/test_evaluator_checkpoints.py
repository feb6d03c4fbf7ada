"""What the T5 and the cross-encoder evaluators both do, on tiny offline checkpoints.

Each test runs once per backend; what only one of them does is tested in ``test_evaluator.py``
(T5) and ``test_evaluator_backends.py`` (cross-encoder).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from crag.evaluator.base import EvaluatorError, RetrievalEvaluator
from crag.evaluator.cross_encoder import CrossEncoderEvaluator
from crag.evaluator.registry import load_evaluator
from crag.evaluator.t5 import T5Evaluator
from tests.tiny_cross_encoder import build_tiny_cross_encoder
from tests.tiny_t5 import build_tiny_t5
from tests.unit.test_evaluator import MONA_LISA, PASSAGES, QUESTION

CheckpointEvaluator = T5Evaluator | CrossEncoderEvaluator


@dataclass(frozen=True)
class Backend:
    """One checkpoint backend and what its tests need to know about it."""

    name: str
    """Its registry name, also the evaluator's ``name``."""
    cls: type[T5Evaluator] | type[CrossEncoderEvaluator]
    logger: str
    spelling: str
    """Another spelling of ``name`` the registry accepts."""
    batch_size: int
    """Batch size of the shared evaluator."""
    build: Callable[..., Path]
    """Writes a tiny checkpoint: ``build(path, num_labels=...)``."""
    model_call: Callable[[CheckpointEvaluator], tuple[object, str]]
    """The object and attribute through which the evaluator runs its model."""


BACKENDS = [
    Backend(
        name="t5",
        cls=T5Evaluator,
        logger="crag.evaluator.t5",
        spelling="T5",
        batch_size=8,
        build=build_tiny_t5,
        model_call=lambda ev: (ev, "_forward"),
    ),
    Backend(
        name="cross-encoder",
        cls=CrossEncoderEvaluator,
        logger="crag.evaluator.cross_encoder",
        spelling=" Cross-Encoder ",
        batch_size=3,
        build=build_tiny_cross_encoder,
        model_call=lambda ev: (ev._model, "predict"),
    ),
]


@pytest.fixture(scope="module", params=BACKENDS, ids=[b.name for b in BACKENDS])
def backend(request: pytest.FixtureRequest) -> Backend:
    chosen: Backend = request.param
    return chosen


@pytest.fixture(scope="module")
def checkpoint(backend: Backend, tiny_t5: Path, tiny_ce: Path) -> Path:
    return tiny_t5 if backend.name == "t5" else tiny_ce


@pytest.fixture(scope="module")
def evaluator(backend: Backend, checkpoint: Path) -> CheckpointEvaluator:
    return backend.cls(str(checkpoint), batch_size=backend.batch_size, device="cpu")


def test_is_a_retrieval_evaluator(backend: Backend, evaluator: CheckpointEvaluator) -> None:
    assert isinstance(evaluator, RetrievalEvaluator)
    assert evaluator.name == backend.name
    assert evaluator.device.type == "cpu"
    assert evaluator.dtype == torch.float32
    assert not evaluator._model.training


def test_scores_are_floats_in_range_one_per_passage(evaluator: CheckpointEvaluator) -> None:
    scores = evaluator.score(QUESTION, PASSAGES)
    assert len(scores) == len(PASSAGES)
    assert all(type(s) is float and -1.0 <= s <= 1.0 for s in scores)
    # The tiny model is random, but its scores must differ, or the order checks prove nothing.
    # (Exact floats: rounding to 4 places merged two close scores in one full-suite run.)
    assert len(set(scores)) == len(scores)
    assert sum(-1.0 < s < 1.0 for s in scores) >= len(scores) - 1


def test_batched_scores_keep_the_original_order(evaluator: CheckpointEvaluator) -> None:
    batched = evaluator.score(QUESTION, PASSAGES)
    single = [evaluator.score(QUESTION, [p])[0] for p in PASSAGES]
    assert batched == pytest.approx(single, abs=1e-5)
    reversed_scores = evaluator.score(QUESTION, PASSAGES[::-1])
    assert reversed_scores[::-1] == pytest.approx(batched, abs=1e-5)


@pytest.mark.parametrize("batch_size", [1, 64])
def test_batch_size_does_not_change_scores(
    backend: Backend, checkpoint: Path, evaluator: CheckpointEvaluator, batch_size: int
) -> None:
    other = backend.cls(str(checkpoint), batch_size=batch_size, device="cpu")
    assert other.score(QUESTION, PASSAGES) == pytest.approx(
        evaluator.score(QUESTION, PASSAGES), abs=1e-5
    )


def test_empty_passages(
    backend: Backend, evaluator: CheckpointEvaluator, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert evaluator.score(QUESTION, []) == []
    expected = evaluator.score(QUESTION, [MONA_LISA])[0]
    assert evaluator.score(QUESTION, ["", MONA_LISA, "  \n\t"]) == pytest.approx(
        [-1.0, expected, -1.0], abs=1e-5
    )

    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model must not run for empty passages")

    monkeypatch.setattr(*backend.model_call(evaluator), no_model)
    assert evaluator.score(QUESTION, ["", " "]) == [-1.0, -1.0]


def test_rejects_a_single_string(evaluator: CheckpointEvaluator) -> None:
    with pytest.raises(EvaluatorError, match="sequence"):
        evaluator.score(QUESTION, MONA_LISA)


def test_long_passage_is_truncated_and_scored(
    backend: Backend, checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ev = backend.cls(str(checkpoint), max_length=32, device="cpu")
    assert ev.max_length == 32
    head = MONA_LISA  # already longer than 32 tokens with the tiny vocabularies
    long_a = head + " apple" * 3000
    long_b = head + " zebra" * 3000
    with caplog.at_level(logging.DEBUG, logger=backend.logger):
        scores = ev.score(QUESTION, ["Paris.", long_a, long_b])
    assert all(-1.0 <= s <= 1.0 for s in scores)
    assert scores[1] == pytest.approx(scores[2], abs=1e-6)  # only the kept prefix counts
    assert "passage 1 truncated" in caplog.text
    assert "passage 2 truncated" in caplog.text
    assert "passage 0 truncated" not in caplog.text


def test_missing_directory(backend: Backend, tmp_path: Path) -> None:
    with pytest.raises(EvaluatorError, match="does not exist"):
        backend.cls(str(tmp_path / "no" / "such" / "checkpoint"))
    with pytest.raises(EvaluatorError, match="does not exist"):
        backend.cls("./relative/../path")


def test_not_a_checkpoint(backend: Backend, tmp_path: Path) -> None:
    with pytest.raises(EvaluatorError, match="not a model checkpoint"):
        backend.cls(str(tmp_path))
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(EvaluatorError, match="is a file"):
        backend.cls(str(tmp_path / "weights.bin"))


def test_two_labels_are_rejected(backend: Backend, tmp_path: Path) -> None:
    backend.build(tmp_path, num_labels=2)
    with pytest.raises(EvaluatorError, match="num_labels=2"):
        backend.cls(str(tmp_path))


def test_unreachable_hub(backend: Backend) -> None:
    # conftest sets HF_HUB_OFFLINE=1: the hub cannot be reached, as on an offline machine.
    with pytest.raises(EvaluatorError, match=r"from the hub \(offline\?\)"):
        backend.cls(f"someone/crag-{backend.name}-that-is-not-cached")


def test_bad_arguments(backend: Backend, checkpoint: Path) -> None:
    with pytest.raises(EvaluatorError, match="batch_size"):
        backend.cls(str(checkpoint), batch_size=0)
    with pytest.raises(EvaluatorError, match="max_length"):
        backend.cls(str(checkpoint), max_length=1)
    with pytest.raises(EvaluatorError, match="device"):
        backend.cls(str(checkpoint), device="not-a-device")


# --------------------------------------------------------------------------- registry


@pytest.mark.parametrize("model", ["", "  "])
def test_registry_needs_a_model(backend: Backend, model: str) -> None:
    if backend.name == "cross-encoder":
        pytest.skip("the cross-encoder without a checkpoint is the shipped one")
    with pytest.raises(EvaluatorError, match=f"{backend.name} evaluator needs evaluator_model"):
        load_evaluator(backend.name, model=model)


def test_registry_loads_and_caches(
    backend: Backend, checkpoint: Path, fresh_registry: None
) -> None:
    ev = load_evaluator(backend.name, model=str(checkpoint), batch_size=4)
    assert isinstance(ev, backend.cls)
    assert ev.batch_size == 4
    assert load_evaluator(backend.spelling, model=str(checkpoint), batch_size=4) is ev
    assert load_evaluator(backend.name, model=str(checkpoint), batch_size=2) is not ev
    scores = ev.score(QUESTION, PASSAGES)
    assert len(scores) == len(PASSAGES)
    assert all(-1.0 <= s <= 1.0 for s in scores)


def test_registry_load_errors_are_evaluator_errors(backend: Backend, tmp_path: Path) -> None:
    with pytest.raises(EvaluatorError, match="does not exist"):
        load_evaluator(backend.name, model=str(tmp_path / "missing"))
