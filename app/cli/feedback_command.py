"""``crag feedback export``: the operator writes every feedback record out as JSON Lines.

The records live in the threads database (``CRAG_THREADS_DB`` or ``--threads-db``; the default
``.crag/threads.sqlite``, or a ``postgresql://`` one), which the server writes them into
(``POST /crag/feedback``) and Python too (:func:`crag.app.api.record_feedback`). Like
``crag users``, the command reads the database directly: it is the operator's, on the
operator's machine, and sees every account's records.

Each line is one record, oldest first (:func:`crag.app.feedback_store.export_line`): the
question, the expected answer where one was given, the verdict, the better side of a
comparison and the comment where given, who gave it on which thread and run, when, and the
run's record (answer, action, scores, knowledge, thresholds, generator) to replay it with. The
records hold members' questions and answers: a file written with ``--output`` is readable by
its owner alone (0600).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import IO, Any

from crag.app.feedback_store import FeedbackStore, export_line
from crag.app.web.account_store import AccountDatabase

__all__ = ["add_feedback_command", "write_export"]


def write_export(store: FeedbackStore, out: IO[str]) -> int:
    """Write every record of ``store`` to ``out``, one JSON line each, oldest first: the count.

    What ``crag feedback export`` writes, and what the chat page's quality view downloads
    (:mod:`crag.app.web.quality_routes`).
    """
    count = 0
    for feedback in store.all():
        out.write(export_line(feedback) + "\n")
        count += 1
    return count


def _private_file(path: str) -> IO[str]:
    """``path`` opened for writing (emptied), readable and writable by this user alone."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # a file that was there keeps its mode otherwise
    return os.fdopen(descriptor, "w", encoding="utf-8")


def cmd_feedback_export(args: argparse.Namespace) -> int:
    """Write every feedback record as one JSON line, to ``--output`` or standard output."""
    from crag.app.threads import configured_threads_db

    store = FeedbackStore(AccountDatabase(args.threads_db or configured_threads_db()))
    try:
        if args.output in (None, "-"):
            count = write_export(store, sys.stdout)
            where = "standard output"
        else:
            with _private_file(args.output) as out:
                count = write_export(store, out)
            where = args.output
    finally:
        store.database.close()
    print(f"crag feedback: wrote {count} record(s) to {where}", file=sys.stderr)  # noqa: T201
    return 0


def add_feedback_command(sub: Any) -> None:
    """``crag feedback export [--output FILE] [--threads-db DB]``."""
    feedback = sub.add_parser(
        "feedback",
        help="feedback the team gave on answers (docs/server.md)",
        description="The feedback given on answers (POST /crag/feedback on the LangGraph "
        "server, crag.app.api.record_feedback in Python). Kept in the threads database.",
    )
    actions = feedback.add_subparsers(dest="action", required=True)
    export = actions.add_parser(
        "export",
        help="every record as JSON Lines: question, expected answer, verdict, the run",
    )
    export.add_argument(
        "--output", "-o", help="the file to write (made readable by you alone); default: stdout"
    )
    export.add_argument("--threads-db", help="the threads database (default: CRAG_THREADS_DB)")
    export.set_defaults(func=cmd_feedback_export)
