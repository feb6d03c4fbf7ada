"""``crag-bench eval-reader``: answer a recorded run's prompts again with another generator.

A run made with ``crag-bench eval --record-prompts`` (or ``--prompts-only``) keeps, in each row,
the prompt every pipeline sent its generator. This module asks another generator the same
prompts and rebuilds every figure of the run from the new answers: accuracy per experiment,
CRAG's paired comparisons, the gold-removed split, the abstention check. Knowledge recall, the
actions and the evaluator agreement do not depend on the reader and stay as recorded.

So a reader can be compared with the shipped one on exactly the knowledge each pipeline
chose, and a reader too slow for the CPU can be run on a GPU machine that has neither the
store nor the evaluator nor the simulated web: the prompts are all it needs.

A run that made no generator call (CRAG abstained, or the run failed) keeps its recorded
answer. A run that made more than one call (the keyword rewrite feeds the web search, which
another reader would change) cannot be replayed; it is reported and counted as an error.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel

from crag.knowledge.attribution import strip_markers
from crag_bench.answers import answer_in_text
from crag_bench.experiments import EXPERIMENTS, Experiment
from crag_bench.prompt_recording import RecordedCall, messages_of
from crag_bench.questions import EvalQuestion
from crag_bench.runner import Row, answer_figures, machine_info
from crag_bench.significance import RESAMPLES
from crag_bench.stopping import OnStop, run_each

logger = logging.getLogger(__name__)

NOT_REPLAYABLE = "not replayable: the run made more than one generator call"
"""The error of a row whose run asked the generator twice (the keyword rewrite is on)."""

_CLOSED_BOOK = frozenset(e.name for e in EXPERIMENTS if e.graph == "no-retrieval")
"""Experiments whose answer is kept as the generator wrote it; every other graph answers in
:func:`crag.nodes.generate.generate`, which removes the ``[n]`` citation markers."""


def load_recorded_run(run_dir: Path) -> tuple[dict[str, Any], list[Row]]:
    """The figures (``results.json``) and rows (``rows.jsonl``) of a recorded eval run.

    Raises:
        ValueError: A file is missing or unreadable, or the run did not record its prompts.
    """
    results_path, rows_path = run_dir / "results.json", run_dir / "rows.jsonl"
    for path in (results_path, rows_path):
        if not path.is_file():
            raise ValueError(f"{path} not found: give the --out folder of a crag-bench eval run")
    try:
        results = json.loads(results_path.read_text(encoding="utf-8"))
        lines = rows_path.read_text(encoding="utf-8").splitlines()
        rows = [Row(**json.loads(line)) for line in lines if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError) as exc:
        raise ValueError(f"cannot read the run in {run_dir}: {exc}") from exc
    if not isinstance(results, dict) or not isinstance(results.get("meta"), dict):
        raise ValueError(f"{results_path} is not the results.json of a crag-bench eval run")
    if not rows:
        raise ValueError(f"{rows_path} holds no rows")
    if any(row.prompts is None for row in rows):
        raise ValueError(
            f"the run in {run_dir} did not record its prompts: "
            "run crag-bench eval with --record-prompts (or --prompts-only)"
        )
    return results, rows


def asks_generator(row: Row) -> bool:
    """Whether ``row``'s run made exactly one generator call (a prompt to answer again)."""
    return len(row.prompts or []) == 1


def _answer(model: BaseChatModel, call: RecordedCall, cites: bool) -> tuple[str, float]:
    """The generator's answer to one recorded prompt, as the node would keep it, and seconds."""
    started = time.perf_counter()
    reply = model.invoke(messages_of(call))
    answer = reply.text.strip()
    if cites:
        answer = strip_markers(answer)
    return answer, time.perf_counter() - started


def distinct_prompts(rows: Sequence[Row]) -> dict[str, list[int]]:
    """The rows that ask the generator, grouped by what they ask: one key per distinct prompt.

    Two rows whose recorded prompts are the same (messages and whether the answer's ``[n]``
    markers are removed) get the same answer from a greedy reader, so each prompt is asked
    once. In a recorded run many are: standard RAG's and a Correct CRAG run's with whole
    passages, and every experiment's on the questions whose gold was not removed.
    """
    groups: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        if row.prompts and asks_generator(row):
            cites = row.experiment not in _CLOSED_BOOK
            key = json.dumps([cites, row.prompts[0]["messages"]], sort_keys=True)
            groups.setdefault(key, []).append(index)
    return groups


def reanswer(
    rows: Sequence[Row],
    model: BaseChatModel,
    workers: int = 1,
    progress: Callable[[int], None] | None = None,
    on_stop: OnStop | None = None,
) -> list[Row]:
    """The rows with each recorded generator prompt answered by ``model`` and judged again.

    Each distinct prompt is asked once (:func:`distinct_prompts`); ``progress`` counts them.
    ``workers`` prompts are asked at once (a local generator with batching on decodes them
    together). Rows without a call keep their answers; rows with several become errors
    (:data:`NOT_REPLAYABLE`). Every new row is marked untimed: its seconds are generation only.
    On Ctrl-C or SIGTERM the prompts not yet asked are dropped, ``on_stop`` gets the rows
    answered so far (and how many rows there are) and the interrupt propagates.
    """
    groups = list(distinct_prompts(rows).values())
    answers: dict[int, tuple[str, float]] = {}

    def ask(indices: list[int]) -> None:
        first = rows[indices[0]]
        assert first.prompts is not None  # distinct_prompts keeps rows with one call
        reply = _answer(model, first.prompts[0], first.experiment not in _CLOSED_BOOK)
        for index in indices:
            answers[index] = reply
        if progress is not None:
            progress(1)

    def length(indices: list[int]) -> int:
        prompts = rows[indices[0]].prompts or []
        return sum(len(m["content"]) for m in prompts[0]["messages"])

    # Longest prompts first, so batches hold prompts of similar length.
    ordered = sorted(groups, key=lambda g: -length(g))
    try:
        run_each(ask, ordered, workers, threading.Event())
    except KeyboardInterrupt:
        if on_stop is not None:
            answered = dict(answers)
            done = [r for i, r in enumerate(_replayed(rows, answered)) if i in answered]
            on_stop(done, len(rows))
        raise
    return _replayed(rows, answers)


def _replayed(rows: Sequence[Row], answers: dict[int, tuple[str, float]]) -> list[Row]:
    """The rows with the new answers (by row index) judged; see :func:`reanswer`."""
    replayed: list[Row] = []
    for index, row in enumerate(rows):
        if index in answers:
            answer, seconds = answers[index]
            replayed.append(
                dataclasses.replace(
                    row,
                    answer=answer,
                    correct=answer_in_text(row.answers, answer),
                    seconds=seconds,
                    stages={**row.stages, "generate": seconds},
                    timed=False,
                )
            )
        elif len(row.prompts or []) > 1:
            failed = dataclasses.replace(row, answer="", correct=False, error=NOT_REPLAYABLE)
            replayed.append(dataclasses.replace(failed, timed=False))
        else:
            replayed.append(dataclasses.replace(row, timed=False))
    return replayed


def _experiments(results: dict[str, Any]) -> list[Experiment]:
    """The recorded run's experiments, in its order.

    Raises:
        ValueError: The run names an experiment this version does not know.
    """
    known = {e.name: e for e in EXPERIMENTS}
    names = [str(e.get("name")) for e in results.get("experiments") or []]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"the recorded run has experiments unknown here: {', '.join(unknown)}")
    return [known[name] for name in names]


def questions_of(rows: Sequence[Row]) -> list[EvalQuestion]:
    """The run's questions, in its order, rebuilt from its rows."""
    questions: dict[str, EvalQuestion] = {}
    for row in rows:
        if row.id not in questions:
            questions[row.id] = EvalQuestion(
                row.id, row.question, tuple(row.answers), tuple(row.gold_sources)
            )
    return list(questions.values())


def reanswered_results(
    recorded: dict[str, Any],
    rows: Sequence[Row],
    *,
    generator: str,
    source: str,
    seconds: float,
    resamples: int = RESAMPLES,
) -> dict[str, Any]:
    """Every figure of the recorded run, recomputed from the new rows.

    Latency is left out: the new answers were generated in batches, maybe on another machine.
    """
    experiments = _experiments(recorded)
    meta = dict(recorded["meta"])
    seed = int(meta.get("seed", 0))
    share = int(meta.get("gold_removed_share", 50))
    recorded_generator = meta.get("generator")
    meta.update(
        {
            "generator": generator,
            "seconds": seconds,
            "machine": machine_info(),
            "prompts_only": False,
            "reader_swap": {
                "source": source,
                "recorded_generator": recorded_generator,
                "recorded_prompts_only": bool(recorded["meta"].get("prompts_only")),
                "asked": sum(1 for r in rows if asks_generator(r)),
                "distinct_prompts": len(distinct_prompts(rows)),
                "kept": sum(1 for r in rows if not r.prompts),
                "not_replayable": sum(1 for r in rows if r.error == NOT_REPLAYABLE),
            },
        }
    )
    return {
        "meta": meta,
        "data": recorded.get("data", {}),
        **answer_figures(
            experiments, rows, questions_of(rows), seed=seed, share=share, resamples=resamples
        ),
        "latency": {"experiments": {}, "crag_over_rag": {}},
        "rows": [dataclasses.asdict(r) for r in rows],
    }
