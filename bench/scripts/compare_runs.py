"""Compare two experiments of recorded ``crag-bench eval`` runs, question by question.

Usage: .venv/bin/python bench/scripts/compare_runs.py RUN_A:EXPERIMENT RUN_B:EXPERIMENT
       [--removed] [--json]

For example, CRAG before and after a change to the method, each run with ``crag-bench eval --out``:
``bench/scripts/compare_runs.py runs/after:crag runs/before:crag``; ``--removed`` compares only the
questions whose gold documents were removed (``crag-gold-removed`` experiments). Prints A minus
B for accuracy and knowledge recall: rates, the paired bootstrap 95% interval and McNemar's
exact p, with the questions only A / only B got right (:mod:`crag_bench.run_comparison`).
"""

from __future__ import annotations

import argparse
import json
import sys

from crag_bench.run_comparison import Side, compare_runs, describe


def main() -> int:
    """Parse the arguments, compare, print; 2 on bad input."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", help="RUN_DIR:EXPERIMENT (A, e.g. runs/after:crag)")
    parser.add_argument("b", help="RUN_DIR:EXPERIMENT (B, e.g. runs/before:crag)")
    parser.add_argument("--removed", action="store_true", help="only questions with gold removed")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    try:
        comparison = compare_runs(
            Side.parse(args.a), Side.parse(args.b), "removed" if args.removed else "all"
        )
    except ValueError as exc:
        print(f"compare_runs: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(comparison, indent=2) if args.json else describe(comparison))
    return 0


if __name__ == "__main__":
    sys.exit(main())
