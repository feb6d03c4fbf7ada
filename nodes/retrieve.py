"""Retrieve: the top-k passages for the question from the Chroma store."""

from __future__ import annotations

import logging
from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import Overwrite

from graph.components import current_components
from graph.context import Context, resolve_context
from graph.progress import emit
from graph.state import RetrievedPassage, State
from graph.validation import validate_question

logger = logging.getLogger(__name__)


def retrieve(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Validate the question, reset the per-run fields and fetch the top-k passages.

    A thread keeps its state between runs on the server, so everything a run produces is
    cleared here, at the start of each run.
    """
    context = resolve_context(runtime.context)
    question = validate_question(state.get("question"), context.max_question_chars)
    store = current_components().vectorstore(context)
    hits = store.similarity_search(question, k=context.top_k)
    documents: list[RetrievedPassage] = [
        {
            "text": doc.page_content,
            "source": str(doc.metadata.get("source", "unknown")),
            "chunk": int(doc.metadata.get("chunk", 0)),
            "score": None,
        }
        for doc in hits
    ]
    logger.info("retrieved %d passages", len(documents))
    emit(runtime, "retrieve", "retrieved", passages=len(documents), top_k=context.top_k)
    return {
        "question": question,
        "documents": documents,
        "notes": Overwrite([]),
        "answer": "",
        "knowledge": [],
        "citations": [],
        "abstained": False,
        "internal_knowledge": [],
        "external_knowledge": [],
        "search_query": "",
    }
