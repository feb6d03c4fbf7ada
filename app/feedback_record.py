"""A run's record, read from its thread's state when feedback is given: enough to replay it.

:func:`run_record` keeps what a later evaluation of the answer needs: the question (and the
standalone question a follow-up was rewritten to), the answer, the action and the decision's
best score and reason, every retrieved passage with its score, the knowledge given to the
generator with its origins and sources, the citations, the notes, and the settings the run was
judged under (the action trigger's thresholds, the evaluator, the generator). Thresholds and
models are not in a run's state: they are the server's (or the Python caller's) when the
feedback is given, which are the run's unless the operator changed them in between.

Every text is cut to :data:`MAX_RECORD_TEXT` characters and every list to :data:`MAX_ITEMS`,
so a record stays small whatever a run held.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_ITEMS", "MAX_RECORD_TEXT", "RunSettings", "finished", "run_record", "run_settings"]

MAX_RECORD_TEXT = 8_000
"""The most characters of one text (the answer, a passage, a strip) a record keeps."""
MAX_ITEMS = 50
"""The most passages, strips, citations and notes a record keeps."""


@dataclass(frozen=True)
class RunSettings:
    """The settings a run was answered under that its state does not hold."""

    generator: str
    evaluator: str
    evaluator_model: str
    upper_threshold: float
    lower_threshold: float


def run_settings(method: Any = None, deployment: Any = None) -> RunSettings:
    """The settings of ``method`` and ``deployment`` (default: the operator's, as now).

    Raises:
        InvalidSettingError: An operator's variable holds a value of the wrong type.
    """
    from crag.settings.deployment import deployment_settings
    from crag.settings.method import operator_method

    settings = deployment if deployment is not None else deployment_settings()
    chosen = method if method is not None else operator_method()
    upper, lower = chosen.thresholds_for(settings.evaluator, settings.evaluator_model)
    return RunSettings(
        generator=settings.generator,
        evaluator=settings.evaluator,
        evaluator_model=settings.evaluator_model,
        upper_threshold=upper,
        lower_threshold=lower,
    )


def finished(values: Mapping[str, Any], pending: Sequence[Any]) -> bool:
    """Whether a thread's state is that of a run that ended with an answer."""
    return not pending and isinstance(values.get("answer"), str) and "question" in values


def _cut(value: Any) -> str:
    return str(value if value is not None else "")[:MAX_RECORD_TEXT]


def _score(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _passage(item: Any, *, strip: bool) -> dict[str, Any]:
    """A retrieved passage (or, ``strip``, a knowledge strip) as the record keeps it."""
    item = item if isinstance(item, Mapping) else {}
    kept: dict[str, Any] = {
        "source": _cut(item.get("source")),
        "chunk": item.get("chunk") if isinstance(item.get("chunk"), int) else None,
        "score": _score(item.get("score")),
        "text": _cut(item.get("text")),
    }
    if strip:
        kept["origin"] = _cut(item.get("origin"))
    for optional in ("location", "writer"):
        if item.get(optional):
            kept[optional] = _cut(item[optional])
    return kept


def _items(values: Mapping[str, Any], name: str) -> list[Any]:
    found = values.get(name)
    return list(found)[:MAX_ITEMS] if isinstance(found, list) else []


def _message_field(message: Any, name: str) -> Any:
    if isinstance(message, Mapping):
        return message.get(name)
    return getattr(message, name, None)


def answer_message_id(values: Mapping[str, Any]) -> str:
    """The id of the thread's last AI message (the run's answer in the chat), or ``""``."""
    for message in reversed(_items_all(values, "messages")):
        if _message_field(message, "type") == "ai":
            return _cut(_message_field(message, "id"))
    return ""


def _items_all(values: Mapping[str, Any], name: str) -> list[Any]:
    found = values.get(name)
    return list(found) if isinstance(found, list) else []


def _decision(values: Mapping[str, Any]) -> dict[str, Any]:
    decision = values.get("decision")
    decision = decision if isinstance(decision, Mapping) else {}
    return {"max_score": _score(decision.get("max_score")), "reason": _cut(decision.get("reason"))}


def run_record(
    values: Mapping[str, Any], metadata: Mapping[str, Any], settings: RunSettings
) -> dict[str, Any]:
    """The record of the run whose final state is ``values`` (checkpoint ``metadata``)."""
    knowledge = [_passage(strip, strip=True) for strip in _items(values, "knowledge")]
    return {
        "graph": _cut(metadata.get("graph_id")),
        "question": _cut(values.get("question")),
        "standalone_question": _cut(values.get("standalone_question")),
        "answer": _cut(values.get("answer")),
        "message_id": answer_message_id(values),
        "action": _cut(values.get("action")),
        "decision": _decision(values),
        "abstained": bool(values.get("abstained", False)),
        "citations": [c for c in _items(values, "citations") if isinstance(c, int)],
        "notes": [_cut(note) for note in _items(values, "notes")],
        "documents": [_passage(p, strip=False) for p in _items(values, "documents")],
        "knowledge": knowledge,
        "origins": sorted({strip["origin"] for strip in knowledge if strip["origin"]}),
        "sources": sorted({strip["source"] for strip in knowledge if strip["source"]}),
        "thresholds": {
            "upper": settings.upper_threshold,
            "lower": settings.lower_threshold,
        },
        "evaluator": _cut(values.get("graded_by")) or settings.evaluator,
        "evaluator_model": settings.evaluator_model,
        "generator": settings.generator,
    }
