"""Who sets what: a run sets per-run settings only, within bounds; the rest is not the run's.

The served graphs are compiled with the schemas of ``crag.settings.run_context`` (``RunContext``:
:class:`~crag.settings.context.Context` with its bounds shown and the served ``scope_folder``
check; ``RunIngestContext``: :class:`~crag.settings.context.IngestContext`). LangGraph calls the
schema's constructor with a run's context dict, so these tests build the schemas as the server
does (``RunContext(**context)``) and invoke the graphs from Python with the same values. The
method's parameters are the graph's (``build_graph(..., method=...)``, ``CRAG_<NAME>`` for the
served graphs) and the deployment settings the operator's; a run naming either is refused by
name and kind (here by the schemas; before that, on the server, by :mod:`crag.app.web.http`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from crag.app.cli.settings import parse_settings
from crag.app.graphs import graph, ingest_graph, rag_graph, tutorial_graph
from crag.core.state import ChatInputState
from crag.core.validation import InvalidQuestionError
from crag.graph.baselines import build_rag_graph
from crag.graph.builder import CragGraph, build_graph
from crag.nodes.node_runtime import GraphSettings
from crag.settings.context import Context, IngestContext, InvalidSettingError, resolve_context
from crag.settings.deployment import (
    IngestDeployment,
    StoreDeployment,
    deployment_settings,
    deployment_with,
)
from crag.settings.method import MethodConfig, operator_method
from crag.settings.run_context import RunContext, RunIngestContext
from crag.settings.run_settings import IngestSettings, RunSettings
from crag.settings.setting_checks import env_name
from crag.settings.setting_kinds import DEPLOYMENT_NAMES, METHOD_NAMES
from tests.fakes import FakeComponents, dict_context

REPO = Path(__file__).resolve().parents[2]
QUESTION: ChatInputState = {"question": "Who painted the Mona Lisa?"}

PER_RUN = {
    "top_k",
    "retrieval",
    "scope_tags",
    "scope_folder",
    "scope_file_types",
    "search_collection",
    "web_search",
    "web_results",
    "pages_to_read",
    "only_wikipedia",
    "search_region",
    "search_safesearch",
    "max_new_tokens",
}
PER_INGEST = {"chunk_size", "chunk_overlap"}
INGEST_DEPLOYMENT = set(StoreDeployment.model_fields) | set(IngestDeployment.model_fields)


def operator_value(name: str) -> Any:
    """A well-typed value of a method parameter or deployment setting: the operator's own."""
    if name in METHOD_NAMES:
        return getattr(MethodConfig(), name)
    return getattr(deployment_settings(), name)


def refused(values: dict[str, Any]) -> dict[str, Any]:
    """Settings a schema does not declare, typed so that the type checker lets them through."""
    return values


def deployment_message(name: str) -> str:
    return (
        f"setting {name} is a deployment setting: the server's operator sets it "
        f"(environment variable {env_name(name)}); a run may not"
    )


def method_message(name: str) -> str:
    return (
        f"setting {name} is a parameter of the method: set where the graph is built "
        "(build_graph(..., method=MethodConfig(...)), crag --set, or the operator's "
        f"environment: {env_name(name)}); a run may not"
    )


# -- which settings are a run's -----------------------------------------------------------------


def test_the_served_schemas_hold_the_per_run_settings_only() -> None:
    assert Context.setting_names() == PER_RUN
    assert IngestContext.setting_names() == PER_INGEST
    assert RunContext.setting_names() == PER_RUN
    assert RunIngestContext.setting_names() == PER_INGEST
    assert issubclass(RunContext, Context) and issubclass(RunIngestContext, IngestContext)
    assert not (PER_RUN | PER_INGEST) & (METHOD_NAMES | DEPLOYMENT_NAMES)
    assert not METHOD_NAMES & DEPLOYMENT_NAMES


@pytest.mark.parametrize("name", sorted(DEPLOYMENT_NAMES))
def test_a_run_may_not_set_a_deployment_setting(name: str) -> None:
    for schema in (RunContext, Context):
        with pytest.raises(InvalidSettingError) as info:
            schema(top_k=3, **{name: operator_value(name)})
        assert str(info.value) == deployment_message(name), schema.__name__


@pytest.mark.parametrize("name", sorted(METHOD_NAMES))
def test_a_run_may_not_set_a_parameter_of_the_method(name: str) -> None:
    for schema in (RunContext, Context):
        with pytest.raises(InvalidSettingError) as info:
            schema(top_k=3, **{name: operator_value(name)})
        assert str(info.value) == method_message(name), schema.__name__


@pytest.mark.parametrize("name", sorted(INGEST_DEPLOYMENT))
def test_an_ingestion_run_may_not_set_a_deployment_setting(name: str) -> None:
    for schema in (RunIngestContext, IngestContext):
        with pytest.raises(InvalidSettingError) as info:
            schema(chunk_size=500, **{name: operator_value(name)})
        assert str(info.value) == deployment_message(name), schema.__name__


def test_an_ingestion_run_may_not_set_the_question_graphs_settings() -> None:
    with pytest.raises(InvalidSettingError) as info:
        RunIngestContext(**refused({"strips_kept": 2}))
    assert str(info.value) == method_message("strips_kept")
    with pytest.raises(
        InvalidSettingError, match=r"^unknown setting 'top_k'; valid: chunk_overlap"
    ):
        RunIngestContext(**refused({"top_k": 3}))


def test_every_refused_setting_is_named_deployment_settings_first() -> None:
    with pytest.raises(InvalidSettingError) as info:
        RunContext(
            **refused(
                {"allowed_hosts": "127.0.0.0/8", "search_url": "http://10.0.0.1/", "top_k": 3}
            )
        )
    assert str(info.value) == (
        "settings allowed_hosts, search_url are deployment settings: the server's operator "
        "sets them (environment variables CRAG_ALLOWED_HOSTS, CRAG_SEARCH_URL); a run may not"
    )
    with pytest.raises(InvalidSettingError) as info:
        RunContext(**refused({"strips_kept": 2, "force_action": "correct"}))
    assert str(info.value) == (
        "settings force_action, strips_kept are parameters of the method: set where the graph "
        "is built (build_graph(..., method=MethodConfig(...)), crag --set, or the operator's "
        "environment: CRAG_FORCE_ACTION, CRAG_STRIPS_KEPT); a run may not"
    )
    with pytest.raises(InvalidSettingError) as info:
        RunContext(**refused({"force_action": "correct", "store_path": "/tmp/x", "bogus": 1}))
    assert str(info.value) == deployment_message("store_path")


def test_unknown_names_are_refused_listing_the_per_run_settings() -> None:
    for schema, valid in ((RunContext, PER_RUN), (RunIngestContext, PER_INGEST)):
        unknown: dict[str, Any] = {"bogus": 1}
        with pytest.raises(InvalidSettingError) as info:
            schema(**unknown)
        message = str(info.value)
        assert message.startswith("unknown setting 'bogus'; valid: "), message
        assert set(message.split("valid: ", 1)[1].split(", ")) == valid


# -- the schema the server shows ----------------------------------------------------------------


def test_the_served_schema_shows_every_per_run_setting_with_its_bounds() -> None:
    schema = graph.get_context_jsonschema()
    assert schema is not None
    properties = schema["properties"]
    assert set(properties) == PER_RUN
    assert (properties["top_k"]["minimum"], properties["top_k"]["maximum"]) == (1, 100)
    for name, (low, high) in Context.bounds().items():
        assert properties[name].get("minimum") == low, name
        assert properties[name].get("maximum") == high, name
    assert properties["top_k"]["default"] == 10
    assert properties["web_search"] == {
        "default": True,
        "description": properties["web_search"]["description"],
        "title": "Web Search",
        "type": "boolean",
    }
    assert properties["retrieval"]["enum"] == ["dense", "lexical", "hybrid"]
    for name, spec in properties.items():
        assert spec.get("description"), f"{name} has no description"
        assert "readOnly" not in spec, name
    for served in (rag_graph, tutorial_graph):
        assert served.get_context_jsonschema() == schema


def test_the_served_ingestion_schema_shows_the_chunking_only() -> None:
    schema = ingest_graph.get_context_jsonschema()
    assert schema is not None
    properties = schema["properties"]
    assert set(properties) == PER_INGEST
    assert (properties["chunk_size"]["minimum"], properties["chunk_size"]["maximum"]) == (
        1,
        100_000,
    )
    assert properties["chunk_overlap"]["minimum"] == 0
    assert (properties["chunk_size"]["default"], properties["chunk_overlap"]["default"]) == (
        1000,
        100,
    )
    assert all(spec.get("description") for spec in properties.values())


# -- bounds on what one run may cost ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("top_k", 101, "setting top_k must be at most 100, not 101"),
        ("top_k", 0, "setting top_k must be at least 1, not 0"),
        ("web_results", 51, "setting web_results must be at most 50"),
        ("web_results", 0, "setting web_results must be at least 1"),
        ("pages_to_read", 21, "setting pages_to_read must be at most 20"),
        ("pages_to_read", -1, "setting pages_to_read must be at least 0"),
        ("max_new_tokens", 1025, "setting max_new_tokens must be at most 1024"),
    ],
)
def test_per_run_settings_are_bounded(name: str, value: Any, message: str) -> None:
    for schema in (Context, RunContext):
        with pytest.raises(InvalidSettingError, match=re.escape(message)):
            schema(**{name: value})


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("strips_kept", 101, "setting strips_kept must be at most 100"),
        ("strip_size", 1001, "setting strip_size must be at most 1000"),
        ("upper_threshold", 1.5, "setting upper_threshold must be at most 1"),
        ("lower_threshold", -1.01, "setting lower_threshold must be at least -1"),
        ("strip_threshold", 2, "setting strip_threshold must be at most 1"),
    ],
)
def test_the_methods_parameters_are_bounded(name: str, value: Any, message: str) -> None:
    for settings in (MethodConfig, RunSettings):
        with pytest.raises(InvalidSettingError, match=re.escape(message)):
            settings(**{name: value})


def test_the_evaluator_batch_size_is_the_operators_and_bounded() -> None:
    with pytest.raises(
        InvalidSettingError, match="setting evaluator_batch_size must be at most 512"
    ):
        RunSettings(deployment=deployment_with(evaluator_batch_size=513))
    with pytest.raises(InvalidSettingError, match="setting evaluator_batch_size must be"):
        deployment_with(evaluator_batch_size=513)
    assert deployment_with(evaluator_batch_size=512).evaluator_batch_size == 512


def test_the_bounds_themselves_are_allowed() -> None:
    at_most = RunContext(top_k=100, web_results=50, pages_to_read=20, max_new_tokens=1024)
    assert (at_most.top_k, at_most.max_new_tokens) == (100, 1024)
    assert RunContext(top_k=1, web_results=1, pages_to_read=0, max_new_tokens=1).pages_to_read == 0
    method = MethodConfig(
        strips_kept=100, strip_size=1000, upper_threshold=1, lower_threshold=-1, strip_threshold=-1
    )
    assert RunSettings.combine(Context(), method, deployment_with(evaluator_batch_size=512))


def test_reversed_thresholds_are_refused_when_the_method_is_built() -> None:
    for settings in (MethodConfig, RunSettings):
        with pytest.raises(InvalidSettingError) as info:
            settings(upper_threshold=-0.5, lower_threshold=0.5)
        assert str(info.value) == (
            "setting lower_threshold (0.5) must not be above upper_threshold (-0.5)"
        )
    # Equal thresholds leave no Ambiguous band; disabling Ambiguous then cuts at that value.
    assert MethodConfig(upper_threshold=0.2, lower_threshold=0.2, disable_action="ambiguous")


def test_unset_thresholds_follow_the_evaluator(monkeypatch: pytest.MonkeyPatch) -> None:
    # The embedding evaluator's pair was calibrated on its own scale; the paper's T5 (and the
    # other trained or prompted evaluators) take the paper's PopQA pair.
    assert RunSettings().action_thresholds() == (-0.4, -0.9)
    for evaluator in ("t5", "cross-encoder", "llm"):
        assert MethodConfig().thresholds_for(evaluator) == (0.59, -0.99), evaluator
        assert RunSettings(deployment=deployment_with(evaluator=evaluator)).action_thresholds() == (
            0.59,
            -0.99,
        ), evaluator
    # A threshold the method sets is kept whatever the evaluator; the other still follows it.
    assert RunSettings(
        upper_threshold=0.3, deployment=deployment_with(evaluator="t5")
    ).action_thresholds() == (0.3, -0.99)
    assert RunSettings(lower_threshold=-0.6).action_thresholds() == (-0.4, -0.6)
    # A served run follows the operator's evaluator (CRAG_EVALUATOR) and method (CRAG_<NAME>).
    monkeypatch.setenv(env_name("evaluator"), "t5")
    served = GraphSettings()
    assert served.for_run(RunContext()).action_thresholds() == (0.59, -0.99)
    monkeypatch.setenv(env_name("upper_threshold"), "0.7")
    assert served.for_run(RunContext()).action_thresholds() == (0.7, -0.99)


def test_a_set_threshold_is_checked_against_the_evaluators_default() -> None:
    with pytest.raises(InvalidSettingError) as info:
        RunSettings(lower_threshold=0.5)
    assert str(info.value) == (
        "setting lower_threshold (0.5) must not be above upper_threshold (-0.4) "
        "(upper: the embedding evaluator's default)"
    )
    assert RunSettings(
        lower_threshold=0.5, deployment=deployment_with(evaluator="t5")
    ).action_thresholds() == (0.59, 0.5)


def test_thresholds_out_of_order_fail_before_retrieval(fake_components: FakeComponents) -> None:
    # A lower threshold above the embedding evaluator's own upper one: the run fails at once.
    built = build_graph(components=fake_components, method=MethodConfig(lower_threshold=0.2))
    with pytest.raises(InvalidSettingError, match="lower_threshold"):
        built.invoke(QUESTION, context=dict_context(top_k=3))
    # Thresholds given per run are refused as the method's, also before retrieval.
    with pytest.raises(InvalidSettingError, match="parameters of the method"):
        built.invoke(QUESTION, context=dict_context(upper_threshold=0.1, lower_threshold=0.2))
    assert fake_components.store.queries == []


def test_contradictory_ablations_chunking_and_allow_lists_are_refused() -> None:
    with pytest.raises(InvalidSettingError, match="cannot be forced and removed at once"):
        MethodConfig(force_action="correct", disable_action="correct")
    for schema in (IngestContext, RunIngestContext):
        with pytest.raises(InvalidSettingError, match=r"chunk_overlap \(1000\) must be below"):
            schema(chunk_size=1000, chunk_overlap=1000)
    with pytest.raises(InvalidSettingError, match="setting allowed_hosts: 'a b' is not"):
        RunSettings(deployment=deployment_with(allowed_hosts="a b"))


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
        ({"strips_kept": 2}, method_message("strips_kept")),
        ({"generator": "local:/tmp/model"}, deployment_message("generator")),
    ],
    ids=["int", "str", "unknown-key", "unknown-keys", "method", "deployment"],
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


def test_the_cli_gives_the_same_errors_and_takes_every_kind() -> None:
    with pytest.raises(InvalidSettingError, match=r"^unknown setting 'bogus'; per-run: "):
        parse_settings(["bogus=1"])
    with pytest.raises(InvalidSettingError, match=r"^setting chroma_ssl must be true or false"):
        parse_settings(["chroma_ssl=maybe"])
    with pytest.raises(InvalidSettingError, match=r"^setting top_k must be an integer, not 'x'"):
        parse_settings(["top_k=x"])
    # The CLI is the operator's: the method's parameters and deployment settings are allowed.
    parsed = parse_settings(
        ["store_path=/srv/store", "chroma_ssl=yes", "search_provider=searxng", "strips_kept=2"]
    )
    deployment = parsed.deployment
    assert (deployment.store_path, deployment.chroma_ssl, deployment.search_provider) == (
        "/srv/store",
        True,
        "searxng",
    )
    assert parsed.method.strips_kept == 2


@pytest.mark.parametrize(
    "context", [42, "chunk_size=10", {"bogus": 1}, {"store_path": "/x"}, {"top_k": 3}]
)
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
    with pytest.raises(InvalidSettingError, match="setting force_action is a parameter"):
        fake_graph.invoke(QUESTION, context=dict_context(force_action="incorrect"))
    # The graph built without a method follows the operator's (CRAG_<NAME>), read per run.
    monkeypatch.setenv("CRAG_FORCE_ACTION", "incorrect")
    assert fake_graph.invoke(QUESTION, context=dict_context(top_k=1))["action"] == "incorrect"
    # Deployment settings come from the environment too.
    monkeypatch.setenv("CRAG_MAX_QUESTION_CHARS", "10")
    with pytest.raises(InvalidQuestionError, match="the limit is 10"):
        fake_graph.invoke(QUESTION, context=dict_context(top_k=1))


def test_resolve_context_keeps_contexts_and_builds_mappings() -> None:
    given = Context(top_k=4, web_search=False)
    assert resolve_context(given) is given
    assert resolve_context({"top_k": 4, "web_search": False}) == given
    assert resolve_context(None) == Context()


# -- the operator's environment -----------------------------------------------------------------


def test_a_served_run_takes_the_operators_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAG_STORE_PATH", "/srv/store")
    monkeypatch.setenv("CRAG_CHROMA_PORT", "9000")
    monkeypatch.setenv("CRAG_DEFAULT_CORPUS", "off")
    monkeypatch.setenv("CRAG_SEARCH_PROVIDER", "searxng")
    monkeypatch.setenv("CRAG_PAGE_TIMEOUT", "2.5")
    monkeypatch.setenv("CRAG_STRIP_MODE", "words")
    run = GraphSettings().for_run(RunContext(top_k=3))
    assert (run.top_k, run.strip_mode) == (3, "words")
    assert (
        run.deployment.store_path,
        run.deployment.chroma_port,
        run.deployment.default_corpus,
    ) == ("/srv/store", 9000, False)
    assert (run.deployment.search_provider, run.deployment.page_timeout) == ("searxng", 2.5)
    # A graph built with its own method and deployment keeps them, whatever the environment.
    own = GraphSettings(MethodConfig(), deployment_with(store_path="/elsewhere"))
    run = own.for_run({"top_k": 3})
    assert (run.deployment.store_path, run.deployment.chroma_port, run.strip_mode) == (
        "/elsewhere",
        9000,
        "sentences",
    )
    assert deployment_with(deployment_settings(), chroma_port=1).chroma_port == 1


def test_the_ingest_root_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAG_INGEST_ROOT", "/srv/docs")
    monkeypatch.setenv("CRAG_MAX_DOCUMENT_CHARS", "100")
    run = IngestSettings.combine(RunIngestContext(chunk_size=500, chunk_overlap=50))
    assert (run.deployment.ingest_root, run.deployment.max_document_chars, run.chunk_size) == (
        "/srv/docs",
        100,
        500,
    )


def test_a_bad_environment_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAG_CHROMA_PORT", "eighty")
    with pytest.raises(InvalidSettingError, match="environment variable CRAG_CHROMA_PORT must be"):
        GraphSettings().for_run(RunContext())
    monkeypatch.setenv("CRAG_CHROMA_PORT", "70000")
    with pytest.raises(
        InvalidSettingError, match="environment variable CRAG_CHROMA_PORT must be at most 65535"
    ):
        deployment_settings()
    monkeypatch.delenv("CRAG_CHROMA_PORT")
    monkeypatch.setenv("CRAG_EVALUATOR_INT8", "sometimes")
    with pytest.raises(InvalidSettingError, match="CRAG_EVALUATOR_INT8 must be true or false"):
        deployment_settings()
    monkeypatch.delenv("CRAG_EVALUATOR_INT8")
    monkeypatch.setenv("CRAG_STRIPS_KEPT", "many")
    with pytest.raises(
        InvalidSettingError, match="environment variable CRAG_STRIPS_KEPT must be an integer"
    ):
        operator_method()


def test_the_generator_batch_size_is_the_operators_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert deployment_settings().generator_batch_size == 1, "batching off unless turned on"
    monkeypatch.setenv("CRAG_GENERATOR_BATCH_SIZE", "8")
    assert GraphSettings().for_run(RunContext()).deployment.generator_batch_size == 8
    assert (
        RunSettings(
            deployment=deployment_with(generator_batch_size=128)
        ).deployment.generator_batch_size
        == 128
    )
    with pytest.raises(InvalidSettingError, match="generator_batch_size must be at most 128"):
        RunSettings(deployment=deployment_with(generator_batch_size=129))
    monkeypatch.setenv("CRAG_GENERATOR_BATCH_SIZE", "0")
    with pytest.raises(InvalidSettingError, match="CRAG_GENERATOR_BATCH_SIZE must be at least 1"):
        GraphSettings().for_run(RunContext())
    monkeypatch.setenv("CRAG_GENERATOR_BATCH_SIZE", "eight")
    with pytest.raises(InvalidSettingError, match="CRAG_GENERATOR_BATCH_SIZE must be"):
        deployment_settings()


def test_every_deployment_setting_and_method_parameter_is_documented() -> None:
    example = (REPO / ".env.example").read_text(encoding="utf-8")
    reference = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    for name in DEPLOYMENT_NAMES:
        assert re.search(rf"^# ?{env_name(name)}=", example, re.MULTILINE), name
        assert env_name(name) in reference, name
    for name in METHOD_NAMES:
        assert env_name(name) in reference, name
