"""The ``crag-bench`` command line: the benchmark, the evaluator's research tools, the load test.

``crag-bench eval`` runs the benchmark (CRAG against RAG and the ablations), ``crag-bench
eval-reader`` answers a recorded run's prompts with another generator, ``crag-bench evaluator``
builds pairs, trains, calibrates, reports on and times retrieval evaluators, and ``crag-bench
server`` load-tests a LangGraph server. None of this is part of the ``crag`` product: it needs
the benchmark's data and the development extras (``make eval`` installs them).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from crag.app.cli.commands import print_error, print_output, run_command
from crag.app.environment import configure_environment
from crag_bench.bench_settings import given_settings
from crag_bench.eval_cli import add_eval_command
from crag_bench.eval_reader_cli import add_eval_reader_command
from crag_bench.evaluator_cli import add_evaluator_commands
from crag_bench.server_bench import (
    DEFAULT_LEVELS,
    DEFAULT_TIMEOUT,
    BenchError,
    parse_levels,
    run_bench,
)


def cmd_bench_server(args: argparse.Namespace) -> int:
    """Load-test the LangGraph server: one row per concurrency level, exit 1 on any failure."""
    extra = given_settings(args.set)
    try:
        report = run_bench(
            url=args.url,
            runs=args.runs,
            levels=parse_levels(args.levels) if args.levels is not None else None,
            timeout=args.timeout,
            store=args.store,
            documents=args.documents,
            jobs_per_worker=args.jobs,
            extra_context=extra,
            allow_remote=args.allow_remote,
        )
    except BenchError as exc:
        print_error(f"crag-bench: error: {exc}", multiline=True)  # may end with the server's log
        return 2
    for line in report.lines():
        print_output(line)
    return 0 if report.ok else 1


def _add_server_command(sub: Any) -> None:
    """``crag-bench server``: the load test of a LangGraph server."""
    bench = sub.add_parser(
        "server",
        help="load-test the LangGraph server: runs at several concurrency levels vs. one at a time",
    )
    bench.add_argument(
        "--url",
        help="a running server, its token in CRAG_SERVER_TOKEN (default: start langgraph dev "
        "on 127.0.0.1)",
    )
    default_levels = ",".join(map(str, DEFAULT_LEVELS))
    bench.add_argument(
        "--levels",
        metavar="L1,L2,...",
        help="concurrency levels: for each, that many runs sent at once, level after level "
        f"(default {default_levels})",
    )
    bench.add_argument(
        "--runs", type=int, help="one concurrency level of this many runs (the same as --levels N)"
    )
    bench.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds for each phase (the sequential runs, then each level); unfinished runs "
        f"fail (default {DEFAULT_TIMEOUT:.0f})",
    )
    bench.add_argument(
        "--store", help="store of the started server (default: ~50 summaries, built in a temp dir)"
    )
    bench.add_argument(
        "--documents", type=int, default=50, help="summaries in the built store (default 50)"
    )
    bench.add_argument(
        "--jobs",
        type=int,
        default=10,
        help="runs the started server executes at once (default 10; langgraph dev alone runs 1)",
    )
    bench.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="a per-run setting, sent with every run; a parameter of the method or a "
        "deployment setting (e.g. generator_batch_size, 8 by default there) goes into the "
        "started server's environment (refused with --url: that server's operator sets them)",
    )
    bench.add_argument(
        "--allow-remote", action="store_true", help="allow a --url that is not on 127.0.0.1"
    )
    bench.set_defaults(func=cmd_bench_server)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for ``crag-bench``."""
    parser = argparse.ArgumentParser(
        prog="crag-bench",
        description="crag's benchmark and research tools (not part of the crag product).",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = parser.add_subparsers(dest="command", required=True)
    add_eval_command(sub)
    add_eval_reader_command(sub)
    add_evaluator_commands(sub)
    _add_server_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``crag-bench``; errors the user can fix are printed as one line with exit code 2."""
    configure_environment()
    return run_command(build_parser().parse_args(argv), "crag-bench")


if __name__ == "__main__":
    sys.exit(main())
