"""FanOutQA dev questions (shipped in the ``fanoutqa`` package) and the project's split.

Only leaf sub-questions carry a single answer and one gold Wikipedia title, so they are the
unit of evaluation. The split file names which top-level questions may be used to fit things
(``train``) and to tune and report (``dev``); every other id is held out. The split ships in
the package (``bench/crag_bench/data/fanoutqa-split.json``; see the README beside it).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_SPLIT = Path(__file__).resolve().parent / "data" / "fanoutqa-split.json"
"""The project's split, shipped inside the package (``bench/crag_bench/data``, in the wheel too)."""


@dataclass(frozen=True)
class LeafQuestion:
    """One leaf sub-question with its answer and gold page."""

    id: str
    top_id: str
    question: str
    answer: str
    gold_title: str


def dev_file() -> Path:
    """Path of ``fanout-final-dev.json`` inside the installed ``fanoutqa`` package."""
    spec = importlib.util.find_spec("fanoutqa")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the package fanoutqa is missing: pip install --no-deps fanoutqa==1.1.1")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "fanout-final-dev.json"


def load_split(path: Path | None = None) -> dict[str, list[str]]:
    """Read the split file: ``{"train": [...ids], "dev": [...ids]}``."""
    data = json.loads((path or DEFAULT_SPLIT).read_text(encoding="utf-8"))
    return {key: list(data[key]) for key in ("train", "dev")}


def _answer_text(answer: Any) -> str | None:
    if isinstance(answer, str | int | float) and str(answer).strip():
        return str(answer).strip()
    return None


def _leaves(node: dict[str, Any], top_id: str) -> Iterator[LeafQuestion]:
    for sub in node.get("decomposition") or []:
        if sub.get("decomposition"):
            yield from _leaves(sub, top_id)
            continue
        answer = _answer_text(sub.get("answer"))
        title = (sub.get("evidence") or {}).get("title")
        if answer and title:
            yield LeafQuestion(sub["id"], top_id, sub["question"], answer, title)


def leaf_questions(top_ids: Sequence[str], *, exclusive: bool = True) -> list[LeafQuestion]:
    """Leaf questions of the given top-level ids, in file order.

    A few leaf questions (same id, same text) belong to several top-level questions. With
    ``exclusive`` (the default) a leaf that also belongs to a top-level question outside
    ``top_ids`` is left out, so that nothing built from ``train`` questions touches a held-out
    question, and train and dev share no leaf.

    Raises:
        ValueError: an id is not a FanOutQA dev question.
    """
    wanted = set(top_ids)
    questions = json.loads(dev_file().read_text(encoding="utf-8"))
    known = {q["id"] for q in questions}
    missing = sorted(wanted - known)
    if missing:
        raise ValueError(f"not FanOutQA dev question ids: {', '.join(missing[:5])}")
    owners = leaf_owners(questions)
    return [
        leaf
        for q in questions
        if q["id"] in wanted
        for leaf in _leaves(q, q["id"])
        if not exclusive or owners[leaf.id] <= wanted
    ]


def leaf_owners(questions: list[dict[str, Any]] | None = None) -> dict[str, set[str]]:
    """Map every leaf question id to the set of top-level question ids it belongs to."""
    if questions is None:
        questions = json.loads(dev_file().read_text(encoding="utf-8"))
    owners: dict[str, set[str]] = {}
    for q in questions:
        for leaf in _leaves(q, q["id"]):
            owners.setdefault(leaf.id, set()).add(q["id"])
    return owners
