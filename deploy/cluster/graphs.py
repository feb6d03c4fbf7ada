"""crag's served graphs, from a file: Aegra takes a graph's path as a file, not a module.

``aegra.json`` names ``./graphs.py:graph`` (paths relative to it). Aegra loads this file once
per graph, under a module name of its own; every copy re-exports the same graphs of
:mod:`crag.app.served_graphs` (whose runs need their caller), so the process still builds one
set of components and loads each model once.
"""

from crag.app.served_graphs import graph, ingest_graph, rag_graph, tutorial_graph

__all__ = ["graph", "ingest_graph", "rag_graph", "tutorial_graph"]
