"""The graphs CRAG is measured against, built from the same nodes and components.

* ``no-retrieval``: the generator answers alone.
* ``rag``: standard RAG, the top-k passages straight to the generator.
* ``rag-web``: standard RAG with web results always added (the paper's Table 5 analogue):
  the question itself is searched and the first results' paragraphs are added unselected
  (run it with ``select_web_knowledge`` off, as ``crag-bench eval`` does, for plain RAG + web).
* ``tutorial``: the LangGraph tutorial's corrective RAG, the usual peer implementation: LLM
  yes/no grade per passage, a rewritten web search whenever any passage is judged irrelevant,
  no refinement.

Each is built with the components it is given (as the CRAG graph is), takes the same context
as the CRAG graph and returns the same output fields. Those that
retrieve (``rag``, ``rag-web``, ``tutorial``) also take the same input: a ``question`` or chat
``messages``, a follow-up made standalone first (``contextualize``, as in the CRAG graph), the
answer appended to ``messages``. ``no-retrieval`` takes a question only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from crag.core.state import InputState, OutputState, State
from crag.graph.builder import ChatBuilder, CragGraph, chat_builder
from crag.graph.routers import route_tutorial
from crag.nodes.closed_book import answer_closed_book
from crag.nodes.components import Components
from crag.nodes.generate import generate
from crag.nodes.node_runtime import GraphSettings, graph_node
from crag.nodes.pass_passages import pass_passages
from crag.nodes.tutorial import grade_binary, transform_query, tutorial_web_search
from crag.nodes.web_search import web_search
from crag.settings.context import Context
from crag.settings.deployment import DeploymentSettings
from crag.settings.method import MethodConfig
from crag.settings.run_context import QUESTION_SCHEMA

Graph = CompiledStateGraph[State, Context, InputState, OutputState]
"""A graph that takes a question only (``no-retrieval``)."""
ChatGraph = CragGraph
"""A graph that takes the CRAG graph's input: a question or chat messages."""


def build_no_retrieval_graph(
    components: Components,
    *,
    method: MethodConfig | None = None,
    deployment: DeploymentSettings | None = None,
) -> Graph:
    """The generator alone: no store, no web."""
    settings = GraphSettings(method, deployment)
    builder = StateGraph(
        State, context_schema=QUESTION_SCHEMA, input_schema=InputState, output_schema=OutputState
    )
    builder.add_node("generate", graph_node(answer_closed_book, settings, components=components))
    builder.add_edge(START, "generate")
    builder.add_edge("generate", END)
    return builder.compile(name="no-retrieval")


def _retrieve_and_pass(components: Components, settings: GraphSettings) -> ChatBuilder:
    """A builder with standard RAG's first steps: [contextualize →] retrieve → pass_passages."""
    builder = chat_builder(components, settings)
    builder.add_node("pass_passages", graph_node(pass_passages, settings, cancellable=False))
    builder.add_edge("retrieve", "pass_passages")
    return builder


def build_rag_graph(
    components: Components,
    *,
    method: MethodConfig | None = None,
    deployment: DeploymentSettings | None = None,
) -> ChatGraph:
    """Standard RAG: retrieve → pass_passages → generate."""
    settings = GraphSettings(method, deployment)
    builder = _retrieve_and_pass(components, settings)
    builder.add_node("generate", graph_node(generate, settings, components=components))
    builder.add_edge("pass_passages", "generate")
    builder.add_edge("generate", END)
    return builder.compile(name="rag")


def build_rag_web_graph(
    components: Components,
    *,
    method: MethodConfig | None = None,
    deployment: DeploymentSettings | None = None,
) -> ChatGraph:
    """RAG with web results always added: retrieve → (pass_passages ∥ web_search) → generate."""
    settings = GraphSettings(method, deployment)
    builder = _retrieve_and_pass(components, settings)
    builder.add_node("web_search", graph_node(web_search, settings, components=components))
    builder.add_node("generate", graph_node(generate, settings, components=components), defer=True)
    builder.add_edge("retrieve", "web_search")
    builder.add_edge("pass_passages", "generate")
    builder.add_edge("web_search", "generate")
    builder.add_edge("generate", END)
    return builder.compile(name="rag-web")


def build_tutorial_graph(
    components: Components,
    *,
    method: MethodConfig | None = None,
    deployment: DeploymentSettings | None = None,
) -> ChatGraph:
    """Tutorial: retrieve → grade → [any irrelevant: transform_query → web_search] → generate.

    Chat runs start at contextualize, as in every chat graph.
    """
    settings = GraphSettings(method, deployment)
    builder = chat_builder(components, settings)
    builder.add_node("grade", graph_node(grade_binary, settings, components=components))
    builder.add_node(
        "transform_query", graph_node(transform_query, settings, components=components)
    )
    builder.add_node("web_search", graph_node(tutorial_web_search, settings, components=components))
    builder.add_node("generate", graph_node(generate, settings, components=components))
    builder.add_edge("retrieve", "grade")
    builder.add_conditional_edges("grade", route_tutorial, ["transform_query", "generate"])
    builder.add_edge("transform_query", "web_search")
    builder.add_edge("web_search", "generate")
    builder.add_edge("generate", END)
    return builder.compile(name="tutorial")


BASELINES: dict[str, Callable[..., Any]] = {
    "no-retrieval": build_no_retrieval_graph,
    "rag": build_rag_graph,
    "rag-web": build_rag_web_graph,
    "tutorial": build_tutorial_graph,
}
"""Baseline graph builders by name, each taking the components its nodes call (and, as
keywords, the ``method`` and ``deployment`` of :func:`~crag.graph.builder.build_graph`)."""
