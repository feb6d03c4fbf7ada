"""The LangGraph tutorial's corrective RAG steps: the peer baseline of ``crag-bench eval``.

The tutorial grades every retrieved document with an LLM yes/no question, keeps the relevant
ones, and searches the web (after rewriting the question) as soon as any document is judged
irrelevant; it has no refinement and no evaluator-based selection of web results (it joins the
top three results' contents).
"""

from __future__ import annotations

import logging

from langgraph.runtime import Runtime

from crag.core.state import Action, RetrievedPassage, State, StateUpdate
from crag.evaluator.llm import LLMEvaluator
from crag.knowledge.strips import as_internal_knowledge
from crag.nodes.components import Components
from crag.nodes.progress import emit
from crag.nodes.web_search import web_search
from crag.prompts.tutorial import grader_messages, rewriter_messages
from crag.settings.run_settings import RunSettings

logger = logging.getLogger(__name__)

TUTORIAL_WEB_RESULTS = 3
"""The tutorial's web search returns three results."""


def grade_binary(
    state: State, runtime: Runtime[RunSettings], components: Components
) -> StateUpdate:
    """Grade each passage yes/no with the generator and the tutorial's grader prompt.

    A passage is relevant when the model puts more probability on "yes" than on "no" (or
    answers yes). Scores are the evaluator's +/-1-scaled probability; relevant passages become
    the internal knowledge, whole.
    """
    documents = state.get("documents", [])
    grader = LLMEvaluator(
        components.chat_model(runtime.context),
        name="tutorial-grader",
        prompt=grader_messages,
    )
    emit(runtime, "grade", "scoring", passages=len(documents), evaluator=grader.name)
    scores = grader.score(state["question"], [d["text"] for d in documents]) if documents else []
    graded: list[RetrievedPassage] = [
        {**doc, "score": round(float(score), 4)}
        for doc, score in zip(documents, scores, strict=True)
    ]
    relevant = as_internal_knowledge(
        [d for d in graded if d["score"] is not None and d["score"] > 0]
    )
    search = len(relevant) < len(graded) or not graded
    action: Action = "correct" if not search else ("incorrect" if not relevant else "ambiguous")
    emit(runtime, "grade", "scored", passages=len(graded), relevant=len(relevant))
    return {"documents": graded, "internal_knowledge": relevant, "action": action}


def transform_query(
    state: State, runtime: Runtime[RunSettings], components: Components
) -> StateUpdate:
    """Rewrite the question for web search with the tutorial's re-writer prompt."""
    question = state["question"]
    if not runtime.context.web_search:  # nothing is searched: no query to write
        return {"search_query": question}
    emit(runtime, "rewrite_query", "rewriting")
    try:
        reply = components.chat_model(runtime.context).invoke(rewriter_messages(question))
        query = " ".join(reply.text.split())
    except Exception as exc:  # noqa: BLE001 - any provider error: search the question
        logger.warning("tutorial query rewriting failed: %s", exc)
        query = ""
    if not query:
        emit(runtime, "rewrite_query", "rewritten", query=question, fallback=True)
        return {
            "search_query": question,
            "notes": ["query rewriting gave nothing; searched for the question"],
        }
    emit(runtime, "rewrite_query", "rewritten", query=query, fallback=False)
    return {"search_query": query}


def tutorial_web_search(
    state: State, runtime: Runtime[RunSettings], components: Components
) -> StateUpdate:
    """Search as the tutorial does: three results, their snippets, no page reading or selection.

    Runs this project's web search node with those settings, so provider failures become
    notes in the same way.
    """
    return web_search(
        state, runtime.override(context=tutorial_settings(runtime.context)), components
    )


def tutorial_settings(settings: RunSettings) -> RunSettings:
    """The run's settings with the tutorial's web search: three snippets, unselected.

    Built with :meth:`RunSettings.replaced`, which a served run's context takes too.
    """
    return settings.replaced(
        web_results=TUTORIAL_WEB_RESULTS,
        strips_kept=TUTORIAL_WEB_RESULTS,
        fetch_pages=False,
        select_web_knowledge=False,
        prefer_wikipedia=False,
        only_wikipedia=False,
    )
