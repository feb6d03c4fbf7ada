"""Paired statistics for ``crag-bench eval``: is one experiment better than another.

The statistics themselves are crag's (:mod:`crag.knowledge.evaluation_stats`, which
``crag eval FILE`` uses on the operator's own questions): the paired bootstrap interval of a
difference of two rates, McNemar's exact test, the verdict that needs both, and the p-value's
format. They are re-exported here under their old names; what is the benchmark's own is which
experiments a report compares (:func:`report_pairs`) and over which questions (:data:`Scope`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from crag.knowledge.evaluation_stats import (
    ALPHA,
    CONFIDENCE,
    MEASURES,
    RESAMPLES,
    BootstrapSettings,
    PairedRate,
    compare_outcomes,
    format_p,
    mcnemar_exact,
    paired_bootstrap,
    paired_rate,
)
from crag.knowledge.evaluation_stats import Significance as Verdict

__all__ = [
    "ALPHA",
    "CONFIDENCE",
    "MEASURES",
    "RESAMPLES",
    "BootstrapSettings",
    "PairedRate",
    "Scope",
    "Verdict",
    "compare_outcomes",
    "format_p",
    "mcnemar_exact",
    "paired_bootstrap",
    "paired_rate",
    "report_pairs",
]

Scope = Literal["all", "removed"]
"""The questions a comparison is over: all it shares, or those whose gold documents were
removed."""


def report_pairs(experiments: Iterable[str]) -> list[tuple[str, str, Scope]]:
    """The comparisons the report makes among the named experiments (in their order).

    CRAG against every other experiment (when CRAG ran), and gold-removed CRAG against
    gold-removed RAG over all their questions and over the removed ones (when both ran).
    """
    names = list(experiments)
    pairs: list[tuple[str, str, Scope]] = (
        [("crag", name, "all") for name in names if name != "crag"] if "crag" in names else []
    )
    if "crag-gold-removed" in names and "rag-gold-removed" in names:
        pairs += [
            ("crag-gold-removed", "rag-gold-removed", "all"),
            ("crag-gold-removed", "rag-gold-removed", "removed"),
        ]
    return pairs
