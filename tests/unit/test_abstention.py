"""Abstention: without knowledge the crag graph says so instead of asking the generator."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import BaseMessage

from crag.app.cli.commands import main
from crag.graph.baselines import build_rag_graph
from crag.graph.builder import CragGraph, build_graph
from crag.knowledge.conversation import NOTE_LINES
from crag.prompts.generate import ABSTENTION, NO_KNOWLEDGE
from crag.settings.context import Context, InvalidSettingError
from crag.settings.deployment import deployment_with
from crag.settings.method import MethodConfig
from crag.settings.run_settings import RunSettings
from tests.fakes import FakeComponents, FixedScoreEvaluator, StaticStore, dict_context

QUESTION = "Who painted the Mona Lisa?"


def generations(prompts: list[list[BaseMessage]]) -> list[list[BaseMessage]]:
    """The answer prompts among a chat model's prompts (rewrite prompts left out)."""
    return [p for p in prompts if "<knowledge>" in p[-1].text]


def test_no_knowledge_abstains_without_the_generator(
    fake_components: FakeComponents, fake_graph: CragGraph
) -> None:
    fake_components.scorer = FixedScoreEvaluator({}, default=-1.0)
    out = fake_graph.invoke({"question": QUESTION})
    assert out["action"] == "incorrect"
    assert out["answer"] == ABSTENTION
    assert (out["abstained"], out["citations"], out["knowledge"]) == (True, [], [])
    assert generations(fake_components.chat.prompts) == []
    assert out["notes"] == [
        "web search unavailable: search is off in this test; answered without web knowledge",
        "abstained, the generator was not asked: no knowledge passed the strip threshold "
        "(-0.99); store: no passage used: every passage scores below lower threshold -0.9 "
        "(best -1.000); web: web search unavailable: search is off in this test",
    ]
    ai = out["messages"][-1]
    assert ai.additional_kwargs["answer"] == ABSTENTION
    assert ai.text == f"{ABSTENTION}\n\n*{NOTE_LINES['abstained']}*"
    assert ai.additional_kwargs["abstained"] is True
    assert ai.additional_kwargs["citations"] == []


def test_a_correct_run_whose_strips_all_fail_abstains_and_says_the_web_was_not_searched(
    fake_components: FakeComponents,
) -> None:
    graph = build_graph(fake_components, method=MethodConfig(strip_threshold=0.95))
    out = graph.invoke({"question": QUESTION})
    assert out["action"] == "correct" and out["abstained"] is True
    assert out["notes"][-1] == (
        "abstained, the generator was not asked: no knowledge passed the strip threshold "
        "(0.95); store: no strip scored above 0.95; web: not searched (action correct)"
    )
    assert fake_components.web.queries == []
    assert generations(fake_components.chat.prompts) == []


@pytest.mark.parametrize("where", ["method", "environment"])
def test_the_setting_off_restores_the_unsupported_answer(
    fake_components: FakeComponents, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    fake_components.scorer = FixedScoreEvaluator({}, default=-1.0)
    if where == "method":
        graph = build_graph(fake_components, method=MethodConfig(abstain_without_knowledge=False))
    else:  # the operator's method, read when the run starts
        graph = build_graph(fake_components)
        monkeypatch.setenv("CRAG_ABSTAIN_WITHOUT_KNOWLEDGE", "false")
    out = graph.invoke({"question": QUESTION})
    assert out["answer"] == "Leonardo da Vinci."
    assert out["abstained"] is False and out["knowledge"] == []
    [prompt] = generations(fake_components.chat.prompts)
    assert NO_KNOWLEDGE in prompt[-1].text
    assert out["notes"][-1] == "no knowledge reached the generator; the answer is unsupported"


@pytest.mark.parametrize(
    "context", [{"abstain_without_knowledge": False}, {"abstain_without_knowledge": True}]
)
def test_a_run_may_not_set_it_and_the_method_describes_it(
    fake_graph: CragGraph, context: Any
) -> None:
    schema = fake_graph.get_context_jsonschema()
    assert schema is not None and "abstain_without_knowledge" not in schema["properties"]
    with pytest.raises(InvalidSettingError, match="abstain_without_knowledge is a parameter of"):
        fake_graph.invoke({"question": QUESTION}, context=context)
    with pytest.raises(InvalidSettingError, match="abstain_without_knowledge is a parameter of"):
        Context(**context)
    setting = MethodConfig.model_fields["abstain_without_knowledge"]
    assert setting.default is True
    assert "generator" in (setting.description or "")


def test_knowledge_found_is_answered_as_before(
    fake_components: FakeComponents, fake_graph: CragGraph
) -> None:
    out = fake_graph.invoke({"question": QUESTION})
    assert out["action"] == "correct"
    assert out["abstained"] is False and out["answer"] == "Leonardo da Vinci."
    assert len(generations(fake_components.chat.prompts)) == 1


def test_baselines_do_not_abstain(fake_components: FakeComponents) -> None:
    fake_components.store = StaticStore([])
    out = build_rag_graph(fake_components).invoke({"question": QUESTION})
    assert out["answer"] == "Leonardo da Vinci." and out["abstained"] is False
    assert len(generations(fake_components.chat.prompts)) == 1


@pytest.mark.usefixtures("fake_app")
def test_crag_ask_prints_the_abstention_and_why(
    fake_components: FakeComponents, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_components.scorer = FixedScoreEvaluator({}, default=-1.0)
    assert main(["ask", QUESTION]) == 0
    captured = capsys.readouterr()
    assert captured.out == ABSTENTION + "\n"  # no sources: there were none
    assert "[generate] abstained: no usable knowledge" in captured.err
    assert "note: abstained, the generator was not asked" in captured.err


def test_knowledge_too_weak_to_answer_from_abstains_with_the_shipped_reader(
    fake_components: FakeComponents, fake_graph: CragGraph
) -> None:
    # every passage and strip scores -0.95: ambiguous (the paper's lower threshold, -0.99), the
    # strips pass the strip threshold (-0.99) but none scores above SmolLM2's abstention
    # threshold (-0.9, the default generator's own)
    fake_components.scorer = FixedScoreEvaluator({}, default=-0.95)
    graph = build_graph(fake_components, method=MethodConfig(lower_threshold=-0.99))
    out = graph.invoke({"question": QUESTION})
    assert out["action"] == "ambiguous"
    assert out["abstained"] is True and out["answer"] == ABSTENTION
    assert out["knowledge"] == []
    assert generations(fake_components.chat.prompts) == []
    assert out["notes"][-1].startswith(
        "abstained, the generator was not asked: no knowledge scored above the abstention "
        "threshold (-0.9): best of "
    )
    assert out["notes"][-1].endswith(" strips -0.950")


@pytest.mark.parametrize(
    ("generator", "abstention", "threshold"),
    [("openai:gpt-4o-mini", None, -1.0), ("endpoint", None, -1.0), ("smollm2", -1.0, -1.0)],
)
def test_another_reader_judges_weak_knowledge_itself(
    fake_components: FakeComponents, generator: str, abstention: float | None, threshold: float
) -> None:
    # the same weak knowledge as above goes to any other reader (or to SmolLM2 when the
    # threshold is set to -1): "no knowledge" means no knowledge
    fake_components.scorer = FixedScoreEvaluator({}, default=-0.95)
    method = MethodConfig(lower_threshold=-0.99, abstention_threshold=abstention)
    deployment = deployment_with(generator=generator)
    assert RunSettings.combine(Context(), method, deployment).answer_threshold() == threshold
    out = build_graph(fake_components, method=method, deployment=deployment).invoke(
        {"question": QUESTION}, context=dict_context(top_k=10)
    )
    assert out["abstained"] is False and out["answer"] == "Leonardo da Vinci."
    assert out["knowledge"] and all(k["score"] == pytest.approx(-0.95) for k in out["knowledge"])


def test_the_abstention_note_reads_the_web_reason_from_the_state_not_the_notes() -> None:
    from langgraph.runtime import Runtime

    from crag.nodes.abstain import abstain

    state: Any = {
        "question": QUESTION,
        "action": "incorrect",
        "documents": [],
        "notes": ["web search unavailable: a note abstain does not read"],
        "web_reason": "web search found nothing usable for 'Mona Lisa'",
    }
    update = abstain(state, Runtime(context=RunSettings()))
    assert update["notes"] == [
        "abstained, the generator was not asked: no knowledge passed the strip threshold "
        "(-0.99); store: returned no passages; web: web search found nothing usable for "
        "'Mona Lisa'"
    ]


def test_unscored_knowledge_always_supports_an_answer() -> None:
    from crag.nodes.abstain import supports_an_answer

    strip = {"text": "t", "source": "s", "chunk": 0, "origin": "external", "score": None}
    weak = {**strip, "score": -0.95}
    assert supports_an_answer([strip], 0.5)  # type: ignore[list-item]
    assert not supports_an_answer([weak], -0.9)  # type: ignore[list-item]
    bottom = {**strip, "score": -1.0}
    assert supports_an_answer([bottom], -1.0)  # type: ignore[list-item]
    assert not supports_an_answer([], -1.0)
