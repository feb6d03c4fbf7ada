"""The experiments ``crag-bench eval`` runs: one row (or plot point) each.

Every experiment is a graph (CRAG or a baseline from :mod:`crag.graph.baselines`) and the
parameters of the method (:class:`~crag.settings.method.MethodConfig`) that differ from the eval's
base method: its graph is built with them, and each of its runs has the eval's per-run settings.
The paper's tables are reproduced where the method allows: Table 2 (each action removed, or one
action only), Table 3 (refinement, rewriting and selection removed), Table 5 (RAG with web
results always added) and Figure 3 (a worse retriever: the gold documents removed from the store
for a share of the questions). The ``oracle`` bounds it from above (only the gold documents'
passages), ``no-retrieval`` from below.

Names hold no commas or spaces, so ``--experiments`` takes a comma-separated list; the names of
earlier versions are accepted as aliases, and a few presets name groups of experiments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

GraphName = Literal["crag", "no-retrieval", "rag", "rag-web", "tutorial"]

GOLD_REMOVAL_LEVELS: tuple[int, ...] = (0, 25, 50, 75, 100)
"""Shares of the questions (percent) whose gold documents are removed (Figure 3's curve)."""

DEFAULT_GOLD_REMOVED_SHARE = 50
"""Share of the questions (percent) whose gold documents the gold-removed experiments remove."""


@dataclass(frozen=True)
class Experiment:
    """One configuration run over every question."""

    name: str
    graph: GraphName
    group: str
    """Which table or figure it belongs to."""
    description: str
    settings: dict[str, Any] = field(default_factory=dict)
    """Parameters of the method that differ from the base method (the graph is built with them)."""
    timed: bool = False
    """Its latencies are reported (it runs before any experiment could share its work)."""
    gold_removed: bool = False
    """Hide the gold documents from retrieval for a seeded share of the questions (Figure 3)."""
    gold_only: bool = False
    """Retrieve from the question's gold documents only (the upper bound)."""


EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment("no-retrieval", "no-retrieval", "main", "the generator alone", timed=True),
    Experiment(
        "rag", "rag", "main", "standard RAG: the top-k passages to the generator", timed=True
    ),
    Experiment("crag", "crag", "main", "Corrective RAG (this project)", timed=True),
    Experiment(
        "oracle",
        "rag",
        "main",
        "standard RAG over the gold documents' passages only (upper bound)",
        gold_only=True,
    ),
    Experiment(
        "crag-without-correct",
        "crag",
        "actions",
        "Correct becomes Ambiguous (Table 2)",
        {"disable_action": "correct"},
    ),
    Experiment(
        "crag-without-incorrect",
        "crag",
        "actions",
        "Incorrect becomes Ambiguous (Table 2)",
        {"disable_action": "incorrect"},
    ),
    Experiment(
        "crag-without-ambiguous",
        "crag",
        "actions",
        "one threshold halfway between the two (Table 2)",
        {"disable_action": "ambiguous"},
    ),
    Experiment(
        "crag-only-correct",
        "crag",
        "actions",
        "always refine the retrieved passages",
        {"force_action": "correct"},
    ),
    Experiment(
        "crag-only-incorrect",
        "crag",
        "actions",
        "always search the web instead",
        {"force_action": "incorrect"},
    ),
    Experiment(
        "crag-only-ambiguous",
        "crag",
        "actions",
        "always both",
        {"force_action": "ambiguous"},
    ),
    Experiment(
        "crag-without-refinement",
        "crag",
        "knowledge",
        "relevant passages passed whole (Table 3)",
        {"refine_knowledge": False},
    ),
    Experiment(
        "crag-strips-paper",
        "crag",
        "knowledge",
        "the paper's strip filter: top 5 above -0.5 (default here: above -0.99)",
        {"strip_threshold": -0.5, "strips_kept": 5},
    ),
    Experiment(
        "crag-strips-passage-map",
        "crag",
        "knowledge",
        "strips scored with the passage map instead of the strip calibration",
        {"strip_scoring": "passage-map"},
    ),
    Experiment(
        "crag-web-strips",
        "crag",
        "knowledge",
        "web paragraphs refined into strips as retrieved passages are (the paper), instead of "
        "whole paragraphs",
        {"refine_web_knowledge": True},
    ),
    Experiment(
        "crag-best-passage-whole",
        "crag",
        "knowledge",
        "the passage of the best strip kept whole in place of its strips",
        {"best_passage_whole": True},
    ),
    Experiment(
        "crag-passages",
        "crag",
        "knowledge",
        "whole passages within the retrieved passages' words: every retrieved passage for "
        "Correct, the best of the passages and the web's paragraphs for Ambiguous (the "
        "default for any reader but SmolLM2)",
        {"knowledge_form": "passages"},
    ),
    Experiment(
        "crag-strips",
        "crag",
        "knowledge",
        "the paper's strips, whatever the reader (SmolLM2's default)",
        {"knowledge_form": "strips"},
    ),
    Experiment(
        "crag-strips-wide",
        "crag",
        "knowledge",
        "top 10 strips above -0.99 instead of 5",
        {"strips_kept": 10},
    ),
    Experiment(
        "crag-strips-narrow",
        "crag",
        "knowledge",
        "top 3 strips above -0.99 instead of 5",
        {"strips_kept": 3},
    ),
    Experiment(
        "crag-strip-pairs",
        "crag",
        "knowledge",
        "strips of two sentences instead of one",
        {"strip_size": 2},
    ),
    Experiment(
        "crag-ambiguous-both",
        "crag",
        "knowledge",
        "Ambiguous reads each branch's best strips side by side (default: the best of both)",
        {"ambiguous_knowledge": "both"},
    ),
    Experiment(
        "crag-best-first",
        "crag",
        "knowledge",
        "knowledge best-scored first (default: in passage order)",
        {"knowledge_order": "score"},
    ),
    Experiment(
        "crag-paper-recomposition",
        "crag",
        "knowledge",
        "the paper's recomposition: Ambiguous reads store and web strips side by side, each in "
        "passage order (the default before pooling)",
        {"ambiguous_knowledge": "both", "knowledge_order": "original"},
    ),
    Experiment(
        "crag-without-abstention",
        "crag",
        "knowledge",
        "no abstention: without knowledge the generator answers anyway",
        {"abstain_without_knowledge": False},
    ),
    Experiment(
        "crag-keyword-rewriting",
        "crag",
        "knowledge",
        "the paper's rewrite: the question rewritten into at most three keywords before the web "
        "search (the default searches the question itself; Table 3's rewriting ablation)",
        {"rewrite_for_search": True},
    ),
    Experiment(
        "crag-without-selection",
        "crag",
        "knowledge",
        "first web paragraphs kept unscored (Table 3)",
        {"select_web_knowledge": False},
    ),
    Experiment(
        "rag-web",
        "rag-web",
        "web",
        "top-k passages plus the first web paragraphs for the question (Table 5)",
        {"select_web_knowledge": False},
    ),
    Experiment(
        "tutorial",
        "tutorial",
        "peer",
        "the LangGraph tutorial's design: LLM yes/no grade per passage, web search if any is "
        "irrelevant, no refinement",
    ),
    Experiment(
        "rag-gold-removed",
        "rag",
        "retriever",
        "standard RAG with the gold documents removed from the store for a share of the questions",
        gold_removed=True,
    ),
    Experiment(
        "crag-gold-removed",
        "crag",
        "retriever",
        "CRAG with the gold documents removed from the store for a share of the questions",
        gold_removed=True,
    ),
    Experiment(
        "crag-gold-removed-keyword-rewriting",
        "crag",
        "retriever",
        "CRAG with the gold documents removed (as crag-gold-removed), the web searched with the "
        "paper's rewritten keywords instead of the question itself",
        {"rewrite_for_search": True},
        gold_removed=True,
    ),
    Experiment(
        "crag-gold-removed-best-passage-whole",
        "crag",
        "retriever",
        "CRAG with the gold documents removed (as crag-gold-removed), the passage of the best "
        "strip kept whole",
        {"best_passage_whole": True},
        gold_removed=True,
    ),
    Experiment(
        "crag-gold-removed-passages",
        "crag",
        "retriever",
        "CRAG with the gold documents removed (as crag-gold-removed), whole passages within the "
        "retrieved passages' words (as crag-passages)",
        {"knowledge_form": "passages"},
        gold_removed=True,
    ),
    Experiment(
        "crag-gold-removed-strips",
        "crag",
        "retriever",
        "CRAG with the gold documents removed (as crag-gold-removed), the paper's strips (as "
        "crag-strips)",
        {"knowledge_form": "strips"},
        gold_removed=True,
    ),
    *(
        Experiment(
            f"crag-gold-removed-only-{action}",
            "crag",
            "thresholds",
            f"CRAG with the gold documents removed (as crag-gold-removed), always {action}",
            {"force_action": action},
            gold_removed=True,
        )
        for action in ("correct", "incorrect", "ambiguous")
    ),
)
"""Every experiment, in the order they run (the timed ones first)."""

ALIASES: dict[str, str] = {
    "crag without correct": "crag-without-correct",
    "crag without incorrect": "crag-without-incorrect",
    "crag without ambiguous": "crag-without-ambiguous",
    "crag only correct": "crag-only-correct",
    "crag only incorrect": "crag-only-incorrect",
    "crag only ambiguous": "crag-only-ambiguous",
    "crag without refinement": "crag-without-refinement",
    "crag without selection": "crag-without-selection",
    "rag + web": "rag-web",
    "langgraph tutorial": "tutorial",
    "rag, gold removed": "rag-gold-removed",
    "crag, gold removed": "crag-gold-removed",
}
"""Earlier experiment names, still accepted by ``--experiments``."""


def _group(*groups: str) -> tuple[str, ...]:
    """CRAG (the reference of every comparison) and the experiments of ``groups``."""
    return ("crag", *(e.name for e in EXPERIMENTS if e.group in groups))


PRESETS: dict[str, tuple[str, ...]] = {
    "main": ("no-retrieval", "rag", "crag", "oracle", "rag-gold-removed", "crag-gold-removed"),
    "bounds": ("no-retrieval", "crag", "oracle"),
    "actions": _group("actions"),
    "knowledge": _group("knowledge"),
    "ablations": _group("actions", "knowledge", "web", "peer"),
    "thresholds": (
        "crag",
        "crag-gold-removed",
        *(f"crag-only-{a}" for a in ("correct", "incorrect", "ambiguous")),
        *(f"crag-gold-removed-only-{a}" for a in ("correct", "incorrect", "ambiguous")),
    ),
    "readers": (
        "rag",
        "crag",
        "crag-strips",
        "crag-passages",
        "rag-gold-removed",
        "crag-gold-removed",
        "crag-gold-removed-strips",
        "crag-gold-removed-passages",
    ),
    "all": tuple(e.name for e in EXPERIMENTS),
}
"""Names for groups of experiments in ``--experiments``; each holds CRAG."""


def experiment_names() -> list[str]:
    """The names of every experiment."""
    return [e.name for e in EXPERIMENTS]


def _split(spec: str) -> list[str]:
    """The comma-separated names of ``spec``, keeping the old names that hold a comma whole."""
    parts = [p.strip() for p in spec.split(",")]
    names: list[str] = []
    index = 0
    while index < len(parts):
        joined = ", ".join(parts[index : index + 2]).lower()
        if index + 1 < len(parts) and joined in ALIASES:
            names.append(joined)
            index += 2
            continue
        if parts[index]:
            names.append(parts[index])
        index += 1
    return names


def select_experiments(spec: str | None) -> list[Experiment]:
    """The experiments a ``--experiments`` value names, in run order (all when empty).

    ``spec`` is a comma-separated list of experiment names, earlier names (:data:`ALIASES`)
    and presets (:data:`PRESETS`), matched without regard to case.

    Raises:
        ValueError: A name is none of these (the message lists the valid ones).
    """
    if not spec or not spec.strip():
        return list(EXPERIMENTS)
    known = set(experiment_names())
    wanted: set[str] = set()
    unknown: list[str] = []
    for name in _split(spec):
        key = name.lower()
        if key in known:
            wanted.add(key)
        elif key in ALIASES:
            wanted.add(ALIASES[key])
        elif key in PRESETS:
            wanted.update(PRESETS[key])
        else:
            unknown.append(name)
    if unknown:
        raise ValueError(
            f"unknown experiment(s) {', '.join(unknown)}; valid: {', '.join(experiment_names())}"
            f", or a preset: {', '.join(PRESETS)}"
        )
    return [e for e in EXPERIMENTS if e.name in wanted]
