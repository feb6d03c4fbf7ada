"""Web search: external knowledge from the web, selected by the evaluator."""

from __future__ import annotations

import logging
import re
from typing import Any

from langgraph.runtime import Runtime

from graph.components import current_components
from graph.context import Context, resolve_context
from graph.state import KnowledgeStrip, State
from knowledge.selection import select_top
from websearch.base import SearchUnavailableError
from websearch.ranking import rank_results, wikipedia_query

logger = logging.getLogger(__name__)

_SITE_SUFFIX = re.compile(r"\s+[-|\u2013\u2014]\s+(?:Wikipedia|Wikimedia)\b.*$", re.I)


def page_title(title: str) -> str:
    """A result's title without the site suffix ("Mona Lisa - Wikipedia" -> "Mona Lisa")."""
    return _SITE_SUFFIX.sub("", " ".join(title.split())) or "Untitled"


def web_search(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Search the web for the rewritten query and keep the relevant results.

    Wikipedia is preferred as in the paper (query bias and ranking). Result snippets are
    scored by the evaluator in one batch and the best ones above ``strip_threshold`` become
    the external knowledge. A search engine that is down, slow or rate-limited does not stop
    the run: the graph goes on with the knowledge it has and ``notes`` says what happened.
    """
    context = resolve_context(runtime.context)
    components = current_components()
    query = state.get("search_query") or state["question"]
    if context.prefer_wikipedia:
        query = wikipedia_query(query)
    try:
        provider = components.search(context)
        results = provider.search(query, max_results=context.web_results)
    except SearchUnavailableError as exc:
        logger.warning("web search unavailable: %s", exc)
        return {
            "external_knowledge": [],
            "notes": [
                f"web search unavailable: {str(exc).rstrip('.')}; answered without web knowledge"
            ],
        }
    results = rank_results(results, prefer_wikipedia=context.prefer_wikipedia)
    results = results[: context.web_results]
    candidates = [r for r in results if r.snippet.strip()]
    if not candidates:
        return {
            "external_knowledge": [],
            "notes": [f"web search found nothing usable for {query!r}"],
        }
    evaluator = components.evaluator(context)
    scores = evaluator.score(state["question"], [f"{r.title}: {r.snippet}" for r in candidates])
    strips: list[KnowledgeStrip] = [
        {
            "text": r.snippet.strip(),
            "source": r.url,
            "chunk": None,
            "origin": "external",
            "score": score,
        }
        for r, score in zip(candidates, scores, strict=True)
    ]
    kept = select_top(strips, scores, context.strips_kept, context.strip_threshold)
    update: dict[str, Any] = {"external_knowledge": kept}
    if not kept:
        update["notes"] = [
            f"web search returned {len(candidates)} results but none scored above "
            f"{context.strip_threshold}"
        ]
    return update
