"""How the store names its documents' sources and writers (no store code: cheap to import)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SOURCE_PREFIX = "wikipedia:"
"""Source of a bundled Wikipedia summary: this prefix and the page title."""

OPERATOR = "operator"
"""The ``writer`` of documents stored by the operator (CLI, Python API, bundled corpus)."""
SERVED = "served"
"""The ``writer`` of documents stored by runs of the served ``ingest`` graph."""


RUN_REPLACE = ("none", "served", "all")
"""What runs of the served ``ingest`` graph may replace or remove (deployment setting
``ingest_run_replace``): nothing already stored, what served runs stored, or anything."""


@dataclass(frozen=True)
class Writer:
    """Who is writing, recorded on every chunk it writes (metadata ``writer``).

    Attributes:
        name: :data:`OPERATOR` or :data:`SERVED`.
        may_replace: The writers whose documents it may replace or remove; ``None``: anyone's
            (the operator, or served runs under ``ingest_run_replace="all"``).
    """

    name: str
    may_replace: frozenset[str] | None = None

    def refuses(self, stored_by: str) -> bool:
        """Whether a document stored by ``stored_by`` is out of this writer's reach."""
        return self.may_replace is not None and stored_by not in self.may_replace


OPERATOR_WRITER = Writer(OPERATOR)
"""The operator: may replace and remove any document."""

_RUN_MAY_REPLACE: dict[str, frozenset[str] | None] = {
    "none": frozenset(),
    "served": frozenset({SERVED}),
    "all": None,
}


def served_writer(run_replace: str) -> Writer:
    """A run of the served ``ingest`` graph; the operator decides what it may replace.

    Args:
        run_replace: One of :data:`RUN_REPLACE`: ``"none"`` (add new documents only),
            ``"served"`` (also replace and remove what served runs stored, never the
            operator's) or ``"all"`` (replace and remove anything).

    Raises:
        ValueError: ``run_replace`` is not one of :data:`RUN_REPLACE`.
    """
    if run_replace not in _RUN_MAY_REPLACE:
        listed = ", ".join(repr(choice) for choice in RUN_REPLACE)
        raise ValueError(f"run_replace must be one of {listed}, not {run_replace!r}")
    return Writer(SERVED, may_replace=_RUN_MAY_REPLACE[run_replace])


def writer_of(metadata: Mapping[str, Any]) -> str:
    """Who stored a chunk; chunks older than the ``writer`` field are the operator's."""
    value = metadata.get("writer")
    return value if isinstance(value, str) and value else OPERATOR
