"""The onnxruntime engine of the local generator (crag.generator.onnx_build, onnx_decoding).

A tiny Llama, built by onnxruntime-genai's real builder in a child process and run by
onnxruntime, must decode what transformers decodes in float32: the same tokens alone, streamed,
with the reply n-gram blocker, a stop string and a token limit, the same next-token
probabilities, and the same tokens as transformers' batches. A model the builder cannot take
falls back to transformers, once per model.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage

from crag.core.cancellation import CancelToken, RunCancelledError, cancellation_scope
from crag.generator.batching import GenerationRequest
from crag.generator.local import LocalChatModel
from crag.generator.onnx_build import OnnxBuildError, ensure_onnx_model, onnx_folder
from crag.generator.onnx_decoding import DecodingRules, _terminated_when_cancelled
from tests.tiny_causal_lm import build_tiny_causal_lm

QUESTIONS = (
    "who painted the mona lisa",
    "the louvre is in paris and the mona lisa is in the louvre",
    "leonardo da vinci was a painter of paris",
)


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("crag-cache")


@pytest.fixture()
def cache(onnx_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CRAG_CACHE_DIR", str(onnx_cache))
    return onnx_cache


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny_onnx_lm"), for_onnx=True)


def messages(question: str) -> list[Any]:
    return [SystemMessage("answer from the knowledge"), HumanMessage(question)]


def both(tiny_lm: Path, **kwargs: Any) -> tuple[LocalChatModel, LocalChatModel]:
    onnx = LocalChatModel(model_path=str(tiny_lm), engine="onnxruntime", **kwargs)
    torch = LocalChatModel(model_path=str(tiny_lm), dtype="float32", **kwargs)
    return onnx, torch


def test_onnxruntime_decodes_the_tokens_of_transformers_float32(tiny_lm: Path, cache: Path) -> None:
    onnx, torch = both(tiny_lm, max_new_tokens=12, no_repeat_ngram_size=2)
    assert onnx._onnx is not None and onnx._model is None  # transformers not even loaded
    assert onnx.decodes_on_onnxruntime and not torch.decodes_on_onnxruntime
    assert onnx._onnx.checks_drafts  # the builder's head was rewritten: drafts are read
    assert onnx_folder(tiny_lm).is_relative_to(cache / "models" / "onnx")
    for question in QUESTIONS:
        ids = onnx._encode(messages(question))["input_ids"][0].tolist()
        alone = onnx._generate_alone(GenerationRequest(ids, 12))
        assert alone == torch._generate_alone(GenerationRequest(ids, 12))
        assert len(alone) == 12  # no end token in the tiny model: each runs to its limit
        text = onnx.invoke(messages(question)).content
        assert text == torch.invoke(messages(question)).content
        assert "".join(str(c.content) for c in onnx.stream(messages(question))) == text
    for limit in (1, 3):
        ids = onnx._encode(messages(QUESTIONS[0]))["input_ids"][0].tolist()
        assert len(onnx._generate_alone(GenerationRequest(ids, limit))) == limit


def test_the_reply_blocker_applies_as_in_transformers_and_a_stop_string_ends_the_reply(
    tiny_lm: Path, cache: Path
) -> None:
    onnx, torch = both(tiny_lm, max_new_tokens=20, no_repeat_ngram_size=1)
    ids = onnx._encode(messages(QUESTIONS[1]))["input_ids"][0].tolist()
    reply = onnx._generate_alone(GenerationRequest(ids, 20))
    assert len(set(reply)) == len(reply)  # n-grams of one: no token twice
    assert reply == torch._generate_alone(GenerationRequest(ids, 20))
    words = onnx._tokenizer.decode(reply).split()
    stop = words[3]
    # transformers' stop strings cannot read the tiny WordLevel tokenizer: the expected reply is
    # what generate gives a real tokenizer, the reply up to the token that completes the string
    assert onnx.invoke(messages(QUESTIONS[1]), stop=[stop]).content == " ".join(words[:4])


def test_next_token_probabilities_match_transformers(tiny_lm: Path, cache: Path) -> None:
    onnx, torch = both(tiny_lm)
    candidates = ("paris", "louvre", "leonardo")
    for question in QUESTIONS:
        got = onnx.next_token_probabilities(messages(question), candidates)
        want = torch.next_token_probabilities(messages(question), candidates)
        assert got == pytest.approx(want, abs=1e-5)
        assert sum(got.values()) > 0


def test_batches_load_transformers_in_float32_and_give_the_same_tokens(
    tiny_lm: Path, cache: Path
) -> None:
    onnx, _ = both(tiny_lm, max_new_tokens=10)
    alone = [onnx.invoke(messages(q)).content for q in QUESTIONS]
    onnx.enable_batching(3)
    assert onnx._model is not None and str(onnx._model.dtype) == "torch.float32"
    answers: dict[int, Any] = {}

    def ask(index: int) -> None:
        answers[index] = onnx.invoke(messages(QUESTIONS[index])).content

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(QUESTIONS))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [answers[i] for i in range(len(QUESTIONS))] == alone


def test_a_prompt_that_starts_as_a_kept_one_is_read_from_there_with_the_same_tokens(
    tiny_lm: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crag.generator.prefix_cache import PrefixCache

    onnx, torch = both(tiny_lm, max_new_tokens=12, no_repeat_ngram_size=2)
    decoder = onnx._onnx
    assert decoder is not None
    monkeypatch.setattr(decoder, "_prefixes", PrefixCache())
    read: list[int] = []
    run = decoder._run

    def counted(tokens: Any, *args: Any) -> Any:
        read.append(len(tokens))
        return run(tokens, *args)

    monkeypatch.setattr(decoder, "_run", counted)

    def asked(question: str) -> list[Any]:  # a system turn long enough to be shared
        return [SystemMessage("answer from the knowledge " * 3), HumanMessage(question)]

    prompts = [onnx._encode(asked(q))["input_ids"][0].tolist() for q in QUESTIONS]
    shared = 0
    while all(p[shared] == prompts[0][shared] for p in prompts):
        shared += 1
    assert shared >= 8  # the system turn and the user turn's start
    for index, ids in enumerate(prompts):
        read.clear()
        reply = onnx._generate_alone(GenerationRequest(ids, 12))
        assert reply == torch._generate_alone(GenerationRequest(ids, 12))
        assert read[0] == (len(ids) if index == 0 else len(ids) - shared)
    read.clear()
    again = onnx._generate_alone(GenerationRequest(prompts[1], 12))
    assert read[0] == 1  # the same prompt: only its last token is read again
    assert again == torch._generate_alone(GenerationRequest(prompts[1], 12))
    got = onnx.next_token_probabilities(asked(QUESTIONS[2]), ("paris", "louvre"))
    want = torch.next_token_probabilities(asked(QUESTIONS[2]), ("paris", "louvre"))
    assert got == pytest.approx(want, abs=1e-5)


def test_a_cancelled_run_stops_between_tokens_and_raises(tiny_lm: Path, cache: Path) -> None:
    onnx, _ = both(tiny_lm, max_new_tokens=30)
    assert onnx._onnx is not None
    token = CancelToken()
    seen: list[int] = []

    def cancel_after_three(chosen: int) -> None:
        seen.append(chosen)
        if len(seen) == 3:
            token.cancel()

    ids = onnx._encode(messages(QUESTIONS[0]))["input_ids"][0].tolist()
    rules = DecodingRules(30, frozenset(), 0, on_token=cancel_after_three)
    assert len(onnx._onnx.greedy(ids, rules, token)) == 3
    with cancellation_scope() as scope:
        scope.cancel()
        with pytest.raises(RunCancelledError):
            onnx.invoke(messages(QUESTIONS[0]))


def test_a_prompt_read_is_terminated_once_its_run_is_cancelled() -> None:
    token = CancelToken()
    with _terminated_when_cancelled(token) as options:
        assert not options.terminate
        token.cancel()
        for _ in range(200):  # the watcher polls every 20 ms
            if options.terminate:
                break
            threading.Event().wait(0.01)
        assert options.terminate
    with _terminated_when_cancelled(None) as options:
        assert not options.terminate


def test_a_model_the_builder_cannot_take_decodes_with_transformers_once_tried(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    plain = build_tiny_causal_lm(tmp_path / "no-eos")  # no end token in its config: refused
    with caplog.at_level(logging.WARNING, logger="crag.generator.local"):
        model = LocalChatModel(model_path=str(plain), engine="onnxruntime", max_new_tokens=4)
    assert model._onnx is None and model._model is not None
    assert not model.decodes_on_onnxruntime  # so crag-bench eval --workers batches it
    assert "decodes with transformers" in caplog.text and "builder cannot make" in caplog.text
    assert len(model._generate_alone(GenerationRequest([5, 6, 7], 4))) == 4
    assert not onnx_folder(plain).exists()

    def no_second_try(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the builder ran again for a model it refused")

    monkeypatch.setattr(subprocess, "run", no_second_try)
    with pytest.raises(OnnxBuildError, match="builder cannot make"):
        ensure_onnx_model(plain)


def test_the_engine_is_a_deployment_setting_whose_default_is_onnxruntime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from crag.settings.deployment import deployment_settings
    from crag.settings.setting_checks import InvalidSettingError

    monkeypatch.delenv("CRAG_GENERATOR_ENGINE", raising=False)
    assert deployment_settings().generator_engine == "onnxruntime"
    monkeypatch.setenv("CRAG_GENERATOR_ENGINE", "torch")
    assert deployment_settings().generator_engine == "torch"
    monkeypatch.setenv("CRAG_GENERATOR_ENGINE", "tensorrt")
    with pytest.raises(InvalidSettingError, match="CRAG_GENERATOR_ENGINE must be one of"):
        deployment_settings()


def test_a_preload_opens_the_session_the_model_then_uses(tiny_lm: Path, cache: Path) -> None:
    from crag.generator.factory import preload_engine
    from crag.generator.onnx_decoding import open_decoder

    spec = f"local:{tiny_lm}"
    ensure_onnx_model(tiny_lm)  # built by an earlier run
    assert preload_engine(spec, "onnxruntime")
    preloaded = open_decoder(onnx_folder(tiny_lm) / "model.onnx")
    model = LocalChatModel(model_path=str(tiny_lm), engine="onnxruntime")
    assert model._onnx is preloaded  # opened once, by the preload
    assert not preload_engine(spec, "torch")
    assert not preload_engine("endpoint", "onnxruntime")  # nothing local to open
    assert not preload_engine(f"local:{tiny_lm.parent / 'missing'}", "onnxruntime")


def test_a_preload_never_builds(tmp_path: Path, cache: Path) -> None:
    from crag.generator.factory import preload_engine

    unbuilt = build_tiny_causal_lm(tmp_path / "unbuilt", for_onnx=True)
    assert not preload_engine(f"local:{unbuilt}", "onnxruntime")
    assert not onnx_folder(unbuilt).exists()


def test_the_components_preload_only_for_onnxruntime_and_swallow_failures(
    tmp_path: Path, cache: Path
) -> None:
    from crag.app.wiring import DefaultComponents
    from crag.settings.deployment import deployment_with
    from crag.settings.run_settings import RunSettings

    components = DefaultComponents()
    torch = RunSettings(deployment=deployment_with(generator_engine="torch"))
    assert components.preload_chat_model(torch) is None
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    folder = onnx_folder(broken)
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(b"not a model")
    settings = RunSettings(deployment=deployment_with(generator=f"local:{broken}"))
    thread = components.preload_chat_model(settings)
    assert thread is not None
    thread.join(timeout=60)
    assert not thread.is_alive()  # the failure stayed in the thread, for the run to report


def test_a_cancelled_run_stops_the_shipped_model_in_the_middle_of_a_long_prompt() -> None:
    """SmolLM2 reads 3,000 tokens in about 3 s on 2 cores; the cancellation stops it at once."""
    from crag.generator.onnx_decoding import open_decoder
    from crag.generator.smollm2 import ensure_smollm2

    decoder = open_decoder(ensure_onnx_model(ensure_smollm2()))
    token = CancelToken()
    timer = threading.Timer(0.3, token.cancel)
    started = time.monotonic()
    timer.start()
    with pytest.raises(RunCancelledError):
        decoder.greedy(list(range(100, 3100)), DecodingRules(8, frozenset(), 4), token)
    assert time.monotonic() - started < 1.5
    assert decoder.greedy([1, 2, 3], DecodingRules(2, frozenset(), 4)) != []  # still usable
