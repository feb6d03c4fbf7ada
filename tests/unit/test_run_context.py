"""Who sets what: deployment settings from the operator only, per-run settings within bounds.

The served graphs are compiled with the schemas of ``crag.core.run_context``; LangGraph calls the
schema's constructor with a run's context dict, so these tests build the schemas as the server
does (``RunContext(**context)``) and invoke the graphs from Python with the same values.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest

from crag.app.graphs import graph, ingest_graph, rag_graph, tutorial_graph
from crag.app.settings import parse_settings
from crag.core.context import Context, IngestContext, InvalidSettingError, resolve_context
from crag.core.run_context import RunContext, RunIngestContext
from crag.core.setting_checks import env_name
from crag.core.state import ChatInputState
from crag.core.validation import InvalidQuestionError
from crag.graph.baselines import build_rag_graph
from crag.graph.builder import CragGraph
from tests.fakes import FakeComponents, dict_context

REPO = Path(__file__).resolve().parents[2]
QUESTION: ChatInputState = {"question": "Who painted the Mona Lisa?"}

CONTEXT_DEPLOYMENT = {
    "store_path",
    "collection",
    "readable_collections",
    "chroma_host",
    "chroma_port",
    "chroma_ssl",
    "embedder",
    "evaluator",
    "evaluator_model",
    "evaluator_int8",
    "generator",
    "rewriter",
    "contextualizer",
    "no_repeat_ngram_size",
    "generator_batch_size",
    "search_provider",
    "search_url",
    "search_timeout",
    "allowed_hosts",
    "default_corpus",
    "default_corpus_limit",
    "max_question_chars",
    "page_timeout",
    "max_page_bytes",
    "max_redirects",
    "web_cache_ttl",
    "max_history_turns",
    "max_history_chars",
    "max_knowledge_chars",
}
INGEST_DEPLOYMENT = {
    "store_path",
    "collection",
    "chroma_host",
    "chroma_port",
    "chroma_ssl",
    "embedder",
    "max_document_chars",
    "ingest_root",
    "ingest_run_replace",
    "ingest_min_chunk_size",
    "ingest_max_chunks",
    "max_file_pages",
    "max_file_paragraphs",
    "max_file_chars",
}


def sample_value(settings: type[Any], name: str) -> Any:
    """A well-typed value for ``name`` (a run may not send even a valid one)."""
    annotation = settings.declared_types()[name]
    if get_origin(annotation) is not None:
        return get_args(annotation)[-1]
    return {bool: True, int: 1, float: 1.0, str: "x"}[annotation]


# -- which settings are the operator's ----------------------------------------------------------


def test_the_deployment_settings_are_the_operators() -> None:
    assert Context.deployment_names() == CONTEXT_DEPLOYMENT
    assert IngestContext.deployment_names() == INGEST_DEPLOYMENT
    for settings in (Context, IngestContext):
        for spec in fields(settings):
            if spec.name in settings.deployment_names():
                assert spec.metadata["env"] == f"CRAG_{spec.name.upper()}", spec.name


@pytest.mark.parametrize("name", sorted(CONTEXT_DEPLOYMENT))
def test_a_run_may_not_set_a_deployment_setting(name: str) -> None:
    with pytest.raises(InvalidSettingError) as info:
        RunContext(**{name: sample_value(Context, name)})
    message = str(info.value)
    assert message == (
        f"setting {name} is a deployment setting: the server's operator sets it "
        f"(environment variable {env_name(name)}); a run may not"
    )


@pytest.mark.parametrize("name", sorted(INGEST_DEPLOYMENT))
def test_an_ingestion_run_may_not_set_a_deployment_setting(name: str) -> None:
    with pytest.raises(InvalidSettingError, match=f"setting {name} is a deployment setting"):
        RunIngestContext(**{name: sample_value(IngestContext, name)})


def test_the_brief_cases_are_refused_all_named() -> None:
    with pytest.raises(InvalidSettingError) as info:
        RunContext(allowed_hosts="127.0.0.0/8", search_url="http://10.0.0.1/", top_k=3)
    assert str(info.value) == (
        "settings allowed_hosts, search_url are deployment settings: the server's operator "
        "sets them (environment variables CRAG_ALLOWED_HOSTS, CRAG_SEARCH_URL); a run may not"
    )


def test_a_run_context_takes_the_operators_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAG_STORE_PATH", "/srv/store")
    monkeypatch.setenv("CRAG_CHROMA_PORT", "9000")
    monkeypatch.setenv("CRAG_DEFAULT_CORPUS", "off")
    monkeypatch.setenv("CRAG_SEARCH_PROVIDER", "searxng")
    monkeypatch.setenv("CRAG_PAGE_TIMEOUT", "2.5")
    run = RunContext(top_k=3, strip_mode="words")
    assert isinstance(run, Context)
    assert (run.top_k, run.strip_mode) == (3, "words")
    assert (run.store_path, run.chroma_port, run.default_corpus) == ("/srv/store", 9000, False)
    assert (run.search_provider, run.page_timeout) == ("searxng", 2.5)
    # null means "not given": Studio may send it for the read-only fields.
    from_studio: dict[str, Any] = {"store_path": None}
    assert RunContext(**from_studio).store_path == "/srv/store"
    # Python keeps setting everything.
    assert Context(store_path="/elsewhere", chroma_port=1).store_path == "/elsewhere"


def test_the_ingest_root_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAG_INGEST_ROOT", "/srv/docs")
    monkeypatch.setenv("CRAG_MAX_DOCUMENT_CHARS", "100")
    run = RunIngestContext(chunk_size=500, chunk_overlap=50)
    assert (run.ingest_root, run.max_document_chars, run.chunk_size) == ("/srv/docs", 100, 500)


def test_a_bad_environment_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAG_CHROMA_PORT", "eighty")
    with pytest.raises(InvalidSettingError, match="environment variable CRAG_CHROMA_PORT must be"):
        RunContext()
    monkeypatch.setenv("CRAG_CHROMA_PORT", "70000")
    with pytest.raises(
        InvalidSettingError, match="environment variable CRAG_CHROMA_PORT must be at most 65535"
    ):
        Context()
    monkeypatch.delenv("CRAG_CHROMA_PORT")
    monkeypatch.setenv("CRAG_EVALUATOR_INT8", "sometimes")
    with pytest.raises(InvalidSettingError, match="CRAG_EVALUATOR_INT8 must be true or false"):
        Context()


def test_the_generator_batch_size_is_the_operators_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Context().generator_batch_size == 1, "batching off unless the operator turns it on"
    monkeypatch.setenv("CRAG_GENERATOR_BATCH_SIZE", "8")
    assert RunContext().generator_batch_size == 8
    assert Context(generator_batch_size=128).generator_batch_size == 128
    with pytest.raises(InvalidSettingError, match="generator_batch_size must be at most 128"):
        Context(generator_batch_size=129)
    monkeypatch.setenv("CRAG_GENERATOR_BATCH_SIZE", "0")
    with pytest.raises(InvalidSettingError, match="CRAG_GENERATOR_BATCH_SIZE must be at least 1"):
        RunContext()
    monkeypatch.setenv("CRAG_GENERATOR_BATCH_SIZE", "eight")
    with pytest.raises(InvalidSettingError, match="CRAG_GENERATOR_BATCH_SIZE must be"):
        Context()


def test_every_deployment_setting_is_documented() -> None:
    example = (REPO / ".env.example").read_text(encoding="utf-8")
    reference = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    for name in CONTEXT_DEPLOYMENT | INGEST_DEPLOYMENT:
        assert re.search(rf"^# ?{env_name(name)}=", example, re.MULTILINE), name
        assert env_name(name) in reference, name


def test_the_served_schema_shows_bounds_and_marks_deployment_settings_read_only() -> None:
    properties = graph.get_context_jsonschema()["properties"]  # type: ignore[index]
    assert set(properties) == Context.setting_names()
    assert (properties["top_k"]["minimum"], properties["top_k"]["maximum"]) == (1, 100)
    # an optional setting (unset: follows the evaluator) keeps its bounds on the number arm
    assert properties["upper_threshold"]["anyOf"][0]["maximum"] == 1
    assert properties["upper_threshold"]["anyOf"][1] == {"type": "null"}
    assert "readOnly" not in properties["top_k"]
    assert properties["top_k"]["default"] == 10
    for name in CONTEXT_DEPLOYMENT:
        assert properties[name]["readOnly"] is True, name
        assert properties[name]["default"] is None, name
        assert env_name(name) in properties[name]["description"], name
    ingest = ingest_graph.get_context_jsonschema()["properties"]  # type: ignore[index]
    assert ingest["ingest_root"]["readOnly"] is True
    assert "readOnly" not in ingest["chunk_size"]
    for served in (rag_graph, tutorial_graph):
        assert served.get_context_jsonschema() == graph.get_context_jsonschema()


# -- bounds on what one run may cost ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("top_k", 101, "setting top_k must be at most 100, not 101"),
        ("top_k", 0, "setting top_k must be at least 1, not 0"),
        ("web_results", 51, "setting web_results must be at most 50"),
        ("pages_to_read", 21, "setting pages_to_read must be at most 20"),
        ("strips_kept", 101, "setting strips_kept must be at most 100"),
        ("strip_size", 1001, "setting strip_size must be at most 1000"),
        ("max_new_tokens", 1025, "setting max_new_tokens must be at most 1024"),
        ("evaluator_batch_size", 513, "setting evaluator_batch_size must be at most 512"),
        ("upper_threshold", 1.5, "setting upper_threshold must be at most 1"),
        ("lower_threshold", -1.01, "setting lower_threshold must be at least -1"),
        ("strip_threshold", 2, "setting strip_threshold must be at most 1"),
    ],
)
def test_per_run_settings_are_bounded(name: str, value: Any, message: str) -> None:
    for schema in (Context, RunContext):
        with pytest.raises(InvalidSettingError, match=re.escape(message)):
            schema(**{name: value})


def test_the_bounds_themselves_are_allowed() -> None:
    at_most = RunContext(
        top_k=100,
        web_results=50,
        pages_to_read=20,
        strips_kept=100,
        strip_size=1000,
        max_new_tokens=1024,
        evaluator_batch_size=512,
        upper_threshold=1,
        lower_threshold=-1,
        strip_threshold=-1,
    )
    assert at_most.top_k == 100


def test_reversed_thresholds_are_refused_when_the_context_is_built() -> None:
    for schema in (Context, RunContext):
        with pytest.raises(InvalidSettingError) as info:
            schema(upper_threshold=-0.5, lower_threshold=0.5)
        assert str(info.value) == (
            "setting lower_threshold (0.5) must not be above upper_threshold (-0.5)"
        )
    # Equal thresholds leave no Ambiguous band; disabling Ambiguous then cuts at that value.
    assert Context(upper_threshold=0.2, lower_threshold=0.2, disable_action="ambiguous")


def test_unset_thresholds_follow_the_evaluator(monkeypatch: pytest.MonkeyPatch) -> None:
    # The embedding evaluator's pair was calibrated on its own scale; the paper's T5 (and the
    # other trained or prompted evaluators) take the paper's PopQA pair.
    assert Context().action_thresholds() == (0.1, -0.9)
    for evaluator in ("t5", "cross-encoder", "llm"):
        assert Context(evaluator=evaluator).action_thresholds() == (0.59, -0.99), evaluator
    # A threshold a run sets is kept whatever the evaluator; the other still follows it.
    assert Context(evaluator="t5", upper_threshold=0.3).action_thresholds() == (0.3, -0.99)
    assert Context(lower_threshold=-0.5).action_thresholds() == (0.1, -0.5)
    # A served run follows the operator's evaluator (CRAG_EVALUATOR).
    monkeypatch.setenv(env_name("evaluator"), "t5")
    assert RunContext().action_thresholds() == (0.59, -0.99)
    assert RunContext(upper_threshold=0.7).action_thresholds() == (0.7, -0.99)


def test_a_set_threshold_is_checked_against_the_evaluators_default() -> None:
    with pytest.raises(InvalidSettingError) as info:
        Context(lower_threshold=0.5)
    assert str(info.value) == (
        "setting lower_threshold (0.5) must not be above upper_threshold (0.1) "
        "(upper: the embedding evaluator's default)"
    )
    assert Context(evaluator="t5", lower_threshold=0.5).action_thresholds() == (0.59, 0.5)


def test_reversed_thresholds_fail_before_retrieval(
    fake_components: FakeComponents, fake_graph: CragGraph
) -> None:
    with pytest.raises(InvalidSettingError, match="lower_threshold"):
        fake_graph.invoke(QUESTION, context=dict_context(upper_threshold=0.1, lower_threshold=0.2))
    assert fake_components.store.queries == []


def test_contradictory_ablations_and_chunking_are_refused() -> None:
    with pytest.raises(InvalidSettingError, match="cannot be forced and removed at once"):
        Context(force_action="correct", disable_action="correct")
    with pytest.raises(InvalidSettingError, match=r"chunk_overlap \(1000\) must be below"):
        IngestContext(chunk_size=1000, chunk_overlap=1000)
    with pytest.raises(InvalidSettingError, match="setting allowed_hosts: 'a b' is not"):
        Context(allowed_hosts="a b")


# -- contexts given from Python -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("context", "message"),
    [
        (42, "context must be Context(...) or a mapping of setting names to values, not int (42)"),
        (
            "top_k=3",
            "context must be Context(...) or a mapping of setting names to values, not str "
            "('top_k=3')",
        ),
        ({"bogus": 1}, "unknown setting 'bogus'; valid: "),
        ({"bogus": 1, "top_kk": 2}, "unknown settings 'bogus', 'top_kk'; valid: "),
    ],
    ids=["int", "str", "unknown-key", "unknown-keys"],
)
def test_a_bad_python_context_is_a_one_line_setting_error(
    fake_components: FakeComponents, fake_graph: CragGraph, context: Any, message: str
) -> None:
    for served in (fake_graph, build_rag_graph(fake_components)):
        with pytest.raises(InvalidSettingError) as info:
            served.invoke({"question": QUESTION["question"]}, context=context)
        assert str(info.value).startswith(message)
        assert "\n" not in str(info.value)
    assert fake_components.store.queries == []


def test_unknown_keys_list_the_per_run_settings() -> None:
    unknown: dict[str, Any] = {"bogus": 1}
    with pytest.raises(InvalidSettingError) as info:
        RunContext(**unknown)
    valid = str(info.value).split("valid: ", 1)[1].split(", ")
    assert set(valid) == Context.setting_names() - CONTEXT_DEPLOYMENT


def test_the_cli_gives_the_same_errors() -> None:
    with pytest.raises(InvalidSettingError, match=r"^unknown setting 'bogus'; valid: "):
        parse_settings(["bogus=1"])
    with pytest.raises(InvalidSettingError, match=r"^setting chroma_ssl must be true or false"):
        parse_settings(["chroma_ssl=maybe"])
    with pytest.raises(InvalidSettingError, match=r"^setting top_k must be an integer, not 'x'"):
        parse_settings(["top_k=x"])
    # The CLI is the operator's: deployment settings are allowed there.
    parsed = parse_settings(["store_path=/srv/store", "chroma_ssl=yes", "search_provider=searxng"])
    assert (parsed.store_path, parsed.chroma_ssl, parsed.search_provider) == (
        "/srv/store",
        True,
        "searxng",
    )


@pytest.mark.parametrize("context", [42, "chunk_size=10", {"bogus": 1}])
def test_a_bad_ingestion_context_is_a_setting_error(context: Any) -> None:
    with pytest.raises(InvalidSettingError):
        ingest_graph.invoke({"documents": [{"text": "x"}]}, context=context)


def test_a_python_dict_is_a_runs_context(
    fake_components: FakeComponents, fake_graph: CragGraph, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = fake_graph.invoke(QUESTION, context=dict_context(top_k=1))
    assert fake_components.store.queries[-1][1] == 1
    assert len(out["documents"]) == 1
    with pytest.raises(InvalidSettingError, match="setting store_path is a deployment setting"):
        fake_graph.invoke(QUESTION, context=dict_context(store_path="/tmp/elsewhere"))
    # Deployment settings of a dict-built context come from the environment.
    monkeypatch.setenv("CRAG_MAX_QUESTION_CHARS", "10")
    with pytest.raises(InvalidQuestionError, match="the limit is 10"):
        fake_graph.invoke(QUESTION, context=dict_context(top_k=1))


def test_resolve_context_keeps_contexts_and_builds_mappings() -> None:
    given = Context(top_k=4, store_path="/srv")
    assert resolve_context(given) is given
    assert resolve_context({"top_k": 4, "store_path": "/srv"}) == given
    assert resolve_context(None) == Context()
