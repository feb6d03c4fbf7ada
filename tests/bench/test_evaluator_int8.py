"""int8 dynamic quantisation of the cross-encoder and T5 evaluators (tiny offline checkpoints)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from langchain_core.language_models import BaseChatModel

from crag.evaluator.base import EvaluatorError
from crag.evaluator.cross_encoder import CrossEncoderEvaluator, check_int8_device, quantize_int8
from crag.evaluator.registry import load_evaluator
from crag.evaluator.t5 import T5Evaluator
from crag.settings.deployment import deployment_with
from crag_bench.evaluator_bench import LocalT5Scorer, int8_copy, time_modes
from tests.fakes import scripted_chat
from tests.unit.test_evaluator import PASSAGES, QUESTION

DynamicLinear = torch.ao.nn.quantized.dynamic.Linear

# Largest |int8 - float| score on PASSAGES, measured with seed 0: 0.072 for the tiny
# cross-encoder (hidden size 32, deliberately large random weights; 0.07-0.10 over seeds 0-4)
# and 0.010 for the tiny T5 (0.009-0.022); the bounds leave room for other CPUs' int8 kernels.
CE_TOLERANCE = 0.15
T5_TOLERANCE = 0.05


@pytest.fixture(scope="module")
def ce_pair(tiny_ce: Path) -> tuple[CrossEncoderEvaluator, CrossEncoderEvaluator]:
    return (
        CrossEncoderEvaluator(str(tiny_ce), batch_size=3, device="cpu"),
        CrossEncoderEvaluator(str(tiny_ce), batch_size=3, device="cpu", int8=True),
    )


@pytest.fixture(scope="module")
def t5_pair(tiny_t5: Path) -> tuple[T5Evaluator, T5Evaluator]:
    return (
        T5Evaluator(str(tiny_t5), batch_size=3, device="cpu"),
        T5Evaluator(str(tiny_t5), batch_size=3, device="cpu", int8=True),
    )


def linear_types(module: torch.nn.Module) -> tuple[int, int]:
    """(float ``torch.nn.Linear`` layers, int8 dynamically quantised linears) in ``module``."""
    modules = list(module.modules())
    floats = sum(1 for m in modules if isinstance(m, torch.nn.Linear))
    return floats, sum(1 for m in modules if isinstance(m, DynamicLinear))


def check_close(float_scores: list[float], int8_scores: list[float], tolerance: float) -> None:
    assert len(int8_scores) == len(float_scores) == len(PASSAGES)
    assert all(isinstance(s, float) and -1.0 <= s <= 1.0 for s in int8_scores)
    differences = [abs(a - b) for a, b in zip(float_scores, int8_scores, strict=True)]
    assert max(differences) < tolerance
    assert max(differences) > 0.0  # the model really changed


# --------------------------------------------------------------------------- cross-encoder


def test_cross_encoder_int8_scores_are_close_to_float(
    ce_pair: tuple[CrossEncoderEvaluator, CrossEncoderEvaluator],
) -> None:
    plain, int8 = ce_pair
    assert (plain.int8, int8.int8) == (False, True)
    assert int8.dtype == torch.float32 and "int8=True" in repr(int8)
    check_close(plain.score(QUESTION, PASSAGES), int8.score(QUESTION, PASSAGES), CE_TOLERANCE)
    assert int8.score(QUESTION, ["", "  "]) == [-1.0, -1.0]


def test_cross_encoder_int8_replaces_every_linear(
    ce_pair: tuple[CrossEncoderEvaluator, CrossEncoderEvaluator],
) -> None:
    plain, int8 = ce_pair
    floats, quantised = linear_types(plain._model)
    assert floats > 0 and quantised == 0
    # 2 layers x (q, k, v, attention output, intermediate, output) + pooler + classifier
    assert linear_types(int8._model) == (0, floats) == (0, 14)
    assert type(int8._model.model.classifier) is DynamicLinear


# --------------------------------------------------------------------------- T5


def test_t5_int8_scores_are_close_to_float(t5_pair: tuple[T5Evaluator, T5Evaluator]) -> None:
    plain, int8 = t5_pair
    assert (plain.int8, int8.int8) == (False, True)
    assert "int8=True" in repr(int8)
    check_close(plain.score(QUESTION, PASSAGES), int8.score(QUESTION, PASSAGES), T5_TOLERANCE)


def test_t5_int8_replaces_every_linear(t5_pair: tuple[T5Evaluator, T5Evaluator]) -> None:
    plain, int8 = t5_pair
    floats, quantised = linear_types(plain._model)
    assert floats > 0 and quantised == 0
    assert linear_types(int8._model) == (0, floats)
    assert type(int8._model.classification_head.out_proj) is DynamicLinear


def test_t5_int8_needs_float32(tiny_t5: Path) -> None:
    with pytest.raises(EvaluatorError, match="float32"):
        T5Evaluator(str(tiny_t5), device="cpu", dtype=torch.bfloat16, int8=True)


# --------------------------------------------------------------------------- devices


def test_int8_is_refused_on_cuda_without_touching_a_gpu(tiny_ce: Path, tiny_t5: Path) -> None:
    message = "int8 quantisation is for CPU; on CUDA the evaluator already runs in bf16"
    with pytest.raises(EvaluatorError, match=message):
        check_int8_device("cuda")
    with pytest.raises(EvaluatorError, match=message):
        check_int8_device(torch.device("cuda", 0))
    with pytest.raises(EvaluatorError, match="for CPU, not meta"):
        check_int8_device("meta")
    check_int8_device("cpu")
    # The constructors check before loading anything onto the device.
    with pytest.raises(EvaluatorError, match=message):
        CrossEncoderEvaluator(str(tiny_ce), device="cuda", int8=True)
    with pytest.raises(EvaluatorError, match=message):
        T5Evaluator(str(tiny_t5), device="cuda", int8=True)


def test_quantize_int8_is_quiet_and_refuses_non_float32() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the deprecation warnings are silenced inside
        assert quantize_int8(model) == 2
    assert linear_types(model) == (0, 2)
    assert model(torch.randn(3, 8)).shape == (3, 1)
    with pytest.raises(EvaluatorError, match="float32 model on the CPU, got bfloat16"):
        quantize_int8(torch.nn.Linear(4, 4).to(torch.bfloat16))


# --------------------------------------------------------------------------- registry


def test_registry_passes_int8_and_caches_it_apart(
    tiny_ce: Path, tiny_t5: Path, fresh_registry: None
) -> None:
    for name, path, kind in (
        ("cross-encoder", tiny_ce, CrossEncoderEvaluator),
        ("t5", tiny_t5, T5Evaluator),
    ):
        plain = load_evaluator(name, model=str(path), batch_size=4)
        int8 = load_evaluator(name, model=str(path), batch_size=4, int8=True)
        assert isinstance(plain, kind) and isinstance(int8, kind)
        assert (plain.int8, int8.int8) == (False, True)
        assert int8 is not plain
        assert load_evaluator(name, model=str(path), batch_size=4, int8=True) is int8
        assert load_evaluator(name, model=str(path), batch_size=4) is plain
        assert linear_types(int8._model)[0] == 0


def test_registry_ignores_int8_for_the_llm(
    monkeypatch: pytest.MonkeyPatch, fresh_registry: None
) -> None:
    import crag.generator.factory

    chat = scripted_chat()
    loads: list[str] = []

    def fake_load(spec: str, max_new_tokens: int = 128, **_: object) -> BaseChatModel:
        loads.append(spec)
        return chat

    monkeypatch.setattr(crag.generator.factory, "load_chat_model", fake_load)
    assert load_evaluator("llm", int8=True) is load_evaluator("llm")
    assert loads == ["smollm2"]


# --------------------------------------------------------------------------- bench


def test_bench_int8_copy_leaves_the_float_model_alone(
    ce_pair: tuple[CrossEncoderEvaluator, CrossEncoderEvaluator], tiny_t5: Path
) -> None:
    plain, _ = ce_pair
    twin = int8_copy(plain)
    assert twin.int8 and not plain.int8
    assert linear_types(twin._model)[0] == 0 and linear_types(plain._model)[1] == 0
    pairs = [(QUESTION, passage) for passage in PASSAGES]
    timings = time_modes(plain, pairs, repeats=2, int8_scorer=twin)
    assert timings.batched_seconds > 0 and timings.per_pair_seconds > 0
    assert timings.int8_seconds is not None and timings.int8_seconds > 0
    assert timings.max_score_difference < 1e-4
    assert timings.max_int8_score_difference is not None
    assert 0.0 < timings.max_int8_score_difference < CE_TOLERANCE
    assert time_modes(plain, pairs).int8_seconds is None

    from transformers import AutoTokenizer, T5ForSequenceClassification

    model = T5ForSequenceClassification.from_pretrained(str(tiny_t5))
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_t5))
    scorer = LocalT5Scorer(model, tokenizer, eos_id=1, pad_id=0, batch_size=3)
    t5_twin = int8_copy(scorer)
    assert linear_types(t5_twin._model)[0] == 0 and linear_types(scorer._model)[1] == 0
    t5_timings = time_modes(scorer, pairs, int8_scorer=t5_twin)
    assert t5_timings.max_int8_score_difference is not None
    assert 0.0 < t5_timings.max_int8_score_difference < T5_TOLERANCE


@pytest.mark.integration
def test_bench_cli_reports_the_int8_mode(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from crag_bench.evaluator_cli import add_evaluator_commands

    parser = argparse.ArgumentParser(prog="crag")
    add_evaluator_commands(parser.add_subparsers(dest="command", required=True))
    argv = ["evaluator", "bench", "--models", "minilm", "--pairs", "3", "--repeat", "1"]
    args = parser.parse_args([*argv, "--json"])
    assert args.func(args) == 0
    (result,) = json.loads(capsys.readouterr().out)
    check_bench_fields(result)
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "batched int8" in text and "int8 / float batched" in text
    assert "int8 batched / paper's way" in text


def check_bench_fields(result: dict[str, Any]) -> None:
    assert result["batched_int8_pairs_per_s"] > 0 and result["int8_build_seconds"] > 0
    assert result["batched_int8_pairs_per_s"] == pytest.approx(
        result["pairs"] / result["batched_int8_seconds"]
    )
    assert result["speedup_int8_vs_paper_way"] == pytest.approx(
        result["batched_int8_pairs_per_s"] / result["paper_way_pairs_per_s"]
    )
    assert result["speedup_int8_vs_batched"] == pytest.approx(
        result["batched_int8_pairs_per_s"] / result["batched_pairs_per_s"]
    )
    # A random MiniLM head: int8 drifts a little, but not by much.
    assert 0.0 < result["max_int8_score_difference"] < 0.1


def test_the_evaluator_int8_setting_reaches_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    import crag.evaluator.registry
    from crag.app.wiring import DefaultComponents
    from crag.settings.run_settings import RunSettings
    from tests.fakes import FixedScoreEvaluator

    seen: list[dict[str, object]] = []

    def fake_load(name: str, **kwargs: object) -> FixedScoreEvaluator:
        seen.append({"name": name, **kwargs})
        return FixedScoreEvaluator({})

    monkeypatch.setattr(crag.evaluator.registry, "load_evaluator", fake_load)
    components = DefaultComponents()
    components.evaluator(
        RunSettings(deployment=deployment_with(evaluator="cross-encoder", evaluator_int8=True))
    )
    components.evaluator(RunSettings(deployment=deployment_with(evaluator="cross-encoder")))
    assert [s["int8"] for s in seen] == [True, False]
