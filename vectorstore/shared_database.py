"""The PostgreSQL database that every replica of a deployment shares, where crag's own locks live.

Several server replicas share one PostgreSQL for threads, runs and crag's accounts: the threads
database ``CRAG_THREADS_DB`` (:mod:`crag.app.threads`) set to a ``postgresql://`` URL. crag keeps
the locks that must hold across processes there too (:mod:`crag.vectorstore.advisory_lock`): one
writer at a time per store on a Chroma server, one run at a time per thread. With no such URL (a
SQLite file, or nothing set: ``langgraph dev``, ``crag ask``) :func:`shared_database` is ``None``
and nothing takes those locks. It is the deployment setting ``threads_db``
(:class:`~crag.settings.deployment.DeploymentSettings`), read here for the store's write lock
below the app and by :mod:`crag.app.threads`.
"""

from __future__ import annotations

from crag.settings.deployment import deployment_settings
from crag.settings.setting_checks import env_name

THREADS_DB_ENV = env_name("threads_db")
"""The variable of the deployment setting naming the threads database (a SQLite path or a
PostgreSQL URL); a ``postgresql://`` URL there is shared."""

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
"""The prefixes of a PostgreSQL connection URL (any other value is a SQLite path)."""


def shared_database() -> str | None:
    """The shared PostgreSQL URL (``CRAG_THREADS_DB`` when it is one), else ``None``."""
    value = deployment_settings().threads_db.get_secret_value().strip()
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
