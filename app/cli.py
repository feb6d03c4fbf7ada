"""The ``crag`` command line: ingest documents, ask questions, draw the graph."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from graph.context import DEFAULT_COLLECTION, Context
from nodes.generate import render_strip

logger = logging.getLogger("crag")


def _configure_environment() -> None:
    """Keep every library offline and quiet unless the user says otherwise."""
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if verbose < 2:
        for noisy in ("httpx", "chromadb", "sentence_transformers", "transformers"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def _context(args: argparse.Namespace) -> Context:
    from app.settings import parse_settings

    base: dict[str, Any] = {}
    if getattr(args, "store", None):
        base["store_path"] = args.store
        # A store the user names must exist: never fill it with the bundled corpus silently.
        base["default_corpus"] = False
    if getattr(args, "collection", None):
        base["collection"] = args.collection
    return parse_settings(list(getattr(args, "set", None) or []), base)


def _err(message: str) -> None:
    print(message, file=sys.stderr)


def _short(text: str, width: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _report_update(node: str, update: dict[str, Any]) -> None:
    """Print one line (or a few) per finished node."""
    if node == "retrieve":
        docs = update.get("documents", [])
        _err(f"[retrieve] {len(docs)} passages")
    elif node == "grade":
        for doc in update.get("documents", []):
            _err(f"[grade] {doc['score']:+.3f}  {doc['source']}#{doc['chunk']}")
    elif node == "decide_action":
        decision = update.get("decision", {})
        _err(f"[decide_action] {update.get('action')}: {decision.get('reason', '')}")
    elif node == "refine":
        strips = update.get("internal_knowledge", [])
        _err(f"[refine] kept {len(strips)} strips")
        for strip in strips:
            text = _short(render_strip(strip["text"]), 70)
            _err(f"    {strip['score']:+.3f}  {text}  ({strip['source']})")
    elif node == "rewrite_query":
        _err(f"[rewrite_query] {update.get('search_query', '')!r}")
    elif node == "web_search":
        strips = update.get("external_knowledge", [])
        _err(f"[web_search] kept {len(strips)} results")
        for strip in strips:
            _err(f"    {strip['score']:+.3f}  {strip['source']}")
    elif node == "generate":
        _err("[generate] done")
    for note in update.get("notes", []) if isinstance(update.get("notes"), list) else []:
        _err(f"    note: {note}")


def cmd_ask(args: argparse.Namespace) -> int:
    """Answer a question, streaming progress per node to stderr."""
    from app.api import OUTPUT_KEYS
    from graph.builder import graph

    context = _context(args)
    final: dict[str, Any] = {}
    stream: Any = graph.stream(
        {"question": args.question}, context=context, stream_mode=["updates", "values"]
    )
    for mode, chunk in stream:
        if mode == "updates" and not args.quiet:
            for node, update in chunk.items():
                if isinstance(update, dict):
                    _report_update(node, update)
        elif mode == "values":
            final = chunk
    output = {key: final[key] for key in OUTPUT_KEYS if key in final}
    if args.json:
        print(json.dumps(output, indent=2, ensure_ascii=False))
    else:
        for note in output.get("notes", []):
            _err(f"note: {note}")
        print(output.get("answer", ""))
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    """Ingest files or directories into the store."""
    from app.api import ingest

    report = ingest(args.paths, _context(args))
    for source, error in report.failed:
        _err(f"failed: {source}: {error}")
    print(report.summary())
    return 1 if report.failed and not (report.added or report.replaced or report.skipped) else 0


def cmd_graph(args: argparse.Namespace) -> int:
    """Print the graph as a mermaid diagram."""
    from graph.builder import graph

    print(graph.get_graph().draw_mermaid())
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for ``crag``."""
    parser = argparse.ArgumentParser(
        prog="crag", description="Corrective RAG over your documents (LangGraph)."
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = parser.add_subparsers(dest="command", required=True)

    def store_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--store", help="Chroma store directory (default: .crag/chroma)")
        p.add_argument("--collection", help=f"collection name (default: {DEFAULT_COLLECTION})")
        p.add_argument(
            "--set",
            action="append",
            metavar="KEY=VALUE",
            help="any setting of the context schema, e.g. --set top_k=5 (repeatable)",
        )

    ask = sub.add_parser("ask", help="answer a question")
    ask.add_argument("question")
    ask.add_argument("--json", action="store_true", help="print the output state as JSON")
    ask.add_argument("-q", "--quiet", action="store_true", help="no per-node progress")
    store_options(ask)
    ask.set_defaults(func=cmd_ask)

    ingest = sub.add_parser("ingest", help="add .txt .md .html .jsonl files to the store")
    ingest.add_argument("paths", nargs="+")
    store_options(ingest)
    ingest.set_defaults(func=cmd_ingest)

    graph_cmd = sub.add_parser("graph", help="print the graph as mermaid")
    graph_cmd.set_defaults(func=cmd_graph)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; errors the user can fix are printed as one line with exit code 2."""
    _configure_environment()
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    from evaluator.base import EvaluatorError
    from graph.validation import InvalidQuestionError
    from vectorstore.store import StoreError

    try:
        return int(args.func(args))
    except (InvalidQuestionError, StoreError, EvaluatorError, ValueError) as exc:
        _err(f"crag: error: {exc}")
        return 2
    except KeyboardInterrupt:
        _err("crag: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
