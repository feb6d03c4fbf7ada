"""Feedback on answers: who judged which run of which thread, and the run as it was, for replay.

A record says that its **owner** (the account name of the caller, as threads are owned:
:mod:`crag.app.web.server_auth`; ``operator`` for the server's token, the CLI and Python) found
the answer of one run of a thread ``good`` or ``bad``, with an optional expected answer, an
optional comment and, when the chat page compared the two, which side was better (``crag``,
``rag`` or ``same``). It also keeps the run's record (:mod:`crag.app.feedback_record`: the
question, the answer, the action, the scores, the thresholds, the knowledge and its origins,
the generator), read from the thread's state when the feedback is given, so that the run can be
replayed after the thread is gone.

The records live in the threads database beside the accounts (``CRAG_THREADS_DB``: a SQLite
file, or PostgreSQL shared by every server: :class:`~crag.app.web.account_store.AccountDatabase`),
in the table ``crag_feedback``. One record per owner, thread and run: feedback given again on
the same answer replaces the caller's own. What a caller may write is bounded: text fields of
at most :data:`MAX_TEXT_CHARS` characters, ids of at most :data:`MAX_ID_CHARS`, and at most
:data:`FEEDBACK_PER_HOUR` new records an hour per owner on the server (records made, counted in
``crag_feedback_given``: deleting one frees no place). Every refusal is one
sentence naming the field and the limit (:class:`FeedbackError`, with the HTTP status it is
answered with).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, cast, get_args

from crag.app.web.account_store import AccountDatabase, AccountStoreError, Cursor

__all__ = [
    "FEEDBACK_PER_HOUR",
    "MAX_ID_CHARS",
    "MAX_TEXT_CHARS",
    "Better",
    "Feedback",
    "FeedbackError",
    "FeedbackInput",
    "FeedbackStore",
    "Verdict",
    "checked_input",
    "export_line",
]

Verdict = Literal["good", "bad"]
Better = Literal["crag", "rag", "same"]

MAX_TEXT_CHARS = 2_000
"""The most characters of a record's expected answer and of its comment."""
MAX_ID_CHARS = 200
"""The most characters of a thread's or a run's id as a caller names it."""
FEEDBACK_PER_HOUR = 120
"""The most new records one owner may give in an hour on the server (replacing is free)."""
_FIELDS = ("thread_id", "run_id", "verdict", "expected", "comment", "better")
_SCHEMA_LOCK = 0x63726166
"""PostgreSQL advisory lock held while the table is made: two servers starting at once."""
_QUOTA_LOCK = 0x63726171
"""PostgreSQL advisory lock (with the owner's hash) held while one owner's record is counted."""

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS crag_feedback (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    verdict TEXT NOT NULL CHECK (verdict IN ('good', 'bad')),
    expected TEXT NOT NULL,
    comment TEXT NOT NULL,
    better TEXT CHECK (better IN ('crag', 'rag', 'same')),
    record TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL,
    updated DOUBLE PRECISION NOT NULL,
    UNIQUE (owner, thread_id, run_id)
)""",
    "CREATE INDEX IF NOT EXISTS crag_feedback_by_owner ON crag_feedback (owner, created)",
    # When each owner's records were made, for the hourly quota: a deleted record still
    # counts, so deleting one frees no place. An owner's rows older than an hour are pruned
    # when they make the next one.
    """CREATE TABLE IF NOT EXISTS crag_feedback_given (
    owner TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS crag_feedback_given_by_owner "
    "ON crag_feedback_given (owner, created)",
)
QUOTA_WINDOW_S = 3600.0
"""The quota's window: records made in the last hour count, kept or deleted since."""
_COLUMNS = (
    "id, owner, thread_id, run_id, verdict, expected, comment, better, record, created, updated"
)


class FeedbackError(ValueError):
    """Feedback that cannot be given, found or stored: one sentence, and its HTTP status."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class FeedbackInput:
    """What a caller says of one answer (checked: :func:`checked_input`)."""

    thread_id: str
    verdict: Verdict
    run_id: str = ""
    """The run whose answer is judged; empty: the thread's latest finished run."""
    expected: str = ""
    comment: str = ""
    better: Better | None = None


def _text(payload: Mapping[str, Any], name: str, limit: int) -> str:
    value = payload.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise FeedbackError(f"the feedback's {name} must be a string, not {type(value).__name__}")
    if len(value) > limit:
        raise FeedbackError(
            f"the feedback's {name} is {len(value):,} characters; it may have at most {limit:,}"
        )
    if "\x00" in value or not _encodes(value):
        # PostgreSQL's text refuses a NUL, and no database a lone surrogate (JSON's "\ud800").
        raise FeedbackError(
            f"the feedback's {name} holds a character no database keeps (a NUL or a lone surrogate)"
        )
    return value.strip()


def _encodes(value: str) -> bool:
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _choice(payload: Mapping[str, Any], name: str, allowed: tuple[str, ...], required: bool) -> Any:
    value = payload.get(name)
    if value is None and not required:
        return None
    if value not in allowed:
        shown = repr(value)[:60] if value is not None else "nothing"
        raise FeedbackError(
            f"the feedback's {name} must be {' or '.join(repr(a) for a in allowed)}, not {shown}"
        )
    return value


def checked_input(payload: Any) -> FeedbackInput:
    """``payload`` (a request's JSON) as feedback, or the first thing wrong with it.

    Raises:
        FeedbackError: Not an object, an unknown field, a missing thread or verdict, a value
            of the wrong type, a text over its limit (422).
    """
    if not isinstance(payload, dict):
        raise FeedbackError('the feedback must be a JSON object: {"thread_id", "verdict", ...}')
    unknown = sorted(str(key) for key in payload if key not in _FIELDS)
    if unknown:
        raise FeedbackError(
            f"the feedback has no field {unknown[0][:60]!r}: it takes {', '.join(_FIELDS)}"
        )
    thread_id = _text(payload, "thread_id", MAX_ID_CHARS)
    if not thread_id:
        raise FeedbackError("the feedback names no thread_id: the thread whose answer it judges")
    return FeedbackInput(
        thread_id=thread_id,
        verdict=_choice(payload, "verdict", get_args(Verdict), required=True),
        run_id=_text(payload, "run_id", MAX_ID_CHARS),
        expected=_text(payload, "expected", MAX_TEXT_CHARS),
        comment=_text(payload, "comment", MAX_TEXT_CHARS),
        better=_choice(payload, "better", get_args(Better), required=False),
    )


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Feedback:
    """One stored record."""

    id: str
    owner: str
    thread_id: str
    run_id: str
    verdict: Verdict
    expected: str
    comment: str
    better: Better | None
    created: float
    updated: float
    record: dict[str, Any] = field(default_factory=dict)
    """The run as it was (:func:`crag.app.feedback_record.run_record`)."""

    def as_json(self) -> dict[str, Any]:
        """The record as the HTTP API answers it."""
        return {
            "id": self.id,
            "owner": self.owner,
            "thread_id": self.thread_id,
            "run_id": self.run_id,
            "verdict": self.verdict,
            "expected": self.expected or None,
            "comment": self.comment or None,
            "better": self.better,
            "created_at": _iso(self.created),
            "updated_at": _iso(self.updated),
            "record": self.record,
        }


def _feedback(row: Any) -> Feedback:
    """A row of ``crag_feedback`` (in :data:`_COLUMNS`' order)."""
    record = json.loads(row[8])
    return Feedback(
        id=row[0],
        owner=row[1],
        thread_id=row[2],
        run_id=row[3],
        verdict=cast("Verdict", row[4]),
        expected=row[5],
        comment=row[6],
        better=cast("Better | None", row[7]),
        record=record if isinstance(record, dict) else {},
        created=float(row[9]),
        updated=float(row[10]),
    )


def export_line(feedback: Feedback) -> str:
    """One JSON line of ``crag feedback export``: the question, expected answer, verdict, run."""
    line: dict[str, Any] = {
        "question": feedback.record.get("question", ""),
        "verdict": feedback.verdict,
    }
    if feedback.expected:
        line["expected"] = feedback.expected
    if feedback.better:
        line["better"] = feedback.better
    if feedback.comment:
        line["comment"] = feedback.comment
    line.update(
        id=feedback.id,
        owner=feedback.owner,
        thread_id=feedback.thread_id,
        run_id=feedback.run_id,
        created_at=_iso(feedback.created),
        record=feedback.record,
    )
    return json.dumps(line, ensure_ascii=False)


class FeedbackStore:
    """The feedback records of one threads database (a SQLite file or PostgreSQL)."""

    def __init__(self, database: AccountDatabase) -> None:
        self.database = database
        self._ready = False

    @contextmanager
    def _transaction(self) -> Iterator[Cursor]:
        """One transaction, the table made first; the database's failure as one sentence."""
        try:
            with self.database.transaction() as cursor:
                if not self._ready:
                    if self.database.postgres:
                        cursor.execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))
                    for statement in SCHEMA:
                        cursor.execute(statement)
                    self._ready = True
                yield cursor
        except AccountStoreError as exc:
            raise FeedbackError(str(exc), 503) from None

    def save(
        self,
        owner: str,
        given: FeedbackInput,
        run_id: str,
        record: Mapping[str, Any],
        *,
        per_hour: int | None = FEEDBACK_PER_HOUR,
        now: float | None = None,
    ) -> tuple[Feedback, bool]:
        """Store ``owner``'s feedback on the run ``run_id``: the record, and whether it is new.

        Feedback ``owner`` gave on the same thread and run before is replaced (its id and
        creation time kept). ``per_hour``: the most new records ``owner`` may give in an hour
        (``None``: no limit, the operator's own entry points).

        Raises:
            FeedbackError: ``owner`` gave ``per_hour`` new records in the last hour (429), or
                the database cannot be used (503).
        """
        now = time.time() if now is None else now
        values = (given.verdict, given.expected, given.comment, given.better)
        text = json.dumps(dict(record), ensure_ascii=False)
        with self._transaction() as db:
            if self.database.postgres:  # one owner's records are counted one at a time
                db.execute("SELECT pg_advisory_xact_lock(?, hashtext(?))", (_QUOTA_LOCK, owner))
            existed = self._find(db, owner, given.thread_id, run_id) is not None
            db.execute(
                f"INSERT INTO crag_feedback ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (owner, thread_id, run_id) DO UPDATE SET verdict = excluded.verdict, "
                "expected = excluded.expected, comment = excluded.comment, "
                "better = excluded.better, record = excluded.record, updated = excluded.updated",
                (str(uuid.uuid4()), owner, given.thread_id, run_id, *values, text, now, now),
            )
            if not existed:
                self._count_new(db, owner, per_hour, now)
            saved = self._find(db, owner, given.thread_id, run_id)
        assert saved is not None  # written in this transaction
        return saved, not existed

    @staticmethod
    def _find(db: Cursor, owner: str, thread_id: str, run_id: str) -> Feedback | None:
        row = db.execute(
            f"SELECT {_COLUMNS} FROM crag_feedback WHERE owner = ? AND thread_id = ? "
            "AND run_id = ?",
            (owner, thread_id, run_id),
        ).fetchone()
        return None if row is None else _feedback(row)

    @staticmethod
    def _count_new(db: Cursor, owner: str, per_hour: int | None, now: float) -> None:
        """Note that ``owner`` made a record now; refuse (and so roll back) one past ``per_hour``.

        The times are kept in ``crag_feedback_given``, not read from the records, so that a
        deleted record still counts for its hour. The note is written before the count, so
        that in SQLite the write lock orders two saves of the same owner as PostgreSQL's
        advisory lock does.
        """
        db.execute(  # the owner's own only: under its advisory lock, no other save waits
            "DELETE FROM crag_feedback_given WHERE owner = ? AND created <= ?",
            (owner, now - QUOTA_WINDOW_S),
        )
        db.execute("INSERT INTO crag_feedback_given (owner, created) VALUES (?, ?)", (owner, now))
        if per_hour is None:
            return
        given = db.execute(
            "SELECT COUNT(*) FROM crag_feedback_given WHERE owner = ? AND created > ?",
            (owner, now - QUOTA_WINDOW_S),
        ).fetchone()[0]
        if int(given) > per_hour:
            raise FeedbackError(
                f"one account may give at most {per_hour} new feedback records an hour, and "
                f"{owner} has: wait before giving more (replacing an earlier one is allowed)",
                429,
            )

    def records(
        self, owner: str | None, *, thread_id: str = "", limit: int | None = None
    ) -> list[Feedback]:
        """``owner``'s records (``None``: everyone's), newest first; one thread's if named."""
        where, parameters = [], []
        if owner is not None:
            where.append("owner = ?")
            parameters.append(owner)
        if thread_id:
            where.append("thread_id = ?")
            parameters.append(thread_id)
        sql = f"SELECT {_COLUMNS} FROM crag_feedback"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created DESC, id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._transaction() as db:
            rows = db.execute(sql, parameters).fetchall()
        return [_feedback(row) for row in rows]

    def delete(self, feedback_id: str, owner: str | None) -> None:
        """Remove the record ``feedback_id`` of ``owner`` (``None``: anyone's, the operator).

        Raises:
            FeedbackError: There is no such record of ``owner``'s (404: the same sentence
                whether it is another's or none at all).
        """
        sql, parameters = "DELETE FROM crag_feedback WHERE id = ?", [feedback_id]
        if owner is not None:
            sql += " AND owner = ?"
            parameters.append(owner)
        with self._transaction() as db:
            removed = db.execute(sql, parameters).rowcount
        if not removed:
            raise FeedbackError(
                f"there is no feedback {feedback_id[:MAX_ID_CHARS]!r} of yours", 404
            )

    def all(self) -> Iterator[Feedback]:
        """Every record, oldest first (what ``crag feedback export`` writes).

        Raises:
            FeedbackError: There is no threads database yet, or it cannot be used.
        """
        if not self.database.exists():
            raise FeedbackError(
                f"there is no feedback yet: the threads database {self.database.describe()} "
                "does not exist",
                404,
            )
        with self._transaction() as db:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM crag_feedback ORDER BY created, id"
            ).fetchall()
        for row in rows:
            yield _feedback(row)
