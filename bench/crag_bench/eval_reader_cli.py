"""``crag-bench eval-reader``: a recorded run's prompts answered by another generator."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from crag.generator.repetition import DEFAULT_NGRAM

logger = logging.getLogger(__name__)


def add_eval_reader_command(sub: Any) -> None:
    """Register ``crag-bench eval-reader`` on the CLI's subparsers."""
    reader = sub.add_parser(
        "eval-reader",
        help="answer a recorded crag-bench eval run's prompts with another generator",
        description="Ask GENERATOR every prompt that a `crag-bench eval --record-prompts` (or "
        "--prompts-only) run recorded, and write the run's report from the new answers: each "
        "pipeline's knowledge is held fixed and only the reader changes. Needs neither the "
        "store nor the web, so it runs where the generator is fast (a GPU).",
    )
    reader.add_argument("run", type=Path, metavar="RUN_DIR", help="the --out folder of the run")
    reader.add_argument(
        "--generator",
        required=True,
        metavar="SPEC",
        help="'smollm2', 'endpoint' or 'endpoint:MODEL' (the model server of the CRAG_LLM_* "
        "settings), 'gguf:/path/model.gguf', 'local:/path' or 'provider:model'",
    )
    reader.add_argument("--out", type=Path, required=True, help="where the report is written")
    reader.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="prompts asked at once; a local generator decodes them in batches of up to N "
        "(default 1: one at a time, reproducible; 64 suits a GPU)",
    )
    reader.add_argument(
        "--max-new-tokens",
        type=int,
        metavar="N",
        help="longest answer (default: the recorded run's)",
    )
    reader.add_argument(
        "--no-repeat-ngram-size",
        type=int,
        default=DEFAULT_NGRAM,
        metavar="N",
        help=f"a local reader's reply never repeats an n-gram of its own tokens this long "
        f"(default {DEFAULT_NGRAM}; 0: off)",
    )
    reader.set_defaults(func=cmd_eval_reader)


def _partial_writer(bar: Any, out: Path) -> Callable[[Sequence[Any], int], None]:
    """What an interrupted eval-reader does with its answered rows: close ``bar``, write them."""
    from crag_bench.stopping import write_partial_rows

    def write(rows: Sequence[Any], total: int) -> None:
        bar.close()  # the message starts a line of its own
        write_partial_rows(out, rows, total, "crag-bench eval-reader")

    return write


def cmd_eval_reader(args: argparse.Namespace) -> int:
    """Run ``crag-bench eval-reader`` and write its report."""
    from tqdm import tqdm

    from crag.generator.factory import load_chat_model
    from crag_bench.eval_report import main_table, write_report
    from crag_bench.reader_swap import (
        distinct_prompts,
        load_recorded_run,
        reanswer,
        reanswered_results,
    )
    from crag_bench.runner import batch_generation
    from crag_bench.stopping import remove_partial_rows

    if args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")
    recorded, rows = load_recorded_run(args.run)
    max_new_tokens = args.max_new_tokens or int(recorded["meta"].get("max_new_tokens") or 48)
    started = time.perf_counter()
    model = load_chat_model(args.generator, max_new_tokens, args.no_repeat_ngram_size)
    if args.workers > 1:
        batch_generation(model, args.workers)
    asked = len(distinct_prompts(rows))
    with tqdm(total=asked, desc="crag-bench eval-reader", unit="prompt", file=sys.stderr) as bar:
        on_stop = _partial_writer(bar, args.out)
        new_rows = reanswer(rows, model, args.workers, progress=bar.update, on_stop=on_stop)
    results = reanswered_results(
        recorded,
        new_rows,
        generator=args.generator,
        source=str(args.run),
        seconds=time.perf_counter() - started,
    )
    written = write_report(results, args.out)
    remove_partial_rows(args.out)
    sys.stdout.write(main_table(results) + "\n\n")
    sys.stdout.write("".join(f"wrote {path}\n" for path in written))
    sys.stdout.flush()
    return 0
