"""The PostgreSQL database that every replica of a deployment shares, where crag's own locks live.

Several server replicas share one PostgreSQL for threads, runs and crag's accounts: the threads
database ``CRAG_THREADS_DB`` (:mod:`crag.app.threads`) set to a ``postgresql://`` URL. crag keeps
the locks that must hold across processes there too (:mod:`crag.vectorstore.advisory_lock`): one
writer at a time per store on a Chroma server, one run at a time per thread. With no such URL (a
SQLite file, or nothing set: ``langgraph dev``, ``crag ask``) :func:`shared_database` is ``None``
and nothing takes those locks. It is read here, with the store, because the store's write lock
below the app needs it too, and so is the variable's name (:data:`THREADS_DB_ENV`), which
:mod:`crag.app.threads` imports from here.
"""

from __future__ import annotations

import os

THREADS_DB_ENV = "CRAG_THREADS_DB"
"""The deployment setting naming the threads database (a SQLite path or a PostgreSQL URL); a
``postgresql://`` URL there is shared. The one definition: :mod:`crag.app.threads` reads it too."""

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
"""The prefixes of a PostgreSQL connection URL (any other value is a SQLite path)."""


def shared_database() -> str | None:
    """The shared PostgreSQL URL (``CRAG_THREADS_DB`` when it is one), else ``None``."""
    value = os.environ.get(THREADS_DB_ENV, "").strip()
    return value if value.lower().startswith(POSTGRES_SCHEMES) else None


def describe_database(url: str) -> str:
    """``url`` for messages: ``PostgreSQL user@host:port/dbname``, never its password."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(url)
    except Exception:  # noqa: BLE001 - a malformed URL is reported when it is used
        return "PostgreSQL (unparsable connection string)"
    user = f"{parts['user']}@" if parts.get("user") else ""
    host = parts.get("host") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"PostgreSQL {user}{host}{port}/{parts.get('dbname') or ''}"
