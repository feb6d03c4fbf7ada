"""Per question set figures of one ``crag-bench eval`` run over several bundled sets.

Usage: .venv/bin/python bench/scripts/per_set_figures.py RUN_DIR [--json]

For a run whose questions came from several bundled sets (their
``bench/crag_bench/data/open_domain`` lines concatenated into one ``--questions`` file), prints per
set and pooled: each experiment's accuracy, knowledge recall, abstentions and "no answer"
replies, CRAG minus every other experiment and gold-removed CRAG minus gold-removed RAG over all
questions and the removed ones, with the paired bootstrap 95% interval and McNemar's exact p
(:mod:`crag_bench.per_set`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from crag_bench.per_set import markdown, per_set_figures, read_rows


def main() -> int:
    """Read the run, print its per-set tables (or JSON); 2 on bad input."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="the --out folder of a crag-bench eval run")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    try:
        figures = per_set_figures(read_rows(args.run))
    except ValueError as exc:
        print(f"per_set_figures: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(figures, indent=2) if args.json else markdown(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
