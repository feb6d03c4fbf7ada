"""(question, passage, label) pairs for training and judging retrieval evaluators.

The paper's recipe: for each question, passages from its gold Wikipedia page are positives
(+1) and retrieved passages that are not from it are negatives (-1). Retrieval uses the
project's own store, so the negatives are the hard ones the evaluator meets in the graph.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from crag_bench.fanoutqa import LeafQuestion, leaf_questions


@dataclass(frozen=True)
class LabelledPair:
    """One training or test example for an evaluator."""

    question_id: str
    question: str
    passage: str
    label: int
    """+1: the passage is from the question's gold page; -1: it is not."""
    source: str
    rank: int | None
    """Position in the top-k retrieval (0 is best); ``None`` for a gold passage not retrieved."""


@dataclass(frozen=True)
class RetrievalCase:
    """A question, its top-k retrieved passages, and where its gold page is."""

    question: LeafQuestion
    retrieved: list[tuple[str, str]]
    """(text, source) of the top-k passages, best first."""
    gold_passages: list[str]
    """Every stored passage of the gold page (empty when the page is not in the store)."""

    @property
    def gold_source(self) -> str:
        """The store's source name of the gold page."""
        return f"wikipedia:{self.question.gold_title}"

    @property
    def gold_in_top_k(self) -> bool:
        """Whether a passage from the gold page was retrieved."""
        return any(source == self.gold_source for _, source in self.retrieved)


def retrieval_cases(
    top_ids: Sequence[str],
    store: Any,
    k: int = 10,
    retrieve: Callable[[Sequence[str]], list[list[dict[str, Any]]]] | None = None,
) -> list[RetrievalCase]:
    """Retrieve the top-k passages for every leaf question of ``top_ids`` from ``store``.

    ``store`` is a LangChain Chroma store filled with the bundled corpus (sources
    ``wikipedia:<title>``). Questions whose gold page is not in the store are kept: for them
    the right action is Incorrect. ``retrieve`` (top-k ``text`` and ``source`` for a batch of
    questions) replaces the store's own search, e.g. the exact search of
    :func:`crag_bench.pair_mining.store_retriever`, which makes training pairs reproducible.
    """
    leaves = leaf_questions(top_ids)
    if retrieve is None:
        hits = [
            [
                {"text": d.page_content, "source": str(d.metadata.get("source", ""))}
                for d in store.similarity_search(leaf.question, k=k)
            ]
            for leaf in leaves
        ]
    else:
        hits = retrieve([leaf.question for leaf in leaves])
    cases = []
    for leaf, found in zip(leaves, hits, strict=True):
        gold = store.get(where={"source": f"wikipedia:{leaf.gold_title}"}, include=["documents"])
        cases.append(
            RetrievalCase(
                question=leaf,
                retrieved=[(h["text"], h["source"]) for h in found],
                gold_passages=list(gold.get("documents") or []),
            )
        )
    return cases


def pairs_from_cases(cases: Iterable[RetrievalCase]) -> list[LabelledPair]:
    """Gold passages as positives, retrieved passages from other pages as negatives."""
    pairs: list[LabelledPair] = []
    for case in cases:
        leaf = case.question
        ranks = {text: i for i, (text, source) in enumerate(case.retrieved)}
        pairs += [
            LabelledPair(leaf.id, leaf.question, text, 1, case.gold_source, ranks.get(text))
            for text in case.gold_passages
        ]
        pairs += [
            LabelledPair(leaf.id, leaf.question, text, -1, source, i)
            for i, (text, source) in enumerate(case.retrieved)
            if source != case.gold_source
        ]
    return pairs


def write_pairs(path: Path, pairs: Iterable[LabelledPair]) -> int:
    """Write pairs as JSONL (one object per line); return how many were written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for pair in pairs:
            out.write(json.dumps(asdict(pair), ensure_ascii=False) + "\n")
            count += 1
    return count


def read_pairs(paths: Iterable[Path]) -> list[LabelledPair]:
    """Read JSONL pair files. Each line needs ``question``, ``passage`` and ``label`` (+1/-1).

    Raises:
        ValueError: a line is not JSON, lacks a field, or has a label other than +1 or -1;
            the message names the file and line.
    """
    pairs: list[LabelledPair] = []
    for path in paths:
        with Path(path).open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                where = f"{path}:{number}"
                try:
                    row = json.loads(line)
                    label = int(row["label"])
                    question, passage = str(row["question"]), str(row["passage"])
                except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                    raise ValueError(f"{where}: not a pair ({exc})") from None
                if label not in (1, -1):
                    raise ValueError(f"{where}: label must be 1 or -1, not {label}")
                pairs.append(
                    LabelledPair(
                        str(row.get("question_id", where)),
                        question,
                        passage,
                        label,
                        str(row.get("source", "")),
                        row.get("rank"),
                    )
                )
    return pairs
