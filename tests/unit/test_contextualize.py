"""Chat input and follow-ups: ``messages`` in, an AI message out, standalone questions.

The graph runs with fakes: a static store, a fixed-score evaluator and a scripted chat model
that answers contextualize prompts with a chosen rewrite (or fails) and every other prompt
with the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from crag.app.cli.commands import main
from crag.core.question_channel import CarriedQuestion
from crag.core.validation import InvalidQuestionError
from crag.graph.builder import CragGraph, build_graph
from crag.graph.routers import route_start
from crag.knowledge.conversation import Turn, earlier_turns, question_from_messages
from crag.nodes.contextualize import fallback_question, needs_context, usable_rewrite
from crag.prompts.contextualize import CONTEXTUALIZE_INSTRUCTION
from tests.fakes import (
    FakeComponents,
    FixedScoreEvaluator,
    ScriptedChatModel,
    StaticSearch,
    StaticStore,
    corpus_documents,
)

MONA = "Who painted the Mona Lisa?"
ANSWER = "Leonardo da Vinci."
MONA_WHERE = "Where is the Mona Lisa displayed?"
TURNS = [Turn(MONA, ANSWER)]


def is_contextualize_prompt(messages: list[BaseMessage]) -> bool:
    return messages[0].text == CONTEXTUALIZE_INSTRUCTION


def chat(rewrite: Callable[[str], str] | None = None) -> ScriptedChatModel:
    """Answers ``ANSWER``; contextualize prompts get ``rewrite(last user turn)``."""

    def respond(messages: list[BaseMessage]) -> str:
        if is_contextualize_prompt(messages):
            if rewrite is None:
                raise RuntimeError("the contextualizer is down")
            return rewrite(messages[-1].text)
        return ANSWER

    return ScriptedChatModel(respond=respond, prompts=[])


def rewrites(model: ScriptedChatModel) -> list[list[BaseMessage]]:
    return [p for p in model.prompts if is_contextualize_prompt(p)]


@pytest.fixture
def fake_components() -> FakeComponents:
    """This module's fakes (whose chat model rewrites every follow-up into one fixed question):
    conftest's ``fake_graph`` and ``fake_app`` use them.
    """
    return FakeComponents(
        store=StaticStore(corpus_documents()),
        scorer=FixedScoreEvaluator({"Leonardo": 0.9}),
        chat=chat(lambda _: "Where is the Mona Lisa displayed?"),
        web=StaticSearch(error="search is off in this test"),
    )


def said(*messages: Any) -> Any:
    """Chat input: ``{"messages": [...]}`` (dicts or messages, as a chat front-end sends)."""
    return {"messages": list(messages)}


def thread(components: FakeComponents) -> tuple[Any, Any]:
    threaded = build_graph(components, checkpointer=InMemorySaver())
    return threaded, {"configurable": {"thread_id": "t"}}


# -- the pure helpers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Who painted it?", True),
        ("When was he born?", True),
        ("Where did they live?", True),
        ("Who lived there?", True),
        ("When was that?", True),
        ("And the Louvre?", True),
        ("What about Paris?", True),
        (MONA, False),
        ("Is there a museum that shows the Mona Lisa?", False),
        ("", False),
    ],
)
def test_needs_context(question: str, expected: bool) -> None:
    assert needs_context(question) is expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Where is the Mona Lisa displayed?", MONA_WHERE),
        ('Standalone question: "Where is the Mona Lisa displayed?"\nIt is in Paris.', MONA_WHERE),
        ("Question: Where is the Mona Lisa displayed?\n", MONA_WHERE),
        ("", None),
        ("Where is it displayed?", None),  # still refers back
        ("Leonardo da Vinci.", None),  # an answer: the follow-up's intent is gone
        ("Where is the portrait displayed?", None),  # nothing from the earlier turns
        ("Where is the Mona Lisa displayed?" + "!" * 100, None),  # too long
    ],
)
def test_usable_rewrite(raw: str, expected: str | None) -> None:
    assert usable_rewrite(raw, "Where is it displayed?", TURNS, max_chars=100) == expected


def test_fallback_appends_the_previous_turns_key_words() -> None:
    assert fallback_question("When was he born?", TURNS, 2000) == (
        "When was he born? (painted Mona Lisa; Leonardo da Vinci)"
    )
    # A long answer lends no words; words the follow-up has are not repeated.
    long_turn = [Turn(MONA, "The Mona Lisa was painted by Leonardo da Vinci in Florence.")]
    assert fallback_question("Who painted it?", long_turn, 2000) == "Who painted it? (Mona Lisa)"
    assert fallback_question("Who painted it?", [], 2000) == "Who painted it?"
    assert fallback_question("Who painted it?", long_turn, 20) == "Who painted it?"


def test_question_from_messages() -> None:
    answered = AIMessage(ANSWER, additional_kwargs={"question": MONA})
    new = HumanMessage("Where is it displayed?")
    # Only messages: the last human message.
    assert question_from_messages(None, [HumanMessage("a"), new]) == new.text
    # A stale question (the one the last AI message answered) loses to a new human message.
    assert question_from_messages(MONA, [HumanMessage(MONA), answered, new]) == new.text
    # A question the caller changed wins; with nothing pending, the question is the question.
    assert question_from_messages("Other?", [answered, new]) == "Other?"
    assert question_from_messages(MONA, [answered]) == MONA
    assert question_from_messages(None, [answered]) is None


def test_earlier_turns_pair_questions_and_answers() -> None:
    messages: list[BaseMessage] = [
        HumanMessage("q1"),
        AIMessage("a1"),  # a history the client sent itself: the human message before it
        AIMessage("a2", additional_kwargs={"question": "q2"}),  # a question-input run
        HumanMessage("pending"),
    ]
    assert earlier_turns(messages) == [Turn("q1", "a1"), Turn("q2", "a2")]
    assert earlier_turns(messages, limit=1) == [Turn("q2", "a2")]


def test_route_start_sends_only_chat_runs_to_contextualize() -> None:
    assert route_start({"question": MONA}) == "retrieve"
    assert route_start({"question": MONA, "messages": []}) == "retrieve"
    assert route_start({"question": MONA, "messages": [AIMessage(ANSWER)]}) == "contextualize"


# -- the graph ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": MONA},
        {"type": "human", "content": MONA},
        HumanMessage(MONA),
    ],
    ids=["role-dict", "type-dict", "message"],
)
def test_messages_input_is_answered_with_an_ai_message(
    fake_graph: CragGraph, fake_components: FakeComponents, message: Any
) -> None:
    out = fake_graph.invoke(said(message))
    assert out["standalone_question"] == MONA
    assert out["answer"] == ANSWER and out["action"] == "correct"
    human, ai = out["messages"]
    assert human.type == "human" and human.text == MONA
    assert ai.type == "ai"
    assert ai.text == f"{ANSWER} [1]\n\n**Sources**\n\n- [1] wikipedia:Mona Lisa#0"
    assert ai.additional_kwargs == {
        "sources": ["wikipedia:Mona Lisa"],
        "citations": [
            {
                "number": 1,
                "title": "wikipedia:Mona Lisa",
                "source": "wikipedia:Mona Lisa",
                "chunk": 0,
            }
        ],
        "abstained": False,
        "question": MONA,
        "answer": ANSWER,
        "action": "correct",
    }
    assert rewrites(fake_components.chat) == []  # no earlier turns: no rewriting call
    assert fake_components.store.queries == [(MONA, 10)]


def test_question_input_runs_as_before_and_records_the_answer(
    fake_graph: CragGraph, fake_components: FakeComponents
) -> None:
    nodes = [
        n for chunk in fake_graph.stream({"question": MONA}, stream_mode="updates") for n in chunk
    ]
    assert nodes == ["retrieve", "grade", "decide_action", "refine", "decide_answer", "generate"]
    out = fake_graph.invoke({"question": MONA})
    assert "standalone_question" not in out
    assert [m.type for m in out["messages"]] == ["ai"]
    assert len(fake_components.chat.prompts) == 2  # one generation per run, nothing else


@pytest.mark.parametrize("content", ["", "   \n"])
def test_empty_last_human_message_is_the_empty_question_error(
    fake_graph: CragGraph, fake_components: FakeComponents, content: str
) -> None:
    with pytest.raises(InvalidQuestionError, match="the question is empty"):
        fake_graph.invoke(
            said({"role": "user", "content": MONA}, {"role": "user", "content": content})
        )
    with pytest.raises(InvalidQuestionError, match="no question given"):
        fake_graph.invoke(said({"role": "assistant", "content": ANSWER}))


def test_follow_up_is_made_standalone_and_used_downstream(fake_components: FakeComponents) -> None:
    threaded, config = thread(fake_components)
    threaded.invoke({"messages": [{"role": "user", "content": MONA}]}, config)
    out = threaded.invoke(
        {"messages": [{"role": "user", "content": "Where is it displayed?"}]}, config
    )
    standalone = "Where is the Mona Lisa displayed?"
    assert out["standalone_question"] == standalone
    # The rewrite prompt carried the earlier turn and the follow-up.
    [prompt] = rewrites(fake_components.chat)
    assert f"Q: {MONA}\nA: {ANSWER}\nFollow-up question: Where is it displayed?" in prompt[-1].text
    # retrieve, grade and generate used the standalone question.
    assert fake_components.store.queries[-1][0] == standalone
    assert fake_components.scorer.calls[-1][0] == standalone
    assert fake_components.chat.prompts[-1][-1].text.endswith(f"Question: {standalone}")
    # The history survives the per-run reset: both turns are in the thread's chat.
    assert [m.type for m in out["messages"]] == ["human", "ai", "human", "ai"]
    assert out["messages"][-1].additional_kwargs["question"] == standalone
    assert threaded.get_state(config).values["question"] == standalone


@pytest.mark.parametrize(
    "rewrite",
    [None, lambda _: "", lambda _: "Leonardo da Vinci."],
    ids=["model-fails", "empty", "answers-instead"],
)
def test_follow_up_falls_back_to_key_words(
    fake_components: FakeComponents, rewrite: Callable[[str], str] | None
) -> None:
    fake_components.chat = chat(rewrite)
    threaded, config = thread(fake_components)
    threaded.invoke({"question": MONA}, config)
    out = threaded.invoke({"question": "When was he born?"}, config)
    assert out["standalone_question"] == "When was he born? (painted Mona Lisa; Leonardo da Vinci)"
    assert fake_components.store.queries[-1][0] == out["standalone_question"]
    assert len(rewrites(fake_components.chat)) == 1  # asked once, then the fallback


def test_self_contained_question_on_a_thread_is_not_rewritten(
    fake_components: FakeComponents,
) -> None:
    threaded, config = thread(fake_components)
    threaded.invoke({"question": "What is photosynthesis?"}, config)
    out = threaded.invoke({"messages": [{"role": "user", "content": MONA}]}, config)
    assert out["standalone_question"] == MONA
    assert rewrites(fake_components.chat) == []


def test_question_and_messages_mix_on_one_thread(fake_components: FakeComponents) -> None:
    threaded, config = thread(fake_components)
    threaded.invoke({"messages": [{"role": "user", "content": MONA}]}, config)
    # A question after chat messages is this run's question, not the pending-message rule's.
    out = threaded.invoke({"question": "Where is it displayed?"}, config)
    assert out["standalone_question"] == "Where is the Mona Lisa displayed?"
    # And a chat message after it is this run's, though the state still holds that question.
    out = threaded.invoke({"messages": [{"role": "user", "content": "Who painted it?"}]}, config)
    assert out["messages"][-2].text == "Who painted it?"
    assert len(rewrites(fake_components.chat)) == 2


@pytest.mark.usefixtures("fake_app")
def test_crag_ask_thread_follow_up(
    tmp_path: Path, fake_components: FakeComponents, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "threads.sqlite")
    assert main(["ask", "-q", "--thread", "t1", "--threads-db", db, MONA]) == 0
    capsys.readouterr()
    assert main(["ask", "--json", "--thread", "t1", "--threads-db", db, "Where is it?"]) == 0
    captured = capsys.readouterr()
    assert '"standalone_question": "Where is the Mona Lisa displayed?"' in captured.out
    assert "[contextualize] 'Where is the Mona Lisa displayed?'" in captured.err
    assert main(["history", "t1", "--threads-db", db]) == 0
    assert "2. Q: Where is the Mona Lisa displayed?" in capsys.readouterr().out


@pytest.mark.parametrize("failure", ["too-long", "generator-down"])
def test_a_failed_question_run_does_not_hide_the_next_message(
    fake_components: FakeComponents, failure: str
) -> None:
    threaded, config = thread(fake_components)
    if failure == "too-long":
        bad: dict[str, Any] = {"question": "x" * 3000}
        with pytest.raises(InvalidQuestionError, match="characters long"):
            threaded.invoke(bad, config)
    else:
        working = fake_components.chat
        fake_components.chat = ScriptedChatModel(respond=lambda _: 1 / 0, prompts=[])
        with pytest.raises(ZeroDivisionError):
            threaded.invoke({"question": "What is photosynthesis?"}, config)
        fake_components.chat = working
    # The failed run's question stays in the thread's state, but this run sent a message.
    out = threaded.invoke(said({"role": "user", "content": MONA}), config)
    assert out["standalone_question"] == MONA
    assert out["messages"][-1].additional_kwargs["question"] == MONA
    assert fake_components.store.queries[-1][0] == MONA
    # Read back from the thread, the question is marked as an earlier run's; a new one is not.
    stored = threaded.get_state(config).values["question"]
    assert stored == MONA and type(stored) is CarriedQuestion
    out = threaded.invoke({"question": MONA_WHERE}, config)
    assert out["standalone_question"] == MONA_WHERE


def test_a_question_an_earlier_run_left_loses_to_a_new_message() -> None:
    answered = AIMessage(ANSWER, additional_kwargs={"question": MONA})
    new = HumanMessage("Where is it displayed?")
    assert question_from_messages(CarriedQuestion("Other?"), [answered, new]) == new.text
    assert question_from_messages("Other?", [answered, new]) == "Other?"  # sent with it
    # Nothing new: an earlier run's question is still the question (as before).
    assert question_from_messages(CarriedQuestion("Other?"), [answered]) == "Other?"
