"""The app's compiled graphs, built with its real components: what the server, CLI and API run.

``langgraph.json`` serves :data:`graph` (``crag``), :data:`ingest_graph` (``ingest``),
:data:`rag_graph` (``rag``) and :data:`tutorial_graph` (``crag-tutorial``); ``crag ask`` and
:func:`crag.app.api.ask` run :data:`graph`, and the threaded graphs of :mod:`crag.app.api`
share :data:`components`. Importing this module builds the graphs and loads no model:
:class:`~crag.app.wiring.DefaultComponents` loads each model on first use (the first run).
Each takes one run at a time per thread across server replicas that share a PostgreSQL
(:mod:`crag.app.thread_run_lock`), and is unchanged without one.
"""

from __future__ import annotations

from crag.app.thread_run_lock import one_run_per_thread
from crag.app.wiring import DefaultComponents
from crag.graph.baselines import build_rag_graph, build_tutorial_graph
from crag.graph.builder import build_graph
from crag.graph.ingest_graph import build_ingest_graph

components = DefaultComponents()
"""The process's components: each store and model loaded once, shared by every graph here."""

graph = one_run_per_thread(build_graph(components=components))
"""The CRAG graph, served as ``crag``."""
ingest_graph = one_run_per_thread(build_ingest_graph())
"""The ingestion graph, served as ``ingest``."""
rag_graph = one_run_per_thread(build_rag_graph(components))
"""Standard RAG, served as ``rag`` to compare with CRAG in Studio."""
tutorial_graph = one_run_per_thread(build_tutorial_graph(components))
"""The LangGraph tutorial's corrective RAG, served as ``crag-tutorial``."""
