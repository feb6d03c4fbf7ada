"""The ``crag`` command line: ingest, remove, ask (streamed, on a thread), history, graph, serve."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from crag.app.cli import collector
from crag.app.cli.output_errors import discard_pending_output, os_error_text
from crag.app.cli.terminal_text import TerminalFormatter, json_text, terminal_text
from crag.app.environment import configure_environment
from crag.app.threads import ThreadsDatabaseError, describe_threads_db
from crag.knowledge.conversation import source_location, source_title, source_writer
from crag.nodes.generate import render_strip
from crag.settings.deployment import DEFAULT_COLLECTION

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

    from crag.app.cli.settings import CommandSettings
    from crag.settings.run_settings import RunSettings

logger = logging.getLogger("crag")

PAUSED_COLLECTOR_COMMANDS = frozenset({"ask", "serve"})
"""Commands that keep the garbage collector paused by the console entry point: ``ask`` to its
end (one run), ``serve`` until its models are loaded (:mod:`crag.app.cli.collector`)."""


def setup_logging(verbose: int, force: bool = False) -> None:
    """Log to stderr; ``force`` replaces earlier handlers.

    The warm server forces it: its stderr is a different client's for each command.
    """
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    # Log lines carry file names, sources and exception text: escaped like everything printed.
    handler.setFormatter(TerminalFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler], force=force)
    if verbose < 2:
        for noisy in ("httpx", "chromadb", "sentence_transformers", "transformers"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def _settings(args: argparse.Namespace) -> CommandSettings:
    """The command's settings of the three kinds: ``--store``, ``--collection``, ``--set``."""
    from crag.app.cli.settings import CommandSettings, parse_settings, with_absolute_model_paths

    base: dict[str, Any] = {}
    if getattr(args, "store", None) is not None:  # an empty --store is refused, not ignored
        base["store_path"] = args.store
        # A store the user names must exist: never fill it with the bundled corpus silently.
        base["default_corpus"] = False
    if getattr(args, "collection", None):
        base["collection"] = args.collection
    given = parse_settings(list(getattr(args, "set", None) or []), base)
    deployment = with_absolute_model_paths(given.deployment)
    _check_store_path(deployment.store_path)
    return CommandSettings(given.context, given.method, deployment)


def _check_store_path(path: str) -> None:
    r"""Refuse a store path Chroma cannot use: one whose bytes are not UTF-8 (``st\xff``).

    Chroma would fail with an encoding error, blamed on a damaged store.
    """
    shown = os.fsencode(path).decode("utf-8", "backslashreplace")
    if shown != path:
        raise ValueError(
            f"the store path {shown} cannot be used: it is not valid UTF-8; choose another "
            "with --store or CRAG_STORE_PATH"
        )


def print_error(message: str, *, multiline: bool = False) -> None:
    """Write ``message`` to stderr, terminal control characters escaped."""
    print(terminal_text(message, multiline=multiline), file=sys.stderr)


def print_output(text: str, *, multiline: bool = False) -> None:
    """Write ``text`` to stdout, terminal control characters escaped."""
    print(terminal_text(text, multiline=multiline))


def _json_text(value: Any) -> str:
    """``value`` as indented JSON that is safe to print (see :func:`json_text`)."""
    return json_text(value)


def _short(text: str, width: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _score(value: float | None) -> str:
    """A score for the progress lines; unscored strips (ablations) show as dashes."""
    return "  -   " if value is None else f"{value:+.3f}"


def _strip_lines(strips: list[dict[str, Any]], *, with_text: bool) -> list[str]:
    """The indented score lines under refine's or web_search's kept-strips line."""
    if with_text:
        return [
            f"    {_score(s['score'])}  {_short(render_strip(s['text']), 70)}  ({s['source']})"
            for s in strips
        ]
    return [f"    {_score(s['score'])}  {s['source']}" for s in strips]


def _contextualize_lines(update: dict[str, Any]) -> list[str]:
    return [f"[contextualize] {update.get('standalone_question', '')!r}"]


def _retrieve_lines(update: dict[str, Any]) -> list[str]:
    return [f"[retrieve] {len(update.get('documents', []))} passages"]


def _grade_lines(update: dict[str, Any]) -> list[str]:
    return [
        f"[grade] {doc['score']:+.3f}  {doc['source']}#{doc['chunk']}"
        for doc in update.get("documents", [])
    ]


def _decide_action_lines(update: dict[str, Any]) -> list[str]:
    decision = update.get("decision", {})
    return [f"[decide_action] {update.get('action')}: {decision.get('reason', '')}"]


def _refine_lines(update: dict[str, Any]) -> list[str]:
    strips = update.get("internal_knowledge", [])
    return [f"[refine] kept {len(strips)} strips", *_strip_lines(strips, with_text=True)]


def _rewrite_query_lines(update: dict[str, Any]) -> list[str]:
    return [f"[rewrite_query] {update.get('search_query', '')!r}"]


def _web_search_lines(update: dict[str, Any]) -> list[str]:
    strips = update.get("external_knowledge", [])
    return [f"[web_search] kept {len(strips)} results", *_strip_lines(strips, with_text=False)]


def _generate_lines(update: dict[str, Any]) -> list[str]:
    if update.get("abstained"):
        return ["[generate] abstained: no usable knowledge"]
    return ["[generate] done"]


_UPDATE_LINES: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "contextualize": _contextualize_lines,
    "retrieve": _retrieve_lines,
    "grade": _grade_lines,
    "decide_action": _decide_action_lines,
    "refine": _refine_lines,
    "rewrite_query": _rewrite_query_lines,
    "web_search": _web_search_lines,
    "generate": _generate_lines,
    "abstain": _generate_lines,  # the answer step either way: "[generate] abstained: ..."
}


def _report_update(node: str, update: dict[str, Any]) -> None:
    """Print one line (or a few) per finished node, then the notes it added."""
    lines = _UPDATE_LINES.get(node)
    for line in lines(update) if lines is not None else []:
        print_error(line)
    for note in update.get("notes", []) if isinstance(update.get("notes"), list) else []:
        print_error(f"    note: {note}")


def _progress_line(event: dict[str, Any]) -> str | None:
    """The line for a progress event that says more than the node's update line, if any."""
    node, kind = event.get("node", "?"), event.get("event", "?")
    if node == "web_search" and kind == "page":
        status = "read" if event.get("ok") else "failed"
        done, total = event.get("done"), event.get("total")
        return f"[web_search] page {done}/{total} {status}: {event.get('url')}"
    if node == "web_search" and kind == "searching":
        return f"[web_search] searching for {event.get('query', '')!r}"
    if node == "grade" and kind == "scoring":
        return f"[grade] scoring {event.get('passages')} passages ({event.get('evaluator')})"
    if node == "refine" and kind == "scoring":
        strips, passages = event.get("strips"), event.get("passages")
        return f"[refine] scoring {strips} strips from {passages} passages"
    if node == "contextualize" and kind == "rewriting":
        return f"[contextualize] rewriting the follow-up from {event.get('turns')} earlier turns"
    if node == "generate" and kind == "generating":
        return (
            f"[generate] answering from {event.get('internal', 0)} internal and "
            f"{event.get('external', 0)} external strips"
        )
    return None


def _markers(citations: Sequence[int], written: str = "") -> str:
    """`` [1] [2]``: the citation markers not already in ``written``."""
    return "".join(f" [{n}]" for n in citations if f"[{n}]" not in written)


def _print_sources(output: dict[str, Any]) -> None:
    """The numbered knowledge under the answer: number, title, and where it is.

    Where: the URL, or the document and where in it (``report.pdf, p. 12``, ``deck.pptx,
    slide 3``) or its chunk (``notes.txt#2``); a passage a served run stored, not the
    operator, says so (``notes.txt#2 (added by a served run)``).
    """
    knowledge = output.get("knowledge") or []
    if not knowledge:
        return
    print_output("Sources:")
    for number, strip in enumerate(knowledge, start=1):
        title, location = source_title(strip), source_location(strip)
        shown = location if title == strip["source"] else f"{title} — {location}"
        print_output(f"  [{number}] {shown}{source_writer(strip)}")


class _AnswerPrinter:
    """Writes the generator's tokens to stdout as they come; keeps stderr lines separate."""

    def __init__(self) -> None:
        self.streamed = False
        self.open_line = False
        self.text = ""

    def token(self, text: str) -> None:
        if not text:
            return
        sys.stdout.write(terminal_text(text, multiline=True))
        sys.stdout.flush()
        self.text += text
        self.streamed = True
        self.open_line = True

    def cite(self, update: Any) -> None:
        """Close the streamed answer with the citation markers of generate's update."""
        if self.open_line and isinstance(update, dict):
            self.token(_markers(update.get("citations") or [], self.text))

    def end_line(self) -> None:
        if self.open_line:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.open_line = False


class TerminatedError(KeyboardInterrupt):
    """SIGTERM arrived (``timeout``, systemd, ``docker stop``): handled as Ctrl-C, exit 143."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise TerminatedError


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`TerminatedError` in the main thread, as Ctrl-C raises its own.

    So a terminated ``crag ingest`` runs the cleanup an interrupted one runs (its pending
    document is removed, never left half-written for ``crag ask`` to answer from). Only where
    SIGTERM still has its default action: a handler set before (the warm server's, which stops
    after the command it runs) or an ignored SIGTERM stays as it is.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _cancel_on_interrupt() -> Iterator[None]:
    """Ctrl-C (and SIGTERM) also cancel the run's model work on worker threads.

    A parallel branch (Ambiguous) runs on a worker thread that ``KeyboardInterrupt`` does not
    reach, and LangGraph waits for it before the interrupt propagates; the run's cancellation
    token makes that thread stop at its next batch or token instead. The signal's own handler
    then runs as before; an ignored signal stays ignored.
    """
    from crag.core.cancellation import cancellation_scope

    with cancellation_scope() as token:
        if threading.current_thread() is not threading.main_thread():
            yield  # signals go to the main thread only
            return
        saved: dict[int, Any] = {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous = signal.getsignal(signum)
            if not callable(previous):
                continue

            def interrupt(number: int, frame: FrameType | None, previous: Any = previous) -> None:
                token.cancel()
                previous(number, frame)

            saved[signum] = previous
            signal.signal(signum, interrupt)
        try:
            yield
        finally:
            for number, handler in saved.items():
                signal.signal(number, handler)


def _report_chunk(printer: _AnswerPrinter, mode: str, chunk: Any) -> None:
    """The progress lines (stderr) for one ``updates`` or ``custom`` chunk."""
    if mode == "updates":
        printer.end_line()
        for node, update in chunk.items():
            if isinstance(update, dict):
                _report_update(node, update)
    elif mode == "custom" and isinstance(chunk, dict):
        line = _progress_line(chunk)
        if line is not None:
            printer.end_line()  # the answer's line stays open for its citations
            print_error(line)


def _stream_run(
    graph: Any, args: argparse.Namespace, config: RunnableConfig | None, printer: _AnswerPrinter
) -> dict[str, Any]:
    """Stream the run through ``printer`` and the progress lines; return the final state."""
    context = _settings(args).context
    final: dict[str, Any] = {}
    modes = (
        ["updates", "values", "custom"]
        if args.json
        else ["updates", "values", "custom", "messages"]
    )
    with _cancel_on_interrupt():
        stream: Any = graph.stream(
            {"question": args.question}, config, context=context, stream_mode=modes
        )
        for mode, chunk in stream:
            if mode == "messages":
                message, metadata = chunk
                if metadata.get("langgraph_node") == "generate":
                    printer.token(message.text)
                continue
            if mode == "values":
                final = chunk
                continue
            if mode == "updates":
                printer.cite(chunk.get("generate"))
            if not args.quiet:
                _report_chunk(printer, mode, chunk)
    printer.end_line()
    return final


def _run_question(graph: Any, args: argparse.Namespace, config: RunnableConfig | None) -> int:
    """Stream one run: tokens to stdout, progress to stderr (or the JSON output at the end)."""
    from crag.app.api import output_of

    printer = _AnswerPrinter()
    output = output_of(_stream_run(graph, args, config, printer))
    if args.json:
        print(_json_text(output))
        return 0
    for note in output.get("notes", []):
        print_error(f"note: {note}")
    if not printer.streamed:
        print_output(
            output.get("answer", "") + _markers(output.get("citations") or []), multiline=True
        )
    _print_sources(dict(output))
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    """Answer a question: tokens on stdout as they come, progress per node on stderr.

    With ``--thread ID`` the run is checkpointed in ``--threads-db`` (SQLite), so the thread
    keeps its conversation across invocations (``crag history ID`` shows it).
    """
    from crag.app.graphs import components

    settings = _settings(args)
    preloading = getattr(components, "preload_chat_model", None)  # not every Components has it
    preload = preloading(settings.run_settings()) if callable(preloading) else None
    code = 1
    try:
        if not args.thread:
            from crag.graph.builder import build_graph

            graph = build_graph(components, method=settings.method, deployment=settings.deployment)
            code = _run_question(graph, args, None)
            return code
        from crag.app.api import persistent_graph, thread_config

        with persistent_graph(
            args.threads_db, method=settings.method, deployment=settings.deployment
        ) as threaded:
            code = _run_question(threaded, args, thread_config(args.thread))
            return code
    finally:
        if preload is not None:
            stopping = getattr(preload, "stop", None)
            if code != 0 and callable(stopping):  # a refused question: no wait for the models
                stopping()
            preload.join()


def cmd_history(args: argparse.Namespace) -> int:
    """Print the questions and answers of a thread, oldest first."""
    from crag.app.api import persistent_graph, thread_turns
    from crag.app.threads import is_postgres

    if not is_postgres(args.threads_db) and not Path(args.threads_db).expanduser().is_file():
        raise ValueError(f"no conversations yet: {args.threads_db} does not exist")
    with persistent_graph(args.threads_db) as threaded:
        turns = thread_turns(threaded, args.thread)
    if args.json:
        print(_json_text(turns))
        return 0
    if not turns:
        print_error(
            f"thread {args.thread!r} has no finished runs in {describe_threads_db(args.threads_db)}"
        )
        return 1
    for number, turn in enumerate(turns, start=1):
        print_output(f"{number}. Q: {turn['question']}")
        print_output(f"   A ({turn['action']}): {turn['answer']}", multiline=True)
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    """Ingest files or directories into the store (with ``--prune``, drop vanished files)."""
    from crag.vectorstore.configured_store import ingest_into_store
    from crag.vectorstore.ingest_options import IngestOptions

    settings = _settings(args).ingest_settings()
    options = IngestOptions(prune=args.prune, tags=args.tags or ())
    report = ingest_into_store(args.paths, settings, options)
    for source, error in report.failed:
        # a loader's message already starts with the file's path: print it once
        print_error(
            f"failed: {error}" if error.startswith(source) else f"failed: {source}: {error}"
        )
    for source in report.removed:
        print_error(f"removed: {source}")
    print_output(report.summary())
    stored = report.added or report.replaced or report.skipped or report.removed
    return 1 if report.failed and not stored else 0


def cmd_remove(args: argparse.Namespace) -> int:
    """Remove documents from the store by source (or file path)."""
    from crag.vectorstore.configured_store import remove_from_store

    report = remove_from_store(args.sources, _settings(args).ingest_settings())
    for source in report.removed:
        print_output(f"removed: {source}")
    for item, _ in report.failed:
        print_error(f"not in the store: {item}")
    print(f"{len(report.removed)} removed, {len(report.failed)} not found")
    return 1 if report.failed else 0


def cmd_graph(args: argparse.Namespace) -> int:
    """Print the graph as a mermaid diagram."""
    from crag.app.graphs import graph

    print(graph.get_graph().draw_mermaid())
    return 0


def cmd_server_token(args: argparse.Namespace) -> int:
    """Print the LangGraph server's token, making it on first use."""
    from crag.app.web.credentials import server_token

    try:
        token = server_token(_settings(args).deployment, renew=args.new)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise ValueError(
            f"cannot read or make the server token{where}: {exc.strerror or exc}"
        ) from None
    print(token)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for ``crag``: one helper per command, in the order ``--help`` lists."""
    parser = argparse.ArgumentParser(
        prog="crag", description="Corrective RAG over your documents (LangGraph)."
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = parser.add_subparsers(dest="command", required=True)
    ask = _add_ask_command(sub)
    _add_history_command(sub)
    ingest = _add_ingest_command(sub, _store_options)
    _add_remove_command(sub)
    graph_cmd = sub.add_parser("graph", help="print the graph as mermaid")
    graph_cmd.set_defaults(func=cmd_graph)
    _add_server_token_command(sub)
    _add_serve_command(sub, _store_options, warm_commands=(ask, ingest))
    _add_team_and_quality_commands(sub)
    return parser


def _store_options(p: argparse.ArgumentParser) -> None:
    """``--store``, ``--collection`` and ``--set``: which store, and any setting."""
    p.add_argument("--store", help="Chroma store directory (default: .crag/chroma)")
    p.add_argument("--collection", help=f"collection name (default: {DEFAULT_COLLECTION})")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="any setting, of any kind: per-run (--set top_k=5), the method's "
        "(--set strips_kept=3) or deployment (--set generator=endpoint); repeatable; "
        "docs/configuration.md lists them",
    )


def _thread_options(p: argparse.ArgumentParser) -> None:
    """``--threads-db``: where the conversation threads are kept."""
    from crag.app.threads import DEFAULT_THREADS_PATH, THREADS_DB_ENV, configured_threads_db

    p.add_argument(
        "--threads-db",
        default=configured_threads_db(),
        metavar="PATH_OR_URL",
        help="SQLite file or PostgreSQL URL (postgresql://...) keeping the threads "
        f"(default: ${THREADS_DB_ENV}, else {DEFAULT_THREADS_PATH})",
    )


def _add_ask_command(sub: Any) -> argparse.ArgumentParser:
    """``crag ask``."""
    ask: argparse.ArgumentParser = sub.add_parser("ask", help="answer a question")
    ask.add_argument("question")
    ask.add_argument("--json", action="store_true", help="print the output state as JSON")
    ask.add_argument("-q", "--quiet", action="store_true", help="no per-node progress")
    ask.add_argument(
        "--thread",
        metavar="ID",
        help="run on this conversation thread, kept across invocations (SQLite)",
    )
    _thread_options(ask)
    _store_options(ask)
    ask.set_defaults(func=cmd_ask)
    return ask


def _add_history_command(sub: Any) -> None:
    """``crag history``."""
    history = sub.add_parser("history", help="print the questions and answers of a thread")
    history.add_argument("thread", metavar="ID")
    history.add_argument("--json", action="store_true", help="print the turns as JSON")
    _thread_options(history)
    history.set_defaults(func=cmd_history)


def _add_remove_command(sub: Any) -> None:
    """``crag remove``."""
    remove = sub.add_parser("remove", help="remove documents from the store by source")
    remove.add_argument(
        "sources",
        nargs="+",
        metavar="SOURCE",
        help="a stored source (file path, FILE.jsonl#lineN, wikipedia:Title, inline:...); "
        "a .jsonl file removes all its lines",
    )
    _store_options(remove)
    remove.set_defaults(func=cmd_remove)


def _add_server_token_command(sub: Any) -> None:
    """``crag server-token``."""
    token_cmd = sub.add_parser(
        "server-token",
        help="print the LangGraph server's token (made on first use)",
        description="Print the token the LangGraph server (make serve) asks every caller for: "
        "CRAG_SERVER_TOKEN when set, else the file server-token beside the store "
        "(.crag/server-token), made on first use with mode 0600. Programs send it as "
        "X-Api-Key (langgraph-sdk's api_key); the chat page's address carries it once.",
    )
    token_cmd.add_argument(
        "--new",
        action="store_true",
        help="replace the token with a new one (restart the server: the old links and "
        "sign-ins stop working)",
    )
    _store_options(token_cmd)
    token_cmd.set_defaults(func=cmd_server_token)


def _add_team_and_quality_commands(sub: Any) -> None:
    """``crag users``, ``thresholds``, ``eval`` and ``feedback``, from their own modules."""
    from crag.app.cli.eval_command import add_eval_command
    from crag.app.cli.feedback_command import add_feedback_command
    from crag.app.cli.thresholds_command import add_thresholds_command
    from crag.app.cli.users_command import add_users_command

    add_users_command(sub)
    add_thresholds_command(sub, _store_options, _settings)
    add_eval_command(sub, _store_options, _settings)
    add_feedback_command(sub)


def _add_ingest_command(
    sub: Any, store_options: Callable[[argparse.ArgumentParser], None]
) -> argparse.ArgumentParser:
    """``crag ingest``."""
    ingest: argparse.ArgumentParser = sub.add_parser(
        "ingest",
        help="add documents (text, Markdown, HTML, JSON Lines, CSV, PDF, Word, PowerPoint, "
        "Excel, EPUB) to the store",
        description="Add .txt .md .html .jsonl .csv .pdf .docx .pptx .xlsx .epub files (and "
        "folders of them) to the store, as "
        "the operator: any path this user can read is ingested (CRAG_INGEST_ROOT confines "
        "only runs of the served ingest graph), and any stored document may be replaced, "
        "including those written by served runs.",
    )
    ingest.add_argument("paths", nargs="+")
    ingest.add_argument(
        "--prune",
        action="store_true",
        help="also remove the stored documents under PATHS whose files no longer exist",
    )
    ingest.add_argument(
        "--tag",
        dest="tags",
        action="append",
        metavar="NAME",
        help="tag every document ingested, for scoped search (--set scope_tags=NAME); "
        "repeatable. A document's tags are those of its latest ingestion: ingesting it again "
        "with other tags (or none) replaces them, without embedding it again",
    )
    store_options(ingest)
    ingest.set_defaults(func=cmd_ingest)
    return ingest


def _add_serve_command(
    sub: Any,
    store_options: Callable[[argparse.ArgumentParser], None],
    warm_commands: Sequence[argparse.ArgumentParser],
) -> None:
    """``crag serve`` and the ``--no-server`` option of the commands it answers."""
    from crag.app.warm.server import DEFAULT_SOCKET, NO_SERVER_OPTION, SOCKET_ENV

    serve = sub.add_parser(
        "serve",
        help="keep the models loaded for crag ask / crag ingest (a local Unix socket)",
        description="Load the store, the evaluator and the generator once and answer `crag "
        f"ask` and `crag ingest` on a Unix socket (${SOCKET_ENV}, default {DEFAULT_SOCKET} "
        "for the working directory; mode 0600 in a private directory) until `crag serve "
        "--stop`. When no server answers, `crag ask` and `crag ingest` start one like this "
        "(--idle-timeout, --no-preload; not with --no-server or CRAG_SERVE_AUTOSTART=0); they "
        "run in-process when it is busy, or its CRAG_* settings differ from theirs. The store "
        "options choose what is loaded first.",
    )
    serve.add_argument("--stop", action="store_true", help="stop the running server")
    serve.add_argument(
        "--idle-timeout",
        type=_idle_seconds,
        metavar="SECONDS",
        help="stop after SECONDS without a command (default: never; a server `crag ask` "
        "starts: CRAG_SERVE_IDLE_TIMEOUT, else 900)",
    )
    serve.add_argument(
        "--no-preload",
        action="store_true",
        help="listen at once and load the store and the models at the first command",
    )
    store_options(serve)
    serve.set_defaults(func=cmd_serve)
    for command in warm_commands:
        command.add_argument(
            NO_SERVER_OPTION,
            action="store_true",
            help="run in this process even when `crag serve` is running",
        )


def _idle_seconds(text: str) -> float:
    """``--idle-timeout``'s value: seconds above 0."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text!r}")
    return seconds


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve ``crag ask`` / ``crag ingest`` with the models loaded, or stop the server."""
    from crag.app.warm.server import WarmServer, socket_path, stop_server

    if args.stop:
        answered = stop_server()
        if answered is None:
            print_error(f"crag serve: no server answers on {socket_path()}")
            return 1
        print_error(f"crag serve: stopped after answering {answered} command(s)")
        return 0
    server = WarmServer(
        socket_path(),
        lambda argv: main(argv, reconfigure_logging=True),
        idle_timeout=args.idle_timeout,
    )
    server.bind()
    if not args.no_preload:
        _warm_up(_settings(args).run_settings())
    collector.resume_if_paused()  # a long-lived process: collect, but never over the models
    print_error(f"crag serve: ready on {server.path} ({_how_it_stops(args.idle_timeout)})")
    server.serve_forever()
    return 0


def _how_it_stops(idle_timeout: float | None) -> str:
    """The ready line's note on how the server stops."""
    if idle_timeout is None:
        return "stop with `crag serve --stop`"
    from crag.app.warm.autostart import duration_text

    return f"stop with `crag serve --stop`; it stops after {duration_text(idle_timeout)} idle"


def _warm_up(settings: RunSettings) -> None:
    """Load what a run needs: the store, the evaluator and the generator.

    The store is filled with the bundled corpus first when it is empty and that is allowed.
    """
    from crag.app.graphs import components

    components.vectorstore(settings)
    components.evaluator(settings)
    components.chat_model(settings)


def run_command(args: argparse.Namespace, prog: str, *, reconfigure_logging: bool = False) -> int:
    """Run a parsed command of ``prog`` (``crag``, ``crag-bench``): its exit code.

    Errors the user can fix are printed as one line (``PROG: error: ...``) with exit code 2.
    """
    setup_logging(args.verbose, force=reconfigure_logging)
    from crag.app.web.accounts import AccountError
    from crag.core.validation import InvalidQuestionError
    from crag.evaluator.base import EvaluatorError
    from crag.generator.endpoint_config import EndpointError
    from crag.vectorstore.store import StoreError

    try:
        with _terminate_as_interrupt():
            code = int(args.func(args))
            sys.stdout.flush()  # an output that cannot be written fails here, not at exit
            return code
    except OSError as exc:
        # a closed pipe (`| head`), a full disk, a file this user may not write
        print_error(f"{prog}: error: {os_error_text(exc)}")
        if not reconfigure_logging:  # this process's own stdout (not a warm client's)
            discard_pending_output()
        return 1
    except (
        InvalidQuestionError,
        AccountError,
        StoreError,
        EvaluatorError,
        EndpointError,
        ThreadsDatabaseError,
        ValueError,
    ) as exc:
        print_error(f"{prog}: error: {exc}")
        return 2
    except KeyboardInterrupt as exc:
        if isinstance(exc, TerminatedError):
            print_error(f"{prog}: terminated")
            return 143
        print_error(f"{prog}: interrupted")
        return 130


def main(argv: Sequence[str] | None = None, *, reconfigure_logging: bool = False) -> int:
    """Run the CLI; errors the user can fix are printed as one line with exit code 2."""
    from crag.app.warm.sockets import WorkingDirectoryError, current_directory

    configure_environment()
    try:
        current_directory()  # a deleted one makes later libraries fail in their own ways
    except WorkingDirectoryError as exc:
        print_error(f"crag: error: {exc}")
        return 2
    args = build_parser().parse_args(argv)
    if args.command not in PAUSED_COLLECTOR_COMMANDS:
        collector.resume_if_paused()
    return run_command(args, "crag", reconfigure_logging=reconfigure_logging)


if __name__ == "__main__":
    sys.exit(main())
