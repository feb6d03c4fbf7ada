"""The ingestion graph: documents in, store updated, the ingestion report out.

Served next to the CRAG graph (``langgraph.json``: ``ingest``), so that a LangGraph server, and
Studio, can fill the store the questions are answered from. One node, ``ingest``
(:mod:`crag.nodes.ingest`: what a run may send, what it may change, what it may cost); its
state is :mod:`crag.nodes.ingest_state`'s.
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from crag.core.cancellation import cancellable_node
from crag.nodes.ingest import ingest_under
from crag.nodes.ingest_state import IngestInput, IngestOutput, IngestState
from crag.settings.context import IngestContext
from crag.settings.deployment import DeploymentSettings
from crag.settings.run_context import INGEST_SCHEMA

GRAPH_NAME = "ingest"


def build_ingest_graph(
    deployment: DeploymentSettings | None = None,
) -> CompiledStateGraph[IngestState, IngestContext, IngestInput, IngestOutput]:
    """Return the compiled ingestion graph (one node: ``ingest``).

    It needs no components: the store is opened from ``deployment`` (default: the operator's
    environment, read when a run starts); a run sets its chunking only. The served one is
    :data:`crag.app.graphs.ingest_graph`.
    """
    builder = StateGraph(
        IngestState,
        context_schema=INGEST_SCHEMA,
        input_schema=IngestInput,
        output_schema=IngestOutput,
    )
    # Cancellable: a cancelled run stops at its next batch and removes what it left unfinished.
    builder.add_node("ingest", cancellable_node(ingest_under(deployment)))
    builder.add_edge(START, "ingest")
    builder.add_edge("ingest", END)
    return builder.compile(name=GRAPH_NAME)
