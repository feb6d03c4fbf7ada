"""How fast documents are ingested, in pages per second: loading alone, and ``crag ingest``.

Usage: .venv/bin/python bench/scripts/bench_documents.py FILE.pdf [--repeats 3]

Prints medians over ``--repeats`` runs of:

1. loading: :func:`crag.documents.loaders.load_file` on the file (reading the text of every page,
   in this process);
2. ingesting in this process: loading, chunking and embedding into a fresh store on disk
   (:func:`crag.vectorstore.ingest.ingest_paths`, the embedder loaded once beforehand);
3. ``crag ingest`` end to end: a fresh process per run into a fresh store (interpreter start,
   imports and loading the embedder included), as a user runs it.

Pages per second count the PDF's pages (pages without text included), for any document kind
the number of its sections.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _median_seconds(run: Callable[[int], object], repeats: int) -> float:
    times = []
    for repeat in range(repeats):
        start = time.perf_counter()
        run(repeat)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _pages(path: Path) -> int:
    if path.suffix.lower() == ".pdf":
        from pypdf import PdfReader

        return len(PdfReader(path).pages)
    from crag.documents.loaders import load_file

    return sum(len(doc.parts()) for doc in load_file(path))


def bench(path: Path, repeats: int) -> list[tuple[str, float]]:
    """``(stage, median seconds)`` for loading, ingesting in process, and ``crag ingest``."""
    from crag.documents.loaders import load_file
    from crag.vectorstore.embeddings import load_embeddings
    from crag.vectorstore.ingest import QUIET, ingest_paths
    from crag.vectorstore.store import open_store

    embeddings = load_embeddings()
    with tempfile.TemporaryDirectory() as scratch:

        def in_process(repeat: int) -> None:
            store = open_store(Path(scratch) / f"inproc{repeat}", "bench", embeddings, create=True)
            report = ingest_paths([path], store, QUIET)
            if report.failed:
                raise SystemExit(f"ingestion failed: {report.failed}")

        def cli(repeat: int) -> None:
            store = Path(scratch) / f"cli{repeat}"
            command = [str(ROOT / ".venv/bin/crag"), "ingest", "--no-server"]
            subprocess.run(
                [*command, "--store", str(store), str(path)],
                cwd=ROOT,
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
                capture_output=True,
                check=True,
            )

        return [
            ("load (text of every page)", _median_seconds(lambda _: load_file(path), repeats)),
            ("ingest in process (load, chunk, embed)", _median_seconds(in_process, repeats)),
            ("crag ingest, fresh process", _median_seconds(cli, repeats)),
        ]


def main() -> None:
    """Print the medians, in seconds and pages per second."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    pages = _pages(args.file)
    print(f"{args.file.name}: {pages} pages, median of {args.repeats} runs")
    for stage, seconds in bench(args.file.resolve(), args.repeats):
        print(f"  {stage:<42} {seconds:7.2f} s  {pages / seconds:7.1f} pages/s")


if __name__ == "__main__":
    main()
