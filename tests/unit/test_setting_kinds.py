"""The three kinds of setting: a run may not set the method's parameters or the deployment's.

Per-run settings (:class:`Context`, :class:`IngestContext`), the method's parameters
(:class:`MethodConfig`) and the deployment settings (:class:`DeploymentSettings`) are each
declared once: a per-run context that names one of the others is refused with an error that
names the setting and says who sets it.
"""

from __future__ import annotations

from typing import Any

import pytest

from crag.graph.builder import CragGraph
from crag.settings.context import Context, IngestContext, InvalidSettingError
from crag.settings.deployment import DeploymentSettings
from crag.settings.method import MethodConfig
from crag.settings.run_context import RunContext, RunIngestContext
from crag.settings.run_settings import IngestSettings, RunSettings
from crag.settings.setting_kinds import DEPLOYMENT_NAMES, METHOD_NAMES, kind_of
from tests.fakes import dict_context

RUN_NAMES = frozenset(Context.model_fields)
INGEST_NAMES = frozenset(IngestContext.model_fields)


def method_refusal(name: str) -> str:
    return (
        f"setting {name} is a parameter of the method: set where the graph is built "
        "(build_graph(..., method=MethodConfig(...)), crag --set, or the operator's "
        f"environment: CRAG_{name.upper()}); a run may not"
    )


def deployment_refusal(name: str) -> str:
    return (
        f"setting {name} is a deployment setting: the server's operator sets it "
        f"(environment variable CRAG_{name.upper()}); a run may not"
    )


def test_the_three_kinds_share_no_name() -> None:
    assert frozenset(MethodConfig.model_fields) == METHOD_NAMES
    assert frozenset(DeploymentSettings.model_fields) == DEPLOYMENT_NAMES
    assert not RUN_NAMES & METHOD_NAMES
    assert not RUN_NAMES & DEPLOYMENT_NAMES
    assert not METHOD_NAMES & DEPLOYMENT_NAMES
    assert not INGEST_NAMES & (RUN_NAMES | METHOD_NAMES | DEPLOYMENT_NAMES)
    assert {kind_of(name) for name in RUN_NAMES | INGEST_NAMES} == {None}
    assert {kind_of(name) for name in METHOD_NAMES} == {"method"}
    assert {kind_of(name) for name in DEPLOYMENT_NAMES} == {"deployment"}
    # the joined settings only inherit them and hold the operator's whole: nothing redeclared
    assert set(RunSettings.model_fields) == RUN_NAMES | METHOD_NAMES | {"deployment"}
    assert set(IngestSettings.model_fields) == INGEST_NAMES | {"deployment"}
    assert isinstance(RunSettings().deployment, DeploymentSettings)


@pytest.mark.parametrize("schema", [Context, RunContext], ids=["Context", "RunContext"])
@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("force_action", "correct", method_refusal("force_action")),
        ("strips_kept", 2, method_refusal("strips_kept")),
        ("store_path", "/elsewhere", deployment_refusal("store_path")),
        ("evaluator_batch_size", 8, deployment_refusal("evaluator_batch_size")),
        ("search_backend", "html", deployment_refusal("search_backend")),
    ],
)
def test_a_run_that_names_another_kinds_setting_is_refused_by_name(
    schema: Any, name: str, value: Any, message: str
) -> None:
    with pytest.raises(InvalidSettingError) as info:
        schema(top_k=3, **{name: value})
    assert str(info.value) == message


@pytest.mark.parametrize("schema", [IngestContext, RunIngestContext], ids=["plain", "served"])
def test_an_ingestion_run_may_set_its_chunking_only(schema: Any) -> None:
    with pytest.raises(InvalidSettingError) as info:
        schema(chunk_size=500, collection="other")
    assert str(info.value) == deployment_refusal("collection")
    with pytest.raises(InvalidSettingError) as info:
        schema(chunk_size=500, top_k=3)
    assert str(info.value).startswith("unknown setting 'top_k'; valid: chunk_overlap, chunk_size")
    assert schema(chunk_size=500).chunk_size == 500


def test_several_are_named_together_the_deployment_settings_first() -> None:
    with pytest.raises(InvalidSettingError) as info:
        Context(strip_margin=0, store_path="x", generator="smollm2")  # type: ignore[call-arg]
    assert str(info.value) == (
        "settings generator, store_path are deployment settings: the server's operator sets "
        "them (environment variables CRAG_GENERATOR, CRAG_STORE_PATH); a run may not"
    )
    with pytest.raises(InvalidSettingError) as info:
        Context(strip_margin=0, force_action="correct")  # type: ignore[call-arg]
    assert str(info.value).startswith(
        "settings force_action, strip_margin are parameters of the method: set where the graph "
        "is built"
    )
    assert "CRAG_FORCE_ACTION, CRAG_STRIP_MARGIN); a run may not" in str(info.value)


def test_an_unknown_name_is_not_taken_for_another_kind() -> None:
    with pytest.raises(InvalidSettingError) as info:
        Context(strip_margn=0)  # type: ignore[call-arg]
    assert str(info.value).startswith("unknown setting 'strip_margn'; valid: ")
    assert set(str(info.value).split("valid: ", 1)[1].split(", ")) == RUN_NAMES


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"top_k": 3, "knowledge_order": "score"}, method_refusal("knowledge_order")),
        ({"top_k": 3, "allowed_hosts": "10.0.0.0/8"}, deployment_refusal("allowed_hosts")),
    ],
)
def test_a_graph_refuses_them_in_a_runs_context_before_any_work(
    fake_graph: CragGraph, fake_components: Any, given: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidSettingError) as info:
        fake_graph.invoke({"question": "Who painted the Mona Lisa?"}, context=dict_context(**given))
    assert str(info.value) == message
    assert fake_components.store.queries == []
