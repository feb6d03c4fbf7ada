"""Build and compile the CRAG graph."""

from __future__ import annotations

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from crag.core.context import Context
from crag.core.node_runtime import graph_node
from crag.core.run_context import RunContext
from crag.core.state import ChatInputState, ChatOutputState, State
from crag.graph.routers import route_action, route_start
from crag.nodes.abstain import answer_or_abstain
from crag.nodes.contextualize import contextualize, retrieve_with_input_notes
from crag.nodes.decide_action import decide_action
from crag.nodes.grade import grade
from crag.nodes.refine import refine
from crag.nodes.rewrite_query import rewrite_query
from crag.nodes.web_search import web_search

ChatBuilder = StateGraph[State, Context, ChatInputState, ChatOutputState]
"""A graph builder with the CRAG graph's input and output (a question or chat messages)."""

GRAPH_NAME = "crag"


def chat_builder() -> ChatBuilder:
    """A builder with the CRAG graph's start: [contextualize →] retrieve (nothing after).

    The CRAG graph and the chat baselines (``graph/baselines.py``) build on it.

    Chat runs (``messages`` input, or a thread with earlier turns) start at contextualize; a
    single question at retrieve.
    """
    builder = StateGraph(
        State,
        context_schema=RunContext,
        input_schema=ChatInputState,
        output_schema=ChatOutputState,
    )
    builder.add_node("contextualize", graph_node(contextualize))
    builder.add_node("retrieve", graph_node(retrieve_with_input_notes))
    builder.add_conditional_edges(START, route_start, ["contextualize", "retrieve"])
    builder.add_edge("contextualize", "retrieve")
    return builder


def build_graph(
    checkpointer: BaseCheckpointSaver[str] | None = None,
) -> CompiledStateGraph[State, Context, ChatInputState, ChatOutputState]:
    """Return the compiled Corrective RAG graph.

    [contextualize →] retrieve → grade → decide_action, then by action: Correct → refine → generate;
    Incorrect → rewrite_query → web_search → generate; Ambiguous → both branches in parallel,
    joined at generate (a deferred node, so it runs once after every active branch is done).
    A run with chat messages (``messages`` input, or a thread with earlier turns) starts at
    contextualize, which picks the question and makes a follow-up standalone; a single
    ``question`` starts at retrieve. generate appends the answer to ``messages``; when no
    knowledge was found it abstains instead of asking the generator (nodes/abstain.py).

    The context schema is :data:`~crag.core.run_context.RunContext`: a dict context (a server run's,
    or one given in Python) carries per-run settings only; ``Context(...)`` sets anything.
    """
    # Every node gets the run's resolved settings; those that call models stop early when an
    # async run is cancelled (graph/node_runtime.py, graph/cancellation.py).
    builder = chat_builder()
    builder.add_node("grade", graph_node(grade))
    builder.add_node("decide_action", graph_node(decide_action, cancellable=False))
    builder.add_node("refine", graph_node(refine))
    builder.add_node("rewrite_query", graph_node(rewrite_query))
    builder.add_node("web_search", graph_node(web_search))
    builder.add_node("generate", graph_node(answer_or_abstain), defer=True)

    builder.add_edge("retrieve", "grade")
    builder.add_edge("grade", "decide_action")
    builder.add_conditional_edges("decide_action", route_action, ["refine", "rewrite_query"])
    builder.add_edge("refine", "generate")
    builder.add_edge("rewrite_query", "web_search")
    builder.add_edge("web_search", "generate")
    builder.add_edge("generate", END)
    return builder.compile(checkpointer=checkpointer, name=GRAPH_NAME)


graph = build_graph()
"""The compiled graph that ``langgraph.json`` serves and Python users import."""
