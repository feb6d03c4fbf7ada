"""The node contract: typed partial updates, the per-run reset, one RunSettings per run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from langgraph.runtime import Runtime
from langgraph.types import Overwrite

from crag.core.state import (
    NOT_RESET,
    ChatInputState,
    State,
    StateUpdate,
    _empty_value,
    run_reset,
)
from crag.graph.builder import build_graph
from crag.nodes.node_runtime import GraphSettings
from crag.nodes.progress import emit
from crag.settings.context import Context, default_context, resolve_context
from crag.settings.deployment import deployment_with
from crag.settings.method import MethodConfig
from crag.settings.run_settings import RunSettings
from tests.fakes import FakeComponents, dict_context

QUESTION = "Who painted the Mona Lisa?"


def keys(schema: Any) -> set[str]:
    return set(schema.__required_keys__ | schema.__optional_keys__)


def test_a_node_update_names_the_state_fields() -> None:
    assert keys(StateUpdate) == keys(State)
    assert not StateUpdate.__required_keys__


def test_every_state_field_is_reset_or_explicitly_kept() -> None:
    reset = set(run_reset())
    assert reset | set(NOT_RESET) == keys(State)
    assert not reset & set(NOT_RESET)
    assert keys(ChatInputState) <= set(NOT_RESET)  # the run's input is never cleared
    assert all(reason.strip() for reason in NOT_RESET.values())


def test_the_reset_is_the_empty_value_of_each_field() -> None:
    first, second = run_reset(), run_reset()
    assert first == {
        "answer": "",
        "documents": [],
        "knowledge": [],
        "citations": [],
        "abstained": False,
        "notes": first["notes"],
        "internal_knowledge": [],
        "search_query": "",
        "external_knowledge": [],
        "web_reason": "",
        "graded_by": "",
        "answerable": False,
    }
    notes = first["notes"]
    assert isinstance(notes, Overwrite) and notes.value == []  # notes has a reducer
    assert first["knowledge"] is not second["knowledge"]  # fresh lists for every run


def test_a_field_without_an_empty_value_must_be_listed() -> None:
    with pytest.raises(TypeError, match=r"'verdict'.*list it in NOT_RESET"):
        _empty_value("verdict", Literal["yes", "no"])


@dataclass
class RecordingComponents(FakeComponents):
    """Fakes that record the context every component was asked for."""

    contexts: list[Any] = field(default_factory=list)

    def vectorstore(self, context: Any) -> Any:
        self.contexts.append(context)
        return super().vectorstore(context)

    def evaluator(self, context: Any) -> Any:
        self.contexts.append(context)
        return super().evaluator(context)

    def chat_model(self, context: Any) -> Any:
        self.contexts.append(context)
        return super().chat_model(context)


@pytest.fixture
def recording(fake_components: FakeComponents) -> RecordingComponents:
    return RecordingComponents(
        store=fake_components.store, scorer=fake_components.scorer, chat=fake_components.chat
    )


@pytest.mark.parametrize("given", [None, {"top_k": 2}], ids=["no-context", "dict"])
def test_every_node_of_a_run_gets_the_same_run_settings(
    recording: RecordingComponents, given: dict[str, Any] | None
) -> None:
    method = MethodConfig(strips_kept=3)
    deployment = deployment_with(max_question_chars=500)
    graph = build_graph(components=recording, method=method, deployment=deployment)
    graph.invoke({"question": QUESTION}, context=None if given is None else dict_context(**given))
    contexts = recording.contexts
    assert len(contexts) >= 3  # retrieve, grade, refine, generate
    assert all(isinstance(c, RunSettings) for c in contexts)
    assert all(c is contexts[0] for c in contexts)
    settings = contexts[0]
    # the run's context under the graph's method and deployment, joined once for the run
    assert settings.method() == method
    assert (settings.strips_kept, settings.deployment.max_question_chars) == (3, 500)
    if given is None:
        assert settings.context() == default_context()
    else:
        assert settings.context() == Context(top_k=2)
    recording.contexts.clear()
    graph.invoke({"question": QUESTION}, context=Context(top_k=4))
    assert all(c is recording.contexts[0] for c in recording.contexts)
    assert recording.contexts[0] is not settings and recording.contexts[0].top_k == 4


def test_the_run_settings_are_joined_once_per_run_context_and_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert resolve_context(None) is resolve_context(None) is default_context()
    assert resolve_context(None) == Context()
    graph = GraphSettings()  # the operator's method and deployment
    first = graph.for_run(None)
    assert graph.for_run(None) is first
    assert isinstance(first, RunSettings) and first.context() == Context()
    run = Context(top_k=3)
    assert graph.for_run(run) is graph.for_run(run) is not first
    monkeypatch.setenv("CRAG_MAX_QUESTION_CHARS", "10")
    monkeypatch.setenv("CRAG_STRIPS_KEPT", "2")
    changed = graph.for_run(None)
    assert (changed.deployment.max_question_chars, changed.strips_kept) == (10, 2)
    assert changed is graph.for_run(None) and changed is not first
    monkeypatch.delenv("CRAG_MAX_QUESTION_CHARS")
    monkeypatch.delenv("CRAG_STRIPS_KEPT")
    assert graph.for_run(None).deployment.max_question_chars == first.deployment.max_question_chars
    assert graph.for_run(None).strips_kept == MethodConfig().strips_kept


def test_emit_writes_to_the_runtime_stream_and_never_fails_the_node() -> None:
    events: list[Any] = []
    emit(Runtime(stream_writer=events.append), "grade", "scored", passages=2)
    assert events == [{"node": "grade", "event": "scored", "passages": 2}]

    def broken(_: Any) -> None:
        raise RuntimeError("the stream is gone")

    emit(Runtime(stream_writer=broken), "grade", "scored")  # logged, not raised
    emit(Runtime(), "grade", "scored")  # outside a run: the no-op writer
