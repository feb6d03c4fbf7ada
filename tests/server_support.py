"""Servers the tests start on 127.0.0.1: ``langgraph dev`` and ``chroma run``.

Both run in their own process group and are stopped by PID (SIGTERM, then SIGKILL) at the end
of the fixture that started them; nothing listens on anything but 127.0.0.1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from crag_bench.dev_server import (
    HOST,
    DevServer,
    DevServerError,
    free_port,
    log_tail,
    start_dev_server,
    stop_process_group,
)
from crag_bench.mona_lisa_store import OTHER_DOCUMENTS, ingest_mona_lisa_store
from tests.store_copies import store_copy

CHROMA_STARTUP_TIMEOUT = 60.0
SERVER_JOBS = 10
"""Runs the test server executes at once, as ``make serve`` starts it: plain ``langgraph dev``
runs one at a time (langgraph-api's dev server defaults ``--n-jobs-per-worker`` to 1)."""


def build_server_store(path: Path) -> Path:
    """A Chroma store with the Mona Lisa summary and 40 unrelated ones, real embeddings.

    Built once per process and copied (:mod:`tests.store_copies`): every server gets a store of
    its own to write into.
    """
    return store_copy(path, "server", _ingest_server_store)


def _ingest_server_store(path: Path) -> None:
    """Ingest the Mona Lisa summary and 40 unrelated ones into a new store at ``path``."""
    report, found = ingest_mona_lisa_store(path)
    assert found == 1, "the bundled corpus has no Mona Lisa summary"
    assert report.ok, report.failed
    assert len(report.added) == OTHER_DOCUMENTS + 1


def served_environment(store_path: Path, search_url: str, ingest_root: Path) -> dict[str, str]:
    """The operator's settings of a test server: its store, the shipped generator, a SearxNG
    stand-in at ``search_url`` (on 127.0.0.1, which the operator must allow) and an ingest root.

    A mapping rather than the repository's .env file: these are the only settings.
    """
    return {
        "CRAG_STORE_PATH": str(store_path),
        "CRAG_COLLECTION": "crag",
        "CRAG_GENERATOR": "smollm2",
        "CRAG_SEARCH_PROVIDER": "searxng",
        "CRAG_SEARCH_URL": search_url,
        "CRAG_ALLOWED_HOSTS": "127.0.0.1",
        "CRAG_INGEST_ROOT": str(ingest_root),
    }


@contextmanager
def langgraph_server(workdir: Path, env: Mapping[str, str]) -> Iterator[DevServer]:
    """``langgraph dev`` serving the repository's graphs, :data:`SERVER_JOBS` runs at once.

    A failed start fails the test.
    """
    try:
        server = start_dev_server(workdir, env, jobs_per_worker=SERVER_JOBS)
    except DevServerError as exc:
        pytest.fail(str(exc))
    try:
        yield server
    finally:
        server.stop()


MEMBER_PASSWORD = "correct horse battery"
"""The password of the members :func:`member_keys` makes."""


def member_keys(threads_db: Path, names: tuple[str, ...] = ("alice", "bob")) -> dict[str, str]:
    """Members' API keys, made as the operator makes them (``crag users add``)."""
    from crag.app.web.accounts import Accounts

    made = Accounts(threads_db)
    return {name: made.add(name, MEMBER_PASSWORD) for name in names}


@contextmanager
def team_server(
    workdir: Path, store_dir: Path, extra: Mapping[str, str] | None = None
) -> Iterator[DevServer]:
    """A team's server: the small store in ``store_dir``, its threads database (and accounts)
    there too, and a SearxNG stand-in that answers 500 (no web knowledge); ``extra`` settings.
    """
    from tests.websearch_server import WebsearchServer

    store = build_server_store(store_dir / "chroma")
    with WebsearchServer() as search:
        search.search_status = 500
        env = {
            "CRAG_STORE_PATH": str(store),
            "CRAG_COLLECTION": "crag",
            "CRAG_DEFAULT_CORPUS": "false",
            "CRAG_SEARCH_PROVIDER": "searxng",
            "CRAG_SEARCH_URL": search.url,
            "CRAG_ALLOWED_HOSTS": "127.0.0.1",
            "CRAG_THREADS_DB": str(store_dir / "threads.sqlite"),
            **(extra or {}),
        }
        with langgraph_server(workdir, env) as started:
            yield started


@dataclass
class ChromaServer:
    """A running ``chroma run``."""

    host: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def settings(self) -> dict[str, Any]:
        """The crag settings that point at this server."""
        return {"chroma_host": self.host, "chroma_port": self.port}


def wait_until_up(
    process: subprocess.Popen[bytes], url: str, log: Path, what: str, timeout: float
) -> None:
    """Wait until ``url`` answers 200; fail the test if ``process`` exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            pytest.fail(f"{what} exited with {process.returncode}:\n{log_tail(log)}")
        with suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not answer within the deadline:\n{log_tail(log)}")
        time.sleep(0.2)


@contextmanager
def chroma_server(path: Path) -> Iterator[ChromaServer]:
    """``chroma run`` on a free port of 127.0.0.1 over ``path``; stopped by PID at the end."""
    cli = Path(sys.executable).with_name("chroma")
    if not cli.is_file():
        pytest.fail(f"the chroma CLI is not installed next to {sys.executable}")
    path.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = path.parent / f"chroma-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(cli), "run", "--host", HOST, "--port", str(port), "--path", str(path)],
            cwd=path.parent,
            env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = ChromaServer(HOST, port, process, log)
    try:
        wait_until_up(
            process, f"{server.url}/api/v2/heartbeat", log, "chroma run", CHROMA_STARTUP_TIMEOUT
        )
        yield server
    finally:
        stop_process_group(process)
