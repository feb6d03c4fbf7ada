"""Judge a retrieval evaluator on FanOutQA questions over the project's store.

Two kinds of figures, per evaluator back end:

* Pair figures, over (question, passage) pairs built by :func:`crag_bench.pairs.pairs_from_cases`
  from the questions whose gold page is in the store: pair accuracy (a score above 0 agrees
  with the +1/-1 label) and ROC AUC.
* The paper's measure of the action trigger, over *every* leaf question (also those whose gold
  page is not in the store): the action :func:`crag.knowledge.action_trigger.trigger_action` takes
  on the scores of the top-k retrieved passages, against whether a passage of the gold page is
  in the top k. Correct agrees when the gold page was retrieved, Incorrect when it was not;
  Ambiguous agrees with neither.

It also guards the split: ids outside the split file's ``train`` and ``dev`` lists are held out
and refused.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from crag.evaluator.base import RetrievalEvaluator
from crag.knowledge.action_trigger import trigger_action
from crag_bench.evaluator_metrics import pair_accuracy, roc_auc
from crag_bench.fanoutqa import leaf_owners, load_split
from crag_bench.pairs import LabelledPair, RetrievalCase, pairs_from_cases

logger = logging.getLogger(__name__)

ACTIONS: tuple[str, ...] = ("correct", "ambiguous", "incorrect")
"""Rows of the action table, in the paper's order."""

GOLD_COLUMNS: tuple[str, ...] = ("gold_in_top_k", "gold_not_in_top_k")
"""Columns of the action table."""


@dataclass(frozen=True)
class BackendReport:
    """Every figure of one evaluator on a set of retrieval cases."""

    backend: str
    upper: float
    lower: float
    questions: int
    """Leaf questions judged (all of them, whether or not their gold page is in the store)."""
    questions_with_gold: int
    """Questions whose gold page is in the store (the ones that give pairs)."""
    gold_in_top_k: int
    """Questions with a gold-page passage among their retrieved passages."""
    pairs: int
    positives: int
    negatives: int
    pair_accuracy: float | None
    """Share of pairs where ``score > 0`` agrees with the label (``None``: no pairs)."""
    auc: float | None
    """ROC AUC of the pair scores (``None``: a class is missing)."""
    table: dict[str, dict[str, int]]
    """Questions per action (``correct``/``ambiguous``/``incorrect``) and gold column."""
    agreeing: int
    """Questions where the action agrees with gold: Correct and retrieved, Incorrect and not."""
    decided: int
    """Questions whose action is not Ambiguous."""
    agreement: float | None
    """``agreeing / questions`` (``None``: no questions)."""
    agreement_excluding_ambiguous: float | None
    """``agreeing / decided`` (``None``: every question is Ambiguous)."""
    seconds: float
    """Time spent scoring."""

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        return asdict(self)


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def _score_case(
    evaluator: RetrievalEvaluator, case: RetrievalCase
) -> tuple[dict[str, float], float]:
    """Score a case's distinct passages in one call: score per passage, and the seconds."""
    texts = list(dict.fromkeys([text for text, _ in case.retrieved] + case.gold_passages))
    started = time.perf_counter()
    scores = evaluator.score(case.question.question, texts) if texts else []
    seconds = time.perf_counter() - started
    if len(scores) != len(texts):
        raise ValueError(
            f"evaluator {evaluator.name!r} returned {len(scores)} scores for {len(texts)} passages"
        )
    return dict(zip(texts, scores, strict=True)), seconds


def _empty_table() -> dict[str, dict[str, int]]:
    return {action: dict.fromkeys(GOLD_COLUMNS, 0) for action in ACTIONS}


@dataclass
class _Tally:
    """What scoring the cases gathers: the action table, the scored pairs and the time."""

    table: dict[str, dict[str, int]] = field(default_factory=_empty_table)
    """Questions per action and gold column."""
    pair_scores: list[float] = field(default_factory=list)
    pair_labels: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def add(
        self, case: RetrievalCase, by_text: dict[str, float], upper: float, lower: float
    ) -> None:
        """Count the case's action in the table and keep the scores of its labelled pairs."""
        decision = trigger_action([by_text[text] for text, _ in case.retrieved], upper, lower)
        column = GOLD_COLUMNS[0] if case.gold_in_top_k else GOLD_COLUMNS[1]
        self.table[decision["action"]][column] += 1
        if case.gold_passages:
            for pair in pairs_from_cases([case]):
                self.pair_scores.append(by_text[pair.passage])
                self.pair_labels.append(pair.label)


def _score_cases(
    evaluator: RetrievalEvaluator,
    cases: Sequence[RetrievalCase],
    upper: float,
    lower: float,
    *,
    progress: bool,
) -> _Tally:
    """Score every case, one evaluator call a question, and tally the actions and pairs."""
    tally = _Tally()
    for case in tqdm(
        cases,
        desc=f"scoring ({evaluator.name})",
        unit="question",
        file=sys.stderr,
        disable=not progress,
        leave=False,
    ):
        by_text, took = _score_case(evaluator, case)
        tally.seconds += took
        tally.add(case, by_text, upper, lower)
    return tally


def evaluate_backend(
    evaluator: RetrievalEvaluator,
    cases: Sequence[RetrievalCase],
    upper: float,
    lower: float,
    *,
    progress: bool = False,
) -> BackendReport:
    """Score every case with ``evaluator`` and compute pair figures and the action table.

    Each question's passages (its retrieved ones and its gold page's) are scored in one
    evaluator call, so a batched back end scores them in batched forward passes.

    Args:
        evaluator: The evaluator to judge.
        cases: Retrieval cases from :func:`crag_bench.pairs.retrieval_cases`.
        upper: Upper threshold of the action trigger.
        lower: Lower threshold of the action trigger.
        progress: Show a progress bar over questions on stderr.

    Returns:
        The figures.

    Raises:
        ValueError: ``lower`` is above ``upper``, or the evaluator returns the wrong number
            of scores.
    """
    if lower > upper:
        raise ValueError(f"lower threshold {lower} is above upper threshold {upper}")
    tally = _score_cases(evaluator, cases, upper, lower, progress=progress)
    table, pair_scores, pair_labels = tally.table, tally.pair_scores, tally.pair_labels
    agreeing = table["correct"][GOLD_COLUMNS[0]] + table["incorrect"][GOLD_COLUMNS[1]]
    questions = len(cases)
    decided = questions - sum(table["ambiguous"].values())
    positives = sum(1 for label in pair_labels if label > 0)
    return BackendReport(
        backend=evaluator.name,
        upper=upper,
        lower=lower,
        questions=questions,
        questions_with_gold=sum(1 for case in cases if case.gold_passages),
        gold_in_top_k=sum(1 for case in cases if case.gold_in_top_k),
        pairs=len(pair_labels),
        positives=positives,
        negatives=len(pair_labels) - positives,
        pair_accuracy=pair_accuracy(pair_scores, pair_labels),
        auc=roc_auc(pair_scores, pair_labels),
        table=table,
        agreeing=agreeing,
        decided=decided,
        agreement=_ratio(agreeing, questions),
        agreement_excluding_ambiguous=_ratio(agreeing, decided),
        seconds=tally.seconds,
    )


def format_report(report: BackendReport, k: int | None = None) -> str:
    """A human-readable block of text for one back end's report."""

    def figure(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    top = f"top-{k}" if k else "top-k"
    lines = [
        f"evaluator {report.backend}: {report.questions} questions "
        f"(gold page in store: {report.questions_with_gold}, gold in {top}: "
        f"{report.gold_in_top_k}); thresholds upper {report.upper:g}, lower {report.lower:g}",
        f"  pairs {report.pairs} ({report.positives} positive, {report.negatives} negative): "
        f"accuracy {figure(report.pair_accuracy)}, ROC AUC {figure(report.auc)}",
        f"  {'action':<10} {'gold in ' + top:>16} {'gold not in ' + top:>20}",
    ]
    for action in ACTIONS:
        row = report.table[action]
        lines.append(
            f"  {action:<10} {row[GOLD_COLUMNS[0]]:>16} {row[GOLD_COLUMNS[1]]:>20}"
            f"  ({sum(row.values())})"
        )
    lines.append(
        f"  agreement {figure(report.agreement)} ({report.agreeing}/{report.questions}); "
        f"excluding Ambiguous {figure(report.agreement_excluding_ambiguous)} "
        f"({report.agreeing}/{report.decided}); scoring took {report.seconds:.1f} s"
    )
    return "\n".join(lines)


# --- split guards ----------------------------------------------------------------------------


def read_ids_file(path: Path) -> list[str]:
    """Read a JSON list of FanOutQA top-level ids.

    Raises:
        ValueError: The file is missing, not JSON, or not a non-empty list of strings.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read ids file {path}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"ids file {path} is not JSON: {exc}") from exc
    if not isinstance(data, list) or not data or not all(isinstance(i, str) for i in data):
        raise ValueError(f"ids file {path} must hold a non-empty JSON list of question ids")
    return list(dict.fromkeys(data))


def read_split(path: Path | None = None) -> dict[str, list[str]]:
    """Read the split file, with a one-line error when it cannot be read.

    Raises:
        ValueError: The file is missing or malformed.
    """
    try:
        return load_split(path)
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        where = path or "the default split file"
        raise ValueError(f"cannot read the FanOutQA split file {where}: {exc}") from exc


def check_ids(ids: Iterable[str], split: dict[str, list[str]], allowed: Sequence[str]) -> None:
    """Refuse ids outside the allowed parts of the split.

    Args:
        ids: FanOutQA top-level ids.
        split: The split (``{"train": [...], "dev": [...]}``).
        allowed: The parts the ids may come from, e.g. ``("train",)``.

    Raises:
        ValueError: An id is held out (in neither ``train`` nor ``dev``), or is in a part
            that is not allowed; the message names up to five of them.
    """
    ids = list(ids)
    known = set(split["train"]) | set(split["dev"])
    held_out = [i for i in ids if i not in known]
    if held_out:
        raise ValueError(
            f"{len(held_out)} id(s) are held out (in neither train nor dev of the split "
            f"file) and may not be used: {', '.join(held_out[:5])}"
        )
    permitted = {i for part in allowed for i in split[part]}
    other = [i for i in ids if i not in permitted]
    if other:
        raise ValueError(
            f"{len(other)} id(s) are not in the {' or '.join(allowed)} split: "
            f"{', '.join(other[:5])}"
        )


def pair_parts(pairs: Iterable[LabelledPair], split: dict[str, list[str]]) -> dict[str, int]:
    """Count pairs by the split part of their question.

    Returns:
        Pairs per part: ``train``, ``dev``, ``held_out`` (a FanOutQA question outside both)
        and ``other`` (a question id FanOutQA does not know, e.g. hand-made pairs).
    """
    owners = leaf_owners()
    part_of = {i: "train" for i in split["train"]} | {i: "dev" for i in split["dev"]}
    counts = dict.fromkeys(("train", "dev", "held_out", "other"), 0)
    for pair in pairs:
        tops = owners.get(pair.question_id)
        if tops is None:
            counts["other"] += 1
            continue
        parts = {part_of.get(top, "held_out") for top in tops}
        # A leaf shared with a held-out question counts as held out (the strictest part).
        part = next(p for p in ("held_out", "dev", "train") if p in parts)
        counts[part] += 1
    return counts
