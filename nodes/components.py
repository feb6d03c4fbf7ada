"""The components the nodes call: what a graph is built with.

A graph's builder (:func:`crag.graph.builder.build_graph` and the baselines) takes a
:class:`Components` and binds it into every node that needs one
(:func:`crag.nodes.node_runtime.graph_node`); a node gets it as its third argument and asks it
for the vector store, evaluator, chat model and search provider matching the run's
:class:`~crag.settings.run_settings.RunSettings`. The app's components
(:class:`crag.app.wiring.DefaultComponents`) load each real component once per process, on
first use; tests build graphs with fakes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.vectorstores import VectorStore

    from crag.evaluator.base import RetrievalEvaluator
    from crag.settings.run_settings import RunSettings
    from crag.websearch.base import SearchProvider


class Components(Protocol):
    """Supplies each node with the components a run's settings ask for."""

    def vectorstore(self, settings: RunSettings) -> VectorStore:
        """The store passages are retrieved from."""
        ...

    def evaluator(self, settings: RunSettings) -> RetrievalEvaluator:
        """The retrieval evaluator (grade, refine and web selection share it)."""
        ...

    def chat_model(self, settings: RunSettings) -> BaseChatModel:
        """The generator, also used to rewrite queries."""
        ...

    def search(self, settings: RunSettings) -> SearchProvider:
        """The web search provider."""
        ...
