"""Web search: external knowledge from the web, selected by the evaluator."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from langgraph.runtime import Runtime

from crag.core.state import KnowledgeStrip, State, StateUpdate
from crag.evaluator.base import RetrievalEvaluator, score_strips
from crag.knowledge.selection import select_top
from crag.knowledge.strips import decompose
from crag.nodes.components import Components
from crag.nodes.progress import emit
from crag.nodes.scoring import score_or_fall_back
from crag.settings.run_settings import RunSettings
from crag.websearch.base import SearchResult, SearchUnavailableError
from crag.websearch.ranking import rank_results, wikipedia_query
from crag.websearch.reader import ReaderOptions, WebPassage, WebReading, cached_search, read_results

logger = logging.getLogger(__name__)

ONLY_WIKIPEDIA_RESULTS = 10
"""Results asked for when only Wikipedia pages are kept (many others are dropped)."""


def reader_options(settings: RunSettings) -> ReaderOptions:
    """The page-reading settings of a run."""
    return ReaderOptions(
        timeout=settings.deployment.page_timeout,
        max_bytes=settings.deployment.max_page_bytes,
        max_redirects=settings.deployment.max_redirects,
        allowed_hosts=settings.deployment.allowed_hosts,
        cache_ttl=settings.deployment.web_cache_ttl,
    )


WEB_OFF = "web search is off for this run (setting web_search): nothing was searched"
"""The note (and ``web_reason``) of a run that turned the web search off."""


def web_search(state: State, runtime: Runtime[RunSettings], components: Components) -> StateUpdate:
    """Search the web for the rewritten query, read the top pages, keep what is relevant.

    Wikipedia is preferred as in the paper (query bias and ranking; ``only_wikipedia`` keeps
    nothing else). The pages of the top ``pages_to_read`` results are read concurrently and
    split into title-prefixed paragraphs; a page that cannot be read gives its search snippet
    instead. The paragraphs and snippets are scored by the evaluator in one batch (or, with
    ``refine_web_knowledge``, first decomposed into strips as retrieved passages are) and the
    best ``strips_kept`` above ``strip_threshold`` (in the ``passages`` knowledge form: the best
    ``top_k`` paragraphs, whole) become the external knowledge, each with its URL. A search
    engine or page that is down, slow, refused or rate-limited does not stop the run: the graph
    goes on with the knowledge it has and ``notes`` says what happened. When the web gave no
    knowledge, ``web_reason`` says why (the note's words, for the abstention note).
    A run with ``web_search`` off sends nothing: no knowledge, and a note saying so.
    """
    settings = runtime.context
    if not settings.web_search:
        emit(runtime, "web_search", "off")
        return {"external_knowledge": [], "notes": [WEB_OFF], "web_reason": WEB_OFF}
    query, wanted = _query(state, settings)
    emit(runtime, "web_search", "searching", query=query)
    try:
        results = _ranked_results(components, settings, query, wanted)
    except SearchUnavailableError as exc:
        logger.warning("web search unavailable: %s", exc)
        emit(runtime, "web_search", "unavailable", reason=str(exc))
        reason = f"web search unavailable: {str(exc).rstrip('.')}"
        return {
            "external_knowledge": [],
            "notes": [f"{reason}; answered without web knowledge"],
            "web_reason": reason,
        }
    emit(runtime, "web_search", "searched", results=len(results))
    if not results:
        only = " (only_wikipedia is on)" if settings.only_wikipedia else ""
        reason = f"web search found nothing usable for {query!r}{only}"
        return {"external_knowledge": [], "notes": [reason], "web_reason": reason}
    reading = _read(runtime, results)
    update = _select(state, components, state["question"], reading, settings, query)
    emit(
        runtime,
        "web_search",
        "selected",
        passages=len(reading.passages),
        kept=len(update["external_knowledge"]),
    )
    return update


def _query(state: State, settings: RunSettings) -> tuple[str, int]:
    """The query (biased towards Wikipedia where preferred) and how many results to ask for."""
    query = state.get("search_query") or state["question"]
    if settings.prefer_wikipedia or settings.only_wikipedia:
        query = wikipedia_query(query)
    wanted = settings.web_results
    if settings.only_wikipedia:
        wanted = max(wanted, ONLY_WIKIPEDIA_RESULTS)
    return query, wanted


def _ranked_results(
    components: Components, settings: RunSettings, query: str, wanted: int
) -> list[SearchResult]:
    """The run's top ``web_results`` hits for ``query``, Wikipedia first where preferred.

    Raises:
        SearchUnavailableError: the search engine could not be used.
    """
    provider = components.search(settings)
    results = cached_search(provider, query, wanted, ttl=settings.deployment.web_cache_ttl)
    ranked = rank_results(
        results, prefer_wikipedia=settings.prefer_wikipedia, only_wikipedia=settings.only_wikipedia
    )
    return ranked[: settings.web_results]


def _read(runtime: Runtime[RunSettings], results: list[SearchResult]) -> WebReading:
    """Read the pages of the top ``pages_to_read`` results (none with ``fetch_pages`` off)."""
    settings = runtime.context
    pages = settings.pages_to_read if settings.fetch_pages else 0

    def page_read(url: str, ok: bool, done: int, total: int) -> None:
        emit(runtime, "web_search", "page", url=url, ok=ok, done=done, total=total)

    return read_results(results, pages=pages, options=reader_options(settings), on_page=page_read)


def _select(
    state: State,
    components: Components,
    question: str,
    reading: WebReading,
    settings: RunSettings,
    query: str,
) -> StateUpdate:
    """Score every passage in one batch and keep the best (the paper's filter step).

    With ``select_web_knowledge`` off (an ablation) the first ``strips_kept`` passages in
    result order are kept unscored. The page-reading notes come first; when nothing was kept
    because nothing was found or nothing scored high enough, the reason follows them and is
    the update's ``web_reason`` too.
    """
    notes = list(reading.notes)
    passages = reading.passages
    if not passages:
        reason = f"web search found nothing usable for {query!r}"
        return {"external_knowledge": [], "notes": [*notes, reason], "web_reason": reason}
    if not settings.select_web_knowledge:
        kept: list[KnowledgeStrip] = [
            {"text": p.text, "source": p.source, "chunk": None, "origin": "external", "score": None}
            for p in passages[: settings.strips_kept]
        ]
    else:
        kept, fallback_notes = _best(state, components, question, passages, settings)
        notes.extend(fallback_notes)
    update: StateUpdate = {"external_knowledge": kept}
    if not kept and settings.select_web_knowledge:
        what = "paragraphs and snippets" if any(p.from_page for p in passages) else "results"
        reason = (
            f"web search returned {len(passages)} {what} but none scored above "
            f"{settings.strip_threshold}"
        )
        notes.append(reason)
        update["web_reason"] = reason
    if notes:
        update["notes"] = notes
    return update


def _best(
    state: State,
    components: Components,
    question: str,
    passages: Sequence[WebPassage],
    settings: RunSettings,
) -> tuple[list[KnowledgeStrip], list[str]]:
    """Score every passage or strip in one evaluator call; keep the best (maybe none).

    In the ``passages`` knowledge form the best ``top_k`` paragraphs above ``strip_threshold``
    are kept whole (no margin). Otherwise, with ``refine_web_knowledge`` on, each paragraph is
    first decomposed into strips (under its
    page title) exactly as retrieved passages are, and the strips are scored as refinement
    scores them; the kept strips stay in page, paragraph and sentence order. A failing
    evaluator is replaced by the embedding one (:mod:`crag.nodes.scoring`; the update's note
    says so).
    """
    candidates: list[tuple[str, str]] = [(p.text, p.source) for p in passages]
    whole = settings.reader_knowledge_form() == "passages"
    refine_paragraphs = settings.refine_web_knowledge and not whole
    if refine_paragraphs:
        candidates = [
            (strip, p.source)
            for p in passages
            for strip in decompose(p.text, settings.strip_mode, settings.strip_size)
        ]
    texts = [text for text, _ in candidates]

    def score(evaluator: RetrievalEvaluator) -> list[float]:
        if refine_paragraphs:
            return score_strips(evaluator, question, texts, by=settings.strip_scoring)
        return evaluator.score(question, texts)

    scores, _, notes = score_or_fall_back(state, settings, components, score)
    strips: list[KnowledgeStrip] = [
        {
            "text": text,
            "source": source,
            "chunk": None,
            "origin": "external",
            "score": score,
        }
        for (text, source), score in zip(candidates, scores, strict=True)
    ]
    if whole:
        # As many paragraphs as retrieval gives passages; the words RAG would read bound them
        # when the answer is generated, pooled with the store's passages.
        return select_top(strips, scores, settings.top_k, settings.strip_threshold), notes
    kept = select_top(
        strips, scores, settings.strips_kept, settings.strip_threshold, settings.strip_margin
    )
    return kept, notes
