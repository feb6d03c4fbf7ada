"""A local generator whose dtype is ``auto`` computes in float32 while it decodes in batches.

In bfloat16 a row decoded in a batch can get other tokens than it gets alone, so a served
answer would depend on what else runs; in float32 it does not. Here the CPU is made to look
bfloat16-capable, so that ``auto`` picks bfloat16 when batching is off whatever machine runs
the tests; the tiny Llama of :mod:`tests.tiny_causal_lm` stands in for SmolLM2 (the real one:
``tests/integration/test_batched_answers.py``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from crag.generator import local
from crag.generator.local import LocalChatModel
from crag.settings.deployment import deployment_with
from tests.tiny_causal_lm import build_tiny_causal_lm


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny_lm_dtype"))


@pytest.fixture(autouse=True)
def bfloat16_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` resolves as on a CPU with native bfloat16 arithmetic (this project's)."""
    monkeypatch.setattr(local, "cpu_has_native_bfloat16", lambda: True)


def test_auto_resolves_to_float32_only_under_batching() -> None:
    import torch

    assert local._torch_dtype("auto", "cpu") is torch.bfloat16
    assert local._torch_dtype("auto", "cuda") is torch.bfloat16
    assert local._torch_dtype("auto", "cpu", batching=True) is torch.float32
    assert local._torch_dtype("auto", "cuda", batching=True) is torch.float32
    assert local._torch_dtype("bfloat16", "cpu", batching=True) is torch.bfloat16
    assert local._torch_dtype("float32", "cpu") is torch.float32


def test_a_model_loaded_to_batch_loads_in_float32(tiny_lm: Path) -> None:
    import torch

    model = LocalChatModel(model_path=str(tiny_lm), max_new_tokens=4, max_batch_size=8)
    assert model._model.dtype == torch.float32


def test_turning_batching_on_loads_the_weights_again_in_float32(tiny_lm: Path) -> None:
    import torch

    model = LocalChatModel(model_path=str(tiny_lm), max_new_tokens=6)
    assert model._model.dtype == torch.bfloat16, "alone, auto keeps bfloat16"
    prompts = [[HumanMessage(f"who painted the {w}")] for w in ("mona lisa", "louvre", "it")] * 3
    model.enable_batching(1)
    assert model._model.dtype == torch.bfloat16, "1 is batching off: nothing changes"
    model.enable_batching(8)
    assert model._model.dtype == torch.float32
    assert model._batcher is not None and model._batcher.max_batch_size == 8
    with ThreadPoolExecutor(len(prompts)) as pool:
        together = list(pool.map(lambda p: model.invoke(p).text, prompts))
    assert max(model._batcher.step_sizes) > 1, "the requests shared decoding steps"
    assert all(p.dtype == torch.float32 for p in model._model.parameters())
    model.enable_batching(1)
    assert model._model.dtype == torch.float32, "once batched, it stays float32"
    alone = [model.invoke(p).text for p in prompts]
    assert together == alone
    assert not model._lock.locked()


def test_the_served_setting_makes_an_auto_model_float32(tiny_lm: Path) -> None:
    """``generator_batch_size`` above 1 (``make serve``: 8) reaches the model as float32."""
    import torch

    from crag.app.wiring import DefaultComponents
    from crag.settings.run_settings import RunSettings

    components = DefaultComponents()
    spec = f"local:{tiny_lm}"
    model = components.chat_model(
        RunSettings(deployment=deployment_with(generator=spec, generator_batch_size=8))
    )
    assert isinstance(model, LocalChatModel)
    assert model.max_batch_size == 8
    assert model._model.dtype == torch.float32


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_an_explicit_dtype_is_kept_under_batching(tiny_lm: Path, dtype: str) -> None:
    import torch

    model = LocalChatModel(model_path=str(tiny_lm), max_new_tokens=4, dtype=dtype)
    loaded = model._model
    model.enable_batching(8)
    assert model._model is loaded, "not loaded again"
    assert model._model.dtype == getattr(torch, dtype)


def test_the_operator_may_choose_bfloat16_batches(tiny_lm: Path) -> None:
    """``generator_dtype=bfloat16``: faster batches, answers that may depend on the batch."""
    import torch

    from crag.app.wiring import DefaultComponents
    from crag.settings.run_settings import RunSettings

    spec = f"local:{tiny_lm}"
    chosen = deployment_with(generator=spec, generator_batch_size=8, generator_dtype="bfloat16")
    model = DefaultComponents().chat_model(RunSettings(deployment=chosen))
    assert isinstance(model, LocalChatModel)
    assert (model.dtype, model.max_batch_size) == ("bfloat16", 8)
    assert model._model.dtype == torch.bfloat16
    auto = DefaultComponents().chat_model(
        RunSettings(deployment=deployment_with(generator=spec, generator_batch_size=8))
    )
    assert auto is not model and auto._model.dtype == torch.float32  # type: ignore[attr-defined]
