"""What one run may cost and what it accepts: bounded history and prompts, checked input.

* The chat history the contextualizer reads is bounded (``max_history_turns``,
  ``max_history_chars``): a 40,000-character answer on a thread once made one run take 102 s.
* The generator's knowledge is bounded (``max_knowledge_chars`` and a local model's context
  length): RAG with ``top_k=50`` once sent 50 passages; the lowest-ranked go first.
* A message with an unknown role is a one-line input error naming it and the roles allowed.
* ``Context(bogus=1)`` (and an unknown name in the method or the deployment), an unknown
  evaluator and a malformed generator spec are setting errors raised when the settings are
  built, before anything is retrieved.
* ``rag`` and ``crag-tutorial`` take chat messages as the ``crag`` graph does.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver

from crag.app.cli.commands import main
from crag.app.cli.settings import parse_settings
from crag.core.state import KnowledgeStrip
from crag.core.validation import InvalidQuestionError
from crag.evaluator.registry import BACKENDS
from crag.graph.baselines import build_rag_graph, build_tutorial_graph
from crag.graph.builder import CragGraph, build_graph
from crag.knowledge.conversation import Turn, bounded_history, clip_text
from crag.nodes.generate import KnowledgeBudget, fit_knowledge
from crag.prompts.contextualize import CONTEXTUALIZE_INSTRUCTION
from crag.prompts.tutorial import GRADER_SYSTEM, REWRITER_SYSTEM
from crag.settings.context import Context, IngestContext, InvalidSettingError
from crag.settings.deployment import (
    EVALUATORS,
    DeploymentSettings,
    deployment_settings,
    deployment_with,
)
from crag.settings.method import MethodConfig
from crag.settings.run_context import RunContext
from crag.settings.run_settings import RunSettings
from crag.settings.setting_checks import env_name, generator_spec_problem
from crag.websearch.base import SearchResult
from tests.fakes import (
    FakeComponents,
    FixedScoreEvaluator,
    ScriptedChatModel,
    StaticSearch,
    StaticStore,
    corpus_documents,
    dict_context,
)

MONA = "Who painted the Mona Lisa?"
ANSWER = "Leonardo da Vinci."
STANDALONE = "Where is the Mona Lisa displayed?"
FOLLOW_UP = "Where is it displayed?"


def respond(messages: list[BaseMessage]) -> str:
    """The contextualizer's rewrite, the tutorial's grade and rewrite, else the answer."""
    system = messages[0].text
    if system == CONTEXTUALIZE_INSTRUCTION:
        return STANDALONE
    if system == GRADER_SYSTEM:
        return "yes" if "Leonardo" in messages[-1].text else "no"
    if system == REWRITER_SYSTEM:
        return "Mona Lisa painter"
    return ANSWER


@pytest.fixture
def fake_components() -> FakeComponents:
    """This module's fakes (whose chat model answers by :func:`respond`):
    conftest's ``fake_graph`` and ``fake_app`` use them.
    """
    return FakeComponents(
        store=StaticStore(corpus_documents()),
        scorer=FixedScoreEvaluator({"Leonardo": 0.9}),
        chat=ScriptedChatModel(respond=respond, prompts=[]),
        web=StaticSearch(error="search is off in this test"),
    )


def contextualize_prompts(chat: ScriptedChatModel) -> list[list[BaseMessage]]:
    return [p for p in chat.prompts if p[0].text == CONTEXTUALIZE_INSTRUCTION]


def said(*messages: Any) -> Any:
    """Chat input, as a chat front-end sends it (LangGraph's types know only the schema)."""
    return {"messages": list(messages)}


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


# -- 1. the chat history the contextualizer reads -----------------------------------------------


def test_clip_text_cuts_at_a_word_and_says_so() -> None:
    assert clip_text("short", 10) == "short"
    cut = clip_text("the Mona Lisa is in the Louvre in Paris", 25)
    assert cut == "the Mona Lisa is in the…" and len(cut) <= 25
    assert clip_text("x" * 100, 5) == ""  # too little room to say anything


def test_bounded_history_keeps_the_newest_turns_within_the_characters() -> None:
    turns = [Turn(f"question {i}?", f"answer {i}.") for i in range(5)]
    history = bounded_history(turns, max_turns=3, max_chars=4000)
    assert history.turns == turns[-3:] and history.left_out == 2 and history.cut == 0
    # A 40,000-character answer is cut; the question stays whole.
    long = [Turn(MONA, "Leonardo " * 5000)]
    history = bounded_history(long, max_turns=3, max_chars=2000)
    [turn] = history.turns
    assert turn.question == MONA and len(turn.question) + len(turn.answer) <= 2000
    assert turn.answer.startswith("Leonardo Leonardo") and history.cut == 1
    # Older turns that no longer fit are left out, newest kept.
    history = bounded_history([Turn(MONA, "x " * 3000), Turn("q?", "a.")], 3, 1000)
    assert history.turns[-1] == Turn("q?", "a.") and len(history.turns) == 2
    assert sum(len(t.question) + len(t.answer) for t in history.turns) <= 1000
    assert bounded_history(turns, max_turns=0, max_chars=4000).turns == []


def test_a_huge_earlier_answer_is_cut_before_the_contextualizer_reads_it(
    fake_graph: CragGraph,
    fake_components: FakeComponents,
) -> None:
    huge = "Leonardo da Vinci painted it. " * 1400  # 42,000 characters
    out = fake_graph.invoke(said(user(MONA), assistant(huge), user(FOLLOW_UP)))
    [prompt] = contextualize_prompts(fake_components.chat)
    request = prompt[-1].text
    assert len(request) < deployment_settings().max_history_chars + 200, len(request)
    assert out["standalone_question"] == STANDALONE
    [note] = [n for n in out["notes"] if n.startswith("chat history bounded")]
    assert "1 text of them cut short" in note and "max_history_chars 4,000" in note


def test_the_history_settings_come_from_the_environment(
    fake_graph: CragGraph, fake_components: FakeComponents, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(env_name("max_history_turns"), "1")
    monkeypatch.setenv(env_name("max_history_chars"), "500")
    messages = [user("What is photosynthesis?"), assistant("A process of plants.")]
    messages += [user(MONA), assistant(ANSWER), user(FOLLOW_UP)]
    out = fake_graph.invoke(said(*messages))
    [prompt] = contextualize_prompts(fake_components.chat)
    assert "photosynthesis" not in prompt[-1].text and MONA in prompt[-1].text
    assert any("read 1 of 2 earlier turns" in n for n in out["notes"])
    with pytest.raises(InvalidSettingError, match=r"^setting max_history_turns is a deployment"):
        RunContext(max_history_turns=10)  # type: ignore[call-arg]
    with pytest.raises(InvalidSettingError, match=r"^setting max_history_turns is a deployment"):
        fake_graph.invoke(said(user(MONA)), context=dict_context(max_history_turns=10))


def test_the_history_note_lasts_one_run_only(fake_components: FakeComponents) -> None:
    threaded = build_graph(fake_components, checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t"}}
    huge = "Leonardo da Vinci painted it. " * 1400
    out = threaded.invoke(said(user(MONA), assistant(huge), user(FOLLOW_UP)), config)
    assert any(n.startswith("chat history bounded") for n in out["notes"])
    out = threaded.invoke(said(user("What is photosynthesis?")), config)
    assert not any(n.startswith("chat history bounded") for n in out["notes"])
    assert threaded.get_state(config).values["input_notes"] == []


def test_an_ordinary_follow_up_gets_no_note(
    fake_graph: CragGraph, fake_components: FakeComponents
) -> None:
    out = fake_graph.invoke(said(user(MONA), assistant(ANSWER), user(FOLLOW_UP)))
    assert out["standalone_question"] == STANDALONE
    assert not any(n.startswith("chat history") for n in out.get("notes", []))


# -- 2. the generator's prompt ------------------------------------------------------------------


def passages(count: int, words: int = 198) -> list[Document]:
    return [
        Document(
            page_content=f"Passage {i}\n" + "word " * words,
            metadata={"source": f"doc:{i}", "chunk": 0},
        )
        for i in range(count)
    ]


def knowledge_block(prompt: list[BaseMessage]) -> str:
    text = prompt[-1].text
    return text[text.index("<knowledge>\n") + 12 : text.index("\n</knowledge>")]


def test_rag_with_top_k_50_keeps_the_best_passages_within_the_limit(
    fake_components: FakeComponents,
) -> None:
    fake_components.store = StaticStore(passages(50))
    out = build_rag_graph(fake_components).invoke({"question": MONA}, context=Context(top_k=50))
    block = knowledge_block(fake_components.chat.prompts[-1])
    assert len(block) <= deployment_settings().max_knowledge_chars
    kept = [k["source"] for k in out["knowledge"]]
    assert kept == [f"doc:{i}" for i in range(len(kept))]  # the retriever's best, in order
    assert 5 < len(kept) < 50 and block.count("Passage ") == len(kept)
    assert block.rstrip().endswith("word")  # instructions and question stay around it
    assert fake_components.chat.prompts[-1][-1].text.endswith(f"Question: {MONA}")
    [note] = [n for n in out["notes"] if n.startswith("knowledge cut")]
    assert f"{len(kept)} of 50 entries kept" in note and "max_knowledge_chars 12,000" in note


def strip(text: str, score: float | None) -> KnowledgeStrip:
    return {"text": text, "source": "s", "chunk": 0, "origin": "internal", "score": score}


def test_the_lowest_scored_knowledge_goes_first() -> None:
    strips = [strip(f"{name} " + "x" * 95, score) for name, score in
              [("a", 0.1), ("b", 0.9), ("c", -0.5), ("d", 0.5)]]  # fmt: skip
    kept, bound = fit_knowledge(strips, KnowledgeBudget(chars=250))
    assert [k["text"][0] for k in kept] == ["b", "d"] and bound == "chars"
    assert fit_knowledge(strips, KnowledgeBudget(chars=10_000)) == (strips, None)
    # Not even the best fits: it is cut to fit, the rest dropped.
    kept, _ = fit_knowledge([strip("y " * 500, 0.2), strip("z " * 500, 0.1)], KnowledgeBudget(300))
    assert len(kept) == 1 and kept[0]["text"].startswith("y y") and len(kept[0]["text"]) <= 300


class WindowedChat(ScriptedChatModel):
    """A scripted model with a context length, counting one token per word."""

    context_length: int = 400

    def get_token_ids(self, text: str) -> list[int]:
        return list(range(len(text.split())))

    def get_num_tokens_from_messages(self, messages: list[BaseMessage], tools: Any = None) -> int:
        return sum(len(m.text.split()) for m in messages)


def test_knowledge_fits_a_local_models_context(fake_components: FakeComponents) -> None:
    chat = WindowedChat(respond=respond, prompts=[])
    fake_components.chat = chat
    fake_components.store = StaticStore(passages(10, words=40))
    out = build_rag_graph(fake_components).invoke(
        {"question": MONA}, context=Context(max_new_tokens=64)
    )
    prompt = chat.prompts[-1]
    assert chat.get_num_tokens_from_messages(prompt) + 64 <= chat.context_length
    assert 1 < len(out["knowledge"]) < 10
    limit = "the generator's context of 400 tokens, 64 kept for the answer"
    assert any(limit in note for note in out["notes"])


def test_a_local_model_never_reads_past_its_context(tmp_path: Any) -> None:
    from crag.generator.local import LocalChatModel
    from tests.tiny_causal_lm import build_tiny_causal_lm

    folder = str(build_tiny_causal_lm(tmp_path / "tiny"))
    assert LocalChatModel(model_path=folder).context_length == 4096  # max_position_embeddings
    model = LocalChatModel(model_path=folder, context_length=40, max_new_tokens=8)
    long = [("system", "answer the question"), ("human", "mona lisa " * 100 + "who painted it")]
    assert model.get_num_tokens_from_messages(model._convert_input(long).to_messages()) > 200
    reply = model.invoke(long)
    assert reply.usage_metadata is not None
    assert reply.usage_metadata["input_tokens"] == 32  # 40 less the 8 of the reply
    assert reply.usage_metadata["output_tokens"] == 8


# -- 3. a message with an unknown role ----------------------------------------------------------


@pytest.mark.parametrize(
    "build", [build_graph, build_rag_graph, build_tutorial_graph], ids=["crag", "rag", "tut"]
)
def test_an_unknown_role_is_a_one_line_input_error(
    fake_components: FakeComponents, build: Any
) -> None:
    with pytest.raises(InvalidQuestionError) as info:
        build(fake_components).invoke(
            said(user(MONA), {"role": "wizard", "content": "abracadabra"})
        )
    message = str(info.value)
    assert message == (
        "message 1 has the role 'wizard'; allowed roles: 'user' (or 'human'), 'assistant' "
        "(or 'ai'), 'system', 'developer', 'tool'"
    )
    assert fake_components.store.queries == []


def test_a_message_langchain_cannot_read_is_named_by_its_index(
    fake_graph: CragGraph, fake_components: FakeComponents
) -> None:
    with pytest.raises(InvalidQuestionError, match=r"^message 0 is not a chat message: ") as info:
        fake_graph.invoke(said({"content": MONA}))
    assert "\n" not in str(info.value)
    with pytest.raises(InvalidQuestionError, match="message 0 has the role 'wizard'"):
        fake_graph.invoke(said(("wizard", MONA)))


# -- 4. unknown names and bounds, in each kind of settings ---------------------------------------


def valid_names(error: pytest.ExceptionInfo[InvalidSettingError]) -> set[str]:
    """The names an unknown-setting error lists as valid."""
    return set(str(error.value).split("valid: ", 1)[1].split(", "))


def test_unknown_names_in_the_constructor_are_setting_errors() -> None:
    bogus: dict[str, Any] = {"bogus": 1, "top_kk": 2}
    with pytest.raises(InvalidSettingError) as info:
        Context(**bogus)
    assert str(info.value).startswith("unknown settings 'bogus', 'top_kk'; valid: ")
    assert valid_names(info) == Context.setting_names()
    with pytest.raises(
        InvalidSettingError, match=r"^unknown setting 'bogus'; valid: chunk_overlap, chunk_size$"
    ):
        IngestContext(bogus=1)  # type: ignore[call-arg]
    with pytest.raises(InvalidSettingError, match="takes settings as keywords"):
        cast(Any, Context)(5)  # positional, as a careless caller would
    assert Context(top_k=5).top_k == 5  # the generated constructor still does the work


def test_unknown_names_in_the_method_and_the_deployment_are_setting_errors() -> None:
    with pytest.raises(InvalidSettingError) as info:
        MethodConfig(strips_kep=2)  # type: ignore[call-arg]
    assert str(info.value).startswith("unknown setting 'strips_kep'; valid: ")
    assert valid_names(info) == MethodConfig.setting_names()
    with pytest.raises(InvalidSettingError, match="takes settings as keywords"):
        cast(Any, MethodConfig)(5)
    with pytest.raises(InvalidSettingError) as info:
        deployment_with(store_pth="x")
    assert str(info.value).startswith("unknown setting 'store_pth'; valid: ")
    assert valid_names(info) == set(DeploymentSettings.model_fields)
    with pytest.raises(InvalidSettingError) as info:
        RunSettings(bogus=1)  # type: ignore[call-arg]
    assert str(info.value).startswith("unknown setting 'bogus'; valid: ")
    assert valid_names(info) == RunSettings.setting_names()
    assert MethodConfig(strips_kept=2).strips_kept == 2
    assert deployment_with(store_path="x").store_path == "x"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Context(top_k=101), "setting top_k must be at most 100, not 101"),
        (lambda: Context(pages_to_read=-1), "setting pages_to_read must be at least 0, not -1"),
        (lambda: MethodConfig(strips_kept=0), "setting strips_kept must be at least 1, not 0"),
        (lambda: MethodConfig(strip_threshold=2), "setting strip_threshold must be at most 1"),
        (lambda: deployment_with(max_history_turns=-1), "setting max_history_turns must be "),
        (
            lambda: RunSettings(deployment=deployment_with(max_history_turns=-1)),
            "setting max_history_turns must be at least 0",
        ),
        (
            lambda: RunSettings(deployment=deployment_with(max_knowledge_chars=0)),
            "setting max_knowledge_chars must be at least",
        ),
        (lambda: RunSettings(strips_kept=101), "setting strips_kept must be at most 100, not 101"),
        (lambda: RunSettings(top_k=0), "setting top_k must be at least 1, not 0"),
    ],
    ids=[
        "run-max",
        "run-min",
        "method-min",
        "method-max",
        "deployment",
        "joined-deployment",
        "joined-deployment-chars",
        "joined-method",
        "joined-run",
    ],
)
def test_each_kind_bounds_its_own_settings(make: Any, message: str) -> None:
    """A per-run bound in Context, a method's in MethodConfig, the operator's in the deployment;
    the joined RunSettings keeps all three."""
    with pytest.raises(InvalidSettingError) as info:
        make()
    assert str(info.value).startswith(message)


def test_context_stays_a_langgraph_context_schema(
    fake_graph: CragGraph, fake_components: FakeComponents
) -> None:
    assert "top_k" in fake_graph.get_context_jsonschema()["properties"]  # type: ignore[index]
    out = fake_graph.invoke({"question": MONA}, context=Context(top_k=1))
    assert fake_components.store.queries == [(MONA, 1)] and out["answer"] == ANSWER


# -- 5. evaluator and generator checked with the other settings ---------------------------------


def test_the_evaluator_names_match_the_registry() -> None:
    assert EVALUATORS == BACKENDS


@pytest.mark.usefixtures("fake_app")
@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("evaluator=gpt9", "setting evaluator must be one of 'embedding', 't5', 'cross-encoder', "
         "'llm', not 'gpt9'"),
        ("generator=nonsense", "setting generator must be 'smollm2', 'endpoint' or "
         "'endpoint:MODEL' (the model server at CRAG_LLM_BASE_URL), 'local:/path/to/hf-model', "
         "'gguf:/path/model.gguf' or 'provider:model' (e.g. 'openai:gpt-4o-mini'), not "
         "'nonsense'"),
    ],
)  # fmt: skip
def test_cli_refuses_a_bad_component_before_any_work(
    fake_components: FakeComponents, capsys: pytest.CaptureFixture[str], pair: str, message: str
) -> None:
    with pytest.raises(InvalidSettingError) as info:
        parse_settings([pair]).run_settings()
    assert str(info.value) == message
    assert main(["ask", "-q", "--set", pair, MONA]) == 2
    assert capsys.readouterr().err.strip() == f"crag: error: {message}"
    assert fake_components.store.queries == [] and fake_components.chat.prompts == []


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "smollm2",
        "local:/models/qwen",
        "gguf:~/m.gguf",
        "openai:gpt-4o-mini",
        "ollama:llama3:8b",
    ],
)
def test_well_formed_generator_specs_pass(spec: str) -> None:
    assert generator_spec_problem(spec) is None
    assert RunSettings(deployment=deployment_with(generator=spec)).deployment.generator == spec
    assert (
        RunSettings.combine(
            Context(), deployment=deployment_with(generator=spec)
        ).deployment.generator
        == spec
    )


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("nonsense", "must be 'smollm2'"),
        ("local:", "must give a path after 'local:'"),
        ("gguf:  ", "must give a path after 'gguf:'"),
        ("endpoint: ", "must give a model name after 'endpoint:'"),
        ("openai:", "must be 'smollm2'"),
        (":gpt-4o", "must be 'smollm2'"),
        ("wizard:gpt9", "names the unknown provider 'wizard'; known providers: "),
    ],
)
def test_malformed_generator_specs_fail(spec: str, problem: str) -> None:
    found = generator_spec_problem(spec)
    assert found is not None and found.startswith(problem)
    with pytest.raises(InvalidSettingError, match=f"^setting generator {problem}"):
        RunSettings(deployment=deployment_with(generator=spec))
    with pytest.raises(InvalidSettingError, match=f"^setting generator {problem}"):
        RunSettings.combine(Context(), deployment=deployment_with(generator=spec))


def test_the_evaluator_is_read_in_any_case_and_the_llm_spec_is_checked() -> None:
    assert RunSettings(deployment=deployment_with(evaluator=" T5 ")).deployment.evaluator == "t5"
    assert (
        RunSettings(
            deployment=deployment_with(evaluator="llm", evaluator_model="openai:gpt-4o-mini")
        ).deployment.evaluator
        == "llm"
    )
    with pytest.raises(InvalidSettingError, match=r"^setting evaluator_model must be"):
        RunSettings(deployment=deployment_with(evaluator="llm", evaluator_model="gpt9"))
    joined = RunSettings(deployment=deployment_with(evaluator="t5", evaluator_model="/models/t5"))
    assert joined.deployment.evaluator_model == "/models/t5"


@pytest.mark.parametrize(
    ("variable", "named"),
    [
        ("evaluator", "environment variable CRAG_EVALUATOR"),  # a choice: read as one
        ("generator", "setting generator"),  # a spec: its form is checked with the run's
    ],
)
def test_a_served_run_fails_on_a_bad_operator_component_before_retrieval(
    fake_graph: CragGraph,
    fake_components: FakeComponents,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    named: str,
) -> None:
    monkeypatch.setenv(env_name(variable), "gpt9")
    with pytest.raises(InvalidSettingError, match=f"^{named} must"):
        fake_graph.invoke({"question": MONA}, context=dict_context(top_k=3))
    with pytest.raises(InvalidSettingError, match=f"^{named} must"):
        fake_graph.invoke({"question": MONA})
    assert fake_components.store.queries == []


# -- 6. rag and crag-tutorial take chat messages -------------------------------------------------


@pytest.mark.parametrize("build", [build_rag_graph, build_tutorial_graph], ids=["rag", "tutorial"])
def test_baselines_answer_chat_messages(fake_components: FakeComponents, build: Any) -> None:
    out = build(fake_components).invoke(said(user(MONA)))
    assert out["answer"] == ANSWER and out["standalone_question"] == MONA
    human, ai = out["messages"]
    assert human.text == MONA and ai.additional_kwargs["answer"] == ANSWER
    assert ai.text.startswith(ANSWER)  # then its sources, for chat front-ends
    assert ai.additional_kwargs["question"] == MONA
    assert fake_components.store.queries[0] == (MONA, 10)


@pytest.mark.parametrize("build", [build_rag_graph, build_tutorial_graph], ids=["rag", "tutorial"])
def test_baselines_make_a_follow_up_standalone(fake_components: FakeComponents, build: Any) -> None:
    out = build(fake_components).invoke(said(user(MONA), assistant(ANSWER), user(FOLLOW_UP)))
    assert out["standalone_question"] == STANDALONE
    assert fake_components.store.queries[0][0] == STANDALONE
    assert out["messages"][-1].additional_kwargs["question"] == STANDALONE


def test_served_tutorial_searches_with_a_run_context(fake_components: FakeComponents) -> None:
    fake_components.web = StaticSearch(
        [SearchResult(f"R{i}", f"https://e.org/{i}", "s") for i in range(5)]
    )
    out = build_tutorial_graph(fake_components).invoke(
        {"question": MONA}, context=dict_context(top_k=2)
    )
    assert fake_components.web.queries == ["Mona Lisa painter"]
    assert [k["origin"] for k in out["knowledge"]].count("external") == 3
