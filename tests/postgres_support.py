"""A real PostgreSQL for tests: ``pgserver`` (PostgreSQL in a wheel) started in a temporary
directory, reached on its Unix socket only (no TCP port is opened), stopped when done."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class PostgresServer:
    """A PostgreSQL cluster in ``data_dir`` that a test can stop and start again."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._server: Any = None

    def start(self) -> str:
        """Start (or restart) the server; return its connection string."""
        from pgserver.postgres_server import get_server

        self._server = get_server(str(self.data_dir), cleanup_mode="stop")
        return str(self._server.get_uri())

    def stop(self) -> None:
        """Stop the server (the data stays)."""
        if self._server is not None:
            self._server.cleanup()
            self._server = None


@contextmanager
def postgres_server() -> Iterator[tuple[PostgresServer, str]]:
    """A started server and its URI; the cluster is removed afterwards.

    The directory is made under the system's temporary folder, not pytest's, because a Unix
    socket's path must stay under about 100 characters.
    """
    data_dir = Path(tempfile.mkdtemp(prefix="crag-pg-"))
    server = PostgresServer(data_dir / "pg")
    try:
        yield server, server.start()
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
