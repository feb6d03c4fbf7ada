"""Refine: decompose the relevant passages into strips, filter them, recompose the rest."""

from __future__ import annotations

import logging

from langgraph.runtime import Runtime

from crag.core.state import KnowledgeStrip, RetrievedPassage, State, StateUpdate
from crag.evaluator.base import score_strips
from crag.knowledge.selection import best_passage_whole, select_top
from crag.knowledge.strips import as_internal_knowledge, decompose, internal_strip
from crag.nodes.components import Components
from crag.nodes.progress import emit
from crag.nodes.scoring import score_or_fall_back, scoring_settings
from crag.settings.run_settings import RunSettings

logger = logging.getLogger(__name__)


def refine(state: State, runtime: Runtime[RunSettings], components: Components) -> StateUpdate:
    """Build the internal knowledge from the retrieved passages.

    Decompose: each passage the evaluator did not judge irrelevant (score at or above the
    lower threshold) is split into strips. Filter: every strip is scored by the same evaluator
    in one batch (with its strip calibration where it has one, :func:`score_strips`); the top
    ``strips_kept`` above ``strip_threshold`` survive. Recompose: the survivors are put back
    in their original order (passage rank, then position). With ``refine_knowledge`` off (an
    ablation) the relevant passages are kept whole; with ``best_passage_whole`` the passage of
    the best strip replaces its kept strips, whole.

    In the ``passages`` knowledge form (a reader other than SmolLM2, unless set) every
    retrieved passage is kept whole with its grade: what standard RAG would give. Which of
    them the reader gets is decided with the web's paragraphs, within RAG's words
    (:func:`crag.knowledge.combination.best_within_words`), when the answer is generated.
    """
    settings = runtime.context
    if settings.reader_knowledge_form() == "passages":
        return _whole_passages(state.get("documents", []), runtime)
    relevant = _relevant_passages(state, settings)
    if not settings.refine_knowledge:
        return _whole_passages(relevant, runtime)
    candidates = _strip_candidates(relevant, settings)
    if not candidates:
        emit(runtime, "refine", "filtered", passages=len(relevant), strips=0, kept=0)
        return {"internal_knowledge": [], "notes": ["no retrieved passage was kept for refinement"]}
    emit(runtime, "refine", "scoring", passages=len(relevant), strips=len(candidates))
    kept, notes = _kept_strips(state, settings, components, candidates, relevant)
    logger.info(
        "refine: %d strips from %d passages, kept %d", len(candidates), len(relevant), len(kept)
    )
    emit(
        runtime,
        "refine",
        "filtered",
        passages=len(relevant),
        strips=len(candidates),
        kept=len(kept),
    )
    if not kept:
        notes.append(f"refinement kept no strip: none scored above {settings.strip_threshold}")
    update: StateUpdate = {"internal_knowledge": kept}
    if notes:
        update["notes"] = notes
    return update


def _relevant_passages(state: State, settings: RunSettings) -> list[RetrievedPassage]:
    """The retrieved passages the evaluator did not judge irrelevant (or did not score)."""
    _, lower = scoring_settings(state, settings).action_thresholds()
    return [
        doc for doc in state.get("documents", []) if doc["score"] is None or doc["score"] >= lower
    ]


def _strip_candidates(
    relevant: list[RetrievedPassage], settings: RunSettings
) -> list[tuple[str, RetrievedPassage]]:
    """Decompose: every strip of every relevant passage, with its passage, in their order."""
    return [
        (strip, doc)
        for doc in relevant
        for strip in decompose(doc["text"], settings.strip_mode, settings.strip_size)
    ]


def _kept_strips(
    state: State,
    settings: RunSettings,
    components: Components,
    candidates: list[tuple[str, RetrievedPassage]],
    relevant: list[RetrievedPassage],
) -> tuple[list[KnowledgeStrip], list[str]]:
    """Filter and recompose: score every strip in one batch, keep the best in their order.

    Returns the kept strips and the scoring's notes (an evaluator replaced, for one).
    """
    texts = [text for text, _ in candidates]
    scores, _, notes = score_or_fall_back(
        state,
        settings,
        components,
        lambda e: score_strips(e, state["question"], texts, by=settings.strip_scoring),
    )
    strips = [
        internal_strip(text, doc, score)
        for (text, doc), score in zip(candidates, scores, strict=True)
    ]
    kept = select_top(
        strips, scores, settings.strips_kept, settings.strip_threshold, settings.strip_margin
    )
    if settings.best_passage_whole:
        kept = best_passage_whole(kept, relevant)
    return kept, notes


def _whole_passages(relevant: list[RetrievedPassage], runtime: Runtime[RunSettings]) -> StateUpdate:
    """Passages whole: every retrieved one, or the relevant ones (without refinement)."""
    kept = as_internal_knowledge(relevant)
    emit(runtime, "refine", "filtered", passages=len(relevant), strips=len(kept), kept=len(kept))
    update: StateUpdate = {"internal_knowledge": kept}
    if not kept:
        update["notes"] = ["no retrieved passage was kept for refinement"]
    return update
