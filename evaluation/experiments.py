"""The experiments ``crag eval`` runs: one row (or plot point) each.

Every experiment is a graph (CRAG or a baseline from :mod:`graph.baselines`) and the settings
that differ from the run's base context. The paper's tables are reproduced where the method
allows: Table 2 (each action removed, or one action only), Table 3 (refinement, rewriting
and selection removed), Table 5 (RAG with web results always added) and Figure 3 (a worse
retriever: the gold document removed from the store for a share of the questions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

GraphName = Literal["crag", "no-retrieval", "rag", "rag-web", "tutorial"]

GOLD_REMOVAL_LEVELS: tuple[int, ...] = (0, 25, 50, 75, 100)
"""Shares of the questions (percent) whose gold document is removed from the store."""


@dataclass(frozen=True)
class Experiment:
    """One configuration run over every question."""

    name: str
    graph: GraphName
    group: str
    """Which table or figure it belongs to."""
    description: str
    settings: dict[str, Any] = field(default_factory=dict)
    """Context settings that differ from the base context."""
    timed: bool = False
    """Its latencies are reported (it runs before any experiment could share its work)."""
    gold_removed: bool = False
    """Run with the gold document hidden from retrieval (Figure 3's analogue)."""


EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment("no-retrieval", "no-retrieval", "main", "the generator alone", timed=True),
    Experiment(
        "rag", "rag", "main", "standard RAG: the top-k passages to the generator", timed=True
    ),
    Experiment("crag", "crag", "main", "Corrective RAG (this project)", timed=True),
    Experiment(
        "crag without correct",
        "crag",
        "actions",
        "Correct becomes Ambiguous (Table 2)",
        {"disable_action": "correct"},
    ),
    Experiment(
        "crag without incorrect",
        "crag",
        "actions",
        "Incorrect becomes Ambiguous (Table 2)",
        {"disable_action": "incorrect"},
    ),
    Experiment(
        "crag without ambiguous",
        "crag",
        "actions",
        "one threshold halfway between the two (Table 2)",
        {"disable_action": "ambiguous"},
    ),
    Experiment(
        "crag only correct",
        "crag",
        "actions",
        "always refine the retrieved passages",
        {"force_action": "correct"},
    ),
    Experiment(
        "crag only incorrect",
        "crag",
        "actions",
        "always search the web instead",
        {"force_action": "incorrect"},
    ),
    Experiment(
        "crag only ambiguous",
        "crag",
        "actions",
        "always both",
        {"force_action": "ambiguous"},
    ),
    Experiment(
        "crag without refinement",
        "crag",
        "knowledge",
        "relevant passages passed whole (Table 3)",
        {"refine_knowledge": False},
    ),
    Experiment(
        "crag without rewriting",
        "crag",
        "knowledge",
        "the question itself searched (Table 3)",
        {"rewrite_for_search": False},
    ),
    Experiment(
        "crag without selection",
        "crag",
        "knowledge",
        "first web paragraphs kept unscored (Table 3)",
        {"select_web_knowledge": False},
    ),
    Experiment(
        "rag + web",
        "rag-web",
        "web",
        "top-k passages plus the first web paragraphs for the question (Table 5)",
        {"select_web_knowledge": False},
    ),
    Experiment(
        "langgraph tutorial",
        "tutorial",
        "peer",
        "LLM yes/no grade per passage, web search if any is irrelevant, no refinement",
    ),
    Experiment(
        "rag, gold removed",
        "rag",
        "retriever",
        "standard RAG with the gold document removed from the store",
        gold_removed=True,
    ),
    Experiment(
        "crag, gold removed",
        "crag",
        "retriever",
        "CRAG with the gold document removed from the store",
        gold_removed=True,
    ),
)
"""Every experiment, in the order they run (the timed ones first)."""


def experiment_names() -> list[str]:
    """The names of every experiment."""
    return [e.name for e in EXPERIMENTS]
