"""Build the open-domain QA sets of ``crag-bench eval --dataset`` from DPR's question sets.

Reads the DPR sets (NQ, TriviaQA, WebQuestions, SQuAD, CuratedTREC) from the Anserini jar inside
the ``pyserini==0.17.0`` wheel, keeps the questions the bundled corpus can answer (the rule is in
``crag_bench/open_domain.py``) and writes ``bench/crag_bench/data/open_domain/<set>.jsonl``.

Usage: .venv/bin/python bench/scripts/build_open_domain_sets.py [--jar anserini-0.14.3-fatjar.jar]
Without ``--jar`` the wheel is fetched with ``pip download --no-deps`` into a temporary folder.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

from crag.vectorstore.corpus import load_corpus
from crag_bench.dpr_sets import DPR_SETS, DprSetError, download_jar, dpr_set
from crag_bench.open_domain import MAX_GOLD_DOCUMENTS, build_sets

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "crag_bench" / "data" / "open_domain"

logger = logging.getLogger("build_open_domain_sets")


def main() -> int:
    """Parse the command line, build the sets and print their counts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jar", type=Path, help="anserini-0.14.3-fatjar.jar (default: download)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument(
        "--sets",
        help="comma-separated set names (default: all): " + ", ".join(s.name for s in DPR_SETS),
    )
    parser.add_argument(
        "--max-gold",
        type=int,
        default=MAX_GOLD_DOCUMENTS,
        metavar="K",
        help=f"most summaries a question's answers may occur in (default {MAX_GOLD_DOCUMENTS})",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        sets = (
            tuple(dpr_set(n.strip()) for n in args.sets.split(",") if n.strip())
            if args.sets
            else DPR_SETS
        )
        documents = [(doc.source, doc.text) for doc in load_corpus()]
        with tempfile.TemporaryDirectory() as folder:
            jar = args.jar or download_jar(Path(folder))
            counts = build_sets(jar, documents, args.out, sets, args.max_gold)
    except (DprSetError, ValueError, OSError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, (read, kept) in counts.items():
        print(f"{name}\t{read}\t{kept}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
