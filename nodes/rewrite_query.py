"""Rewrite query: the web-search query, the question itself or (the paper's method) keywords."""

from __future__ import annotations

import logging

from langgraph.runtime import Runtime

from crag.core.state import State, StateUpdate
from crag.generator.reply_cap import reply_cap
from crag.nodes.components import Components
from crag.nodes.progress import emit
from crag.prompts.rewrite import rewrite_turns
from crag.settings.run_settings import RunSettings
from crag.websearch.keywords import clean_query, fallback_keywords

logger = logging.getLogger(__name__)

REWRITE_TOKENS = 24
"""Longest keyword query, in tokens (at most three keywords)."""


def rewrite_query(
    state: State, runtime: Runtime[RunSettings], components: Components
) -> StateUpdate:
    """Set the web-search query: the question as asked, or the paper's keywords.

    With ``rewrite_for_search`` on, the query is at most three keywords the generator writes
    with the paper's few-shot prompt (as chat turns). Searching the question is the default
    because on the dev sets (simulated web, gold documents removed) it brought the answer to
    the generator more often than the keywords and answered more questions right (README,
    "Benchmark"); it also saves a generator call. With ``web_search`` off nothing is searched,
    so nothing is rewritten. When the model's keywords are empty or
    unusable, or the model fails, the query falls back to keywords taken deterministically
    from the question, and ``notes`` says so.
    """
    settings = runtime.context
    question = state["question"]
    if not settings.rewrite_for_search or not settings.web_search:
        emit(runtime, "rewrite_query", "rewritten", query=question, fallback=False)
        return {"search_query": question}
    raw = ""
    failure = ""
    emit(runtime, "rewrite_query", "rewriting")
    try:
        model = components.chat_model(settings.for_role("rewriter"))
        reply = model.invoke(rewrite_turns(question), **reply_cap(model, REWRITE_TOKENS))
        raw = reply.text
    except Exception as exc:  # noqa: BLE001 - any provider error: the fallback runs
        logger.warning("query rewriting failed: %s", exc)
        failure = f" (the rewriter failed: {exc})"
    query = clean_query(raw, question=question)
    if query is None:
        query = fallback_keywords(question)
        emit(runtime, "rewrite_query", "rewritten", query=query, fallback=True)
        return {
            "search_query": query,
            "notes": [f"query rewriting gave no usable keywords{failure}; searched for {query!r}"],
        }
    emit(runtime, "rewrite_query", "rewritten", query=query, fallback=False)
    return {"search_query": query}
