"""Choose the action trigger's thresholds on dev runs of the ``thresholds`` preset.

Each argument is the folder (or ``rows.jsonl``) of one ``crag-bench eval --experiments thresholds``
run on a dev set (never a test set). The script replays the trigger on the rows' passage scores
(see :mod:`crag_bench.threshold_calibration`) and prints, for the current thresholds and for the
best pairs: accuracy, knowledge recall and the action counts, on each set and on all together,
plus a cross-set check (the pair best on one set, measured on the others).

Usage:
    .venv/bin/python bench/scripts/calibrate_thresholds.py \
        .crag/eval-nq-dev-thr .crag/eval-trivia-dev-thr
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from crag.settings.run_settings import RunSettings
from crag_bench.held_out import refuse_held_out
from crag_bench.threshold_calibration import Case, Outcome, evaluate, grid, load_cases

logger = logging.getLogger("calibrate_thresholds")


def _rows_path(path: Path) -> Path:
    return path / "rows.jsonl" if path.is_dir() else path


def _line(label: str, outcome: Outcome) -> str:
    actions = "/".join(str(outcome.actions[a]) for a in ("correct", "ambiguous", "incorrect"))
    return (
        f"{label:<28} upper {outcome.upper:+.4f} lower {outcome.lower:+.4f}  "
        f"accuracy {outcome.accuracy:.3f}  recall {outcome.recall:.3f}  C/A/I {actions}"
    )


def main() -> None:
    """Print the current and the best threshold pairs of the given runs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="eval folders or rows.jsonl files")
    parser.add_argument("--top", type=int, default=10, help="best pairs to list (default 10)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    defaults = RunSettings()
    sets: dict[str, list[Case]] = {str(p): load_cases(_rows_path(p)) for p in args.runs}
    refuse_held_out((c.id for cases in sets.values() for c in cases), "calibrate")
    everything = [c for cases in sets.values() for c in cases]
    for name, cases in [*sets.items(), ("all", everything)]:
        logger.info("== %s: %d cases", name, len(cases))
        for removed, label in ((False, "gold kept"), (True, "gold-removed setting")):
            part = [c for c in cases if c.gold_removed_setting == removed]
            if part:
                current = evaluate(part, *defaults.action_thresholds())
                logger.info("%s", _line(f"current, {label}", current))
        current = evaluate(cases, *defaults.action_thresholds())
        logger.info("%s", _line("current, both", current))
        for rank, outcome in enumerate(grid(cases)[: args.top], start=1):
            logger.info("%s", _line(f"best #{rank}", outcome))
    if len(sets) > 1:
        logger.info("== cross-set: the best pair of one set, on the others")
        for name, cases in sets.items():
            best = grid(cases)[0]
            others = [c for other, rest in sets.items() if other != name for c in rest]
            held = evaluate(others, best.upper, best.lower)
            baseline = evaluate(others, *defaults.action_thresholds())
            logger.info(
                "fitted on %s: %s | current there: accuracy %.3f",
                name,
                _line("on the others", held),
                baseline.accuracy,
            )


if __name__ == "__main__":
    main()
