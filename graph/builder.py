"""Build and compile the CRAG graph with the components it is given."""

from __future__ import annotations

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from crag.core.state import ChatInputState, ChatOutputState, State
from crag.graph.routers import route_action, route_answer, route_start
from crag.nodes.abstain import abstain, decide_answer
from crag.nodes.components import Components
from crag.nodes.contextualize import contextualize, retrieve_with_input_notes
from crag.nodes.decide_action import decide_action
from crag.nodes.generate import generate
from crag.nodes.grade import grade
from crag.nodes.node_runtime import GraphSettings, graph_node
from crag.nodes.refine import refine
from crag.nodes.rewrite_query import rewrite_query
from crag.nodes.web_search import web_search
from crag.settings.context import Context
from crag.settings.deployment import DeploymentSettings
from crag.settings.method import MethodConfig
from crag.settings.run_context import QUESTION_SCHEMA

ChatBuilder = StateGraph[State, Context, ChatInputState, ChatOutputState]
"""A graph builder with the CRAG graph's input and output (a question or chat messages)."""

CragGraph = CompiledStateGraph[State, Context, ChatInputState, ChatOutputState]
"""The compiled CRAG graph (and the chat baselines: the same input and output)."""

GRAPH_NAME = "crag"


def chat_builder(components: Components, settings: GraphSettings) -> ChatBuilder:
    """A builder with the CRAG graph's start: [contextualize →] retrieve (nothing after).

    The CRAG graph and the chat baselines (``graph/baselines.py``) build on it; both nodes use
    ``components`` and read the run's context under ``settings`` (the graph's method and
    deployment).

    Chat runs (``messages`` input, or a thread with earlier turns) start at contextualize; a
    single question at retrieve.
    """
    builder = StateGraph(
        State,
        context_schema=QUESTION_SCHEMA,
        input_schema=ChatInputState,
        output_schema=ChatOutputState,
    )
    builder.add_node("contextualize", graph_node(contextualize, settings, components=components))
    builder.add_node(
        "retrieve", graph_node(retrieve_with_input_notes, settings, components=components)
    )
    builder.add_conditional_edges(START, route_start, ["contextualize", "retrieve"])
    builder.add_edge("contextualize", "retrieve")
    return builder


def build_graph(
    components: Components,
    checkpointer: BaseCheckpointSaver[str] | None = None,
    *,
    method: MethodConfig | None = None,
    deployment: DeploymentSettings | None = None,
) -> CragGraph:
    """Return the compiled Corrective RAG graph, its nodes calling ``components``.

    [contextualize →] retrieve → grade → decide_action, then by action: Correct → refine;
    Incorrect → rewrite_query → web_search; Ambiguous → both branches in parallel. The branches
    join at decide_answer (a deferred node, so it runs once after every active branch is done),
    which records whether the knowledge found supports an answer; then generate, or abstain
    (the fixed abstention sentence, no generator call; nodes/abstain.py) when none was found.
    A run with chat messages (``messages`` input, or a thread with earlier turns) starts at
    contextualize, which picks the question and makes a follow-up standalone; a single
    ``question`` starts at retrieve. generate and abstain append the answer to ``messages``.

    Three kinds of setting: each run's context is a :class:`~crag.settings.context.Context` (the
    schema is :data:`~crag.settings.run_context.RunContext`: per-run settings only); ``method``
    (default: the operator's, :func:`~crag.settings.method.operator_method`) and ``deployment``
    (default: the operator's environment, :func:`~crag.settings.deployment.deployment_settings`)
    are the same for every run of the graph. The app's graphs, built with its real components,
    are in :mod:`crag.app.graphs`.
    """
    # Every node gets the run's resolved settings and, where it calls them, the components;
    # those that call models stop early when an async run is cancelled (nodes/node_runtime.py,
    # core/cancellation.py).
    settings = GraphSettings(method, deployment)
    builder = chat_builder(components, settings)
    builder.add_node("grade", graph_node(grade, settings, components=components))
    builder.add_node("decide_action", graph_node(decide_action, settings, cancellable=False))
    builder.add_node("refine", graph_node(refine, settings, components=components))
    builder.add_node("rewrite_query", graph_node(rewrite_query, settings, components=components))
    builder.add_node("web_search", graph_node(web_search, settings, components=components))
    builder.add_node(
        "decide_answer", graph_node(decide_answer, settings, cancellable=False), defer=True
    )
    builder.add_node("generate", graph_node(generate, settings, components=components))
    builder.add_node("abstain", graph_node(abstain, settings, cancellable=False))

    builder.add_edge("retrieve", "grade")
    builder.add_edge("grade", "decide_action")
    builder.add_conditional_edges("decide_action", route_action, ["refine", "rewrite_query"])
    builder.add_edge("refine", "decide_answer")
    builder.add_edge("rewrite_query", "web_search")
    builder.add_edge("web_search", "decide_answer")
    builder.add_conditional_edges("decide_answer", route_answer, ["generate", "abstain"])
    builder.add_edge("generate", END)
    builder.add_edge("abstain", END)
    return builder.compile(checkpointer=checkpointer, name=GRAPH_NAME)
