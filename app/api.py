"""Python entry points: ask a question, ingest files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from graph.builder import graph
from graph.context import Context
from graph.state import OutputState

OUTPUT_KEYS = ("answer", "action", "documents", "knowledge", "notes")


def ask(question: str, context: Context | None = None) -> OutputState:
    """Run the CRAG graph on one question and return its output state."""
    result = graph.invoke({"question": question}, context=context or Context())
    return {key: result[key] for key in OUTPUT_KEYS if key in result}  # type: ignore[return-value]


def ingest(paths: Sequence[str | Path], context: Context | None = None) -> Any:
    """Ingest files or directories into the configured store; return the ingestion report."""
    from vectorstore.embeddings import load_embeddings
    from vectorstore.ingest import ingest as ingest_paths
    from vectorstore.store import open_store

    context = context or Context()
    store = open_store(
        context.store_path, context.collection, load_embeddings(context.embedder), create=True
    )
    return ingest_paths(list(paths), store)
