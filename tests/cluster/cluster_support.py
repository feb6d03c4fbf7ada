"""crag's cluster (deploy/cluster/start.sh) started for real, and what the tests ask of it.

The cluster runs from the Python 3.12 environment ``scripts/install_cluster.sh`` builds
(``.crag/py312``, or ``CRAG_CLUSTER_VENV``); its state folder is a fresh one in ``/tmp`` (the
postgres user must pass through its parents) and its ports a free block. Which replica
executes a run is read from Aegra's own table: a worker claims a run under
``{hostname}-{pid}-worker-{n}``.
"""

from __future__ import annotations

import logging
import os
import random
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import psycopg
import pytest
from langgraph_sdk.client import SyncLangGraphClient

logger = logging.getLogger(__name__)

QUESTION = {"question": "Who painted the Mona Lisa?"}
"""The README's question, answered from the default corpus."""
CONTEXT = {"web_search": False}
LONG = {"question": "Tell me everything about the Louvre and the Mona Lisa."}
"""A question whose answer runs long enough to be cancelled, killed or cut off mid-run."""
LONG_CONTEXT = {"web_search": False, "max_new_tokens": 1024}
ENDED = ("success", "error", "interrupted", "timeout")
"""A run's final statuses."""


def wait_until_ended(api: SyncLangGraphClient, thread_id: str, run_id: str, limit: float) -> str:
    """The run's final status (polled; a refused poll is tried again), within ``limit`` s.

    A poll may meet a replica that was just killed, or a service that is down: it is sent again.
    """
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            status = str(api.runs.get(thread_id, run_id)["status"])
        except httpx.HTTPError:
            status = ""
        if status in ENDED:
            return status
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} still not ended after {limit} s")


def state_once_answered(api: SyncLangGraphClient, thread_id: str, limit: float) -> Any:
    """The thread's values, asked again while a replica refuses (within ``limit`` s).

    Right after a service comes back, a replica may still answer 500 for one request: its
    PostgreSQL pool waits out its 30 s for a connection (seen on 2 busy cores just after
    Redis came back, 2026-11-28). Each refusal is logged.
    """
    deadline = time.monotonic() + limit
    while True:
        try:
            return api.threads.get_state(thread_id)["values"]
        except httpx.HTTPError as error:
            if time.monotonic() >= deadline:
                raise
            logger.info("reading thread %s refused, asking again: %s", thread_id, error)
            time.sleep(1)


ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "deploy" / "cluster"
VENV = Path(os.environ.get("CRAG_CLUSTER_VENV", ROOT / ".crag" / "py312"))
CLUSTER_MARKS = [
    pytest.mark.integration,
    pytest.mark.server,
    pytest.mark.skipif(
        not (VENV / "bin" / "python").exists(),
        reason=f"no Python 3.12 environment for Aegra at {VENV}: scripts/install_cluster.sh "
        "builds it (make test runs it)",
    ),
]
"""The cluster modules' marks: skipped only where the Python 3.12 environment was not built."""
REPLICAS = 2
_PORTS_USED = 10 + REPLICAS + 1
"""start.sh's ports: nginx at the base, PostgreSQL +1, Redis +2, Chroma +3, replica i +10+i."""


@dataclass(frozen=True)
class Cluster:
    """A running cluster: its addresses, its token, its state folder."""

    port: int
    token: str = field(repr=False)
    state: Path

    @property
    def url(self) -> str:
        """nginx, in front of the replicas."""
        return f"http://127.0.0.1:{self.port}"

    def replica_url(self, number: int) -> str:
        """Replica ``number`` (1, 2, ...) itself."""
        return f"http://127.0.0.1:{self.port + 10 + number}"

    def replica_pid(self, number: int) -> int:
        return int((self.state / "run" / f"replica-{number}.pid").read_text())

    def replica_log(self, number: int) -> str:
        """What replica ``number`` has logged so far (``logs/replica-N.log``)."""
        return (self.state / "logs" / f"replica-{number}.log").read_text(errors="replace")

    def restart_replica(self, number: int, timeout: float = 300.0) -> None:
        """Start replica ``number`` again, as start.sh does, and wait until it answers.

        Its environment is the state folder's ``cluster.env`` (start.sh's, resolved), its pid
        file is rewritten, and nginx takes it back by itself (its port is unchanged).
        """
        subprocess.run(
            ["bash", "-c", _RELAUNCH, "relaunch", str(self.state), str(number), str(VENV)],
            env={**os.environ, "REPLICA_PORT": str(self.port + 10 + number)},
            check=True,
            timeout=30,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                answer = httpx.get(
                    f"{self.replica_url(number)}/health",
                    headers={"X-Api-Key": self.token},
                    timeout=5,
                )
                if answer.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise AssertionError(f"replica {number} did not answer {timeout} s after its restart")

    @property
    def chroma_port(self) -> int:
        """The Chroma server holding the store."""
        return self.port + 3

    @property
    def threads_db(self) -> str:
        """The accounts' database (``CRAG_THREADS_DB``), in the cluster's PostgreSQL."""
        return f"{self._postgres}/crag"

    @property
    def _postgres(self) -> str:
        password = (self.state / "secrets" / "postgres").read_text().strip()
        return f"postgresql://crag:{password}@127.0.0.1:{self.port + 1}"

    def run_row(self, run_id: str) -> tuple[str, str]:
        """Aegra's record of a run: its status and the worker that claimed it ('' if none)."""
        with psycopg.connect(f"{self._postgres}/aegra", autocommit=True) as connection:
            row = connection.execute(
                "select status, coalesce(claimed_by, '') from runs where run_id::text = %s",
                (run_id,),
            ).fetchone()
        return (str(row[0]), str(row[1])) if row else ("", "")

    def executor(self, run_id: str, timeout: float = 60.0) -> int:
        """The replica (1, 2, ...) executing ``run_id``, once it runs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, claimed = self.run_row(run_id)
            for number in range(1, REPLICAS + 1):
                if status == "running" and f"-{self.replica_pid(number)}-worker" in claimed:
                    return number
            time.sleep(0.05)
        raise AssertionError(f"run {run_id} was not running on any replica after {timeout} s")


_RELAUNCH = """set -a; . "$1/cluster.env"; set +a
cd "$1/replica-$2" || exit 1
(exec "$3/bin/python" -m uvicorn aegra_api.main:app --host 127.0.0.1 --port "$REPLICA_PORT" \\
    --lifespan on --no-access-log </dev/null >>"$1/logs/replica-$2.log" 2>&1) &
echo $! >"$1/run/replica-$2.pid"
"""
"""start.sh's launch of a replica: state folder $1, number $2, virtualenv $3."""


def _free_block() -> int:
    """A base port whose whole block of start.sh's ports is free on 127.0.0.1."""
    for _ in range(50):
        base = random.randrange(20000, 60000)
        try:
            for port in range(base, base + _PORTS_USED):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free block of ports on 127.0.0.1")


def _run(script: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPTS / script)], env=env, capture_output=True, text=True, timeout=timeout
    )


@contextmanager
def running_cluster() -> Iterator[Cluster]:
    """Start the cluster (stopped, and its state removed, on leaving)."""
    state = Path(tempfile.mkdtemp(prefix="crag-cluster-"))
    state.chmod(0o755)
    cluster = Cluster(_free_block(), secrets.token_urlsafe(32), state)
    env = {
        **os.environ,
        "CRAG_CLUSTER_DIR": str(state),
        "CRAG_CLUSTER_VENV": str(VENV),
        "CLUSTER_PORT": str(cluster.port),
        "REPLICAS": str(REPLICAS),
        "CRAG_SERVER_TOKEN": cluster.token,
    }
    started = time.monotonic()
    try:
        done = _run("start.sh", env, timeout=900)
        logs = "\n".join(f"{p.name}: {p.read_text()[-3000:]}" for p in (state / "logs").glob("*"))
        assert done.returncode == 0, f"start.sh failed: {done.stderr}\n{logs}"
        logger.info("cluster of %d replicas up in %.1f s", REPLICAS, time.monotonic() - started)
        yield cluster
    finally:
        _run("stop.sh", env, timeout=120)
        shutil.rmtree(state, ignore_errors=True)


def stored_chunk_ids(cluster: Cluster, sources: list[str]) -> dict[str, list[str]]:
    """The ids of the chunks the Chroma server holds for each of ``sources`` (crag's collection).

    Read straight from the server (no embedding function: nothing is embedded), every chunk
    whatever crag's searches would hide.
    """
    import chromadb
    from chromadb.api.types import Where
    from chromadb.config import Settings

    server = chromadb.HttpClient(
        host="127.0.0.1",
        port=cluster.chroma_port,
        settings=Settings(anonymized_telemetry=False),
    )
    collection = server.get_collection("crag", embedding_function=None)
    within: dict[Literal["$in", "$nin"], list[str | int | float | bool]] = {"$in": [*sources]}
    where: Where = {"source": within}
    found = collection.get(where=where, include=["metadatas"])
    chunks: dict[str, list[str]] = {source: [] for source in sources}
    for chunk, metadata in zip(found["ids"], found["metadatas"] or [], strict=True):
        chunks[str((metadata or {})["source"])].append(chunk)
    return chunks


Service = Literal["postgres", "redis", "chroma"]
"""The cluster's shared services, each of which :func:`stop_service` and :func:`start_service`
stop and start again on its port and with its data (start.sh's own commands)."""

_SERVICE_SCRIPT = """state="$1" port="$2" venv="$3" pg_bin=/usr/lib/postgresql/15/bin
as_postgres() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
stop_pid() {
    local pid
    pid="$(cat "$1")"
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null
}
case "$4" in
stop-postgres) as_postgres "$pg_bin/pg_ctl" -D "$state/postgres/data" stop -m fast -w ;;
start-postgres) as_postgres "$pg_bin/pg_ctl" -D "$state/postgres/data" -l \\
    "$state/postgres/server.log" -w start -o \\
    "-p $((port + 1)) -h 127.0.0.1 -k $state/postgres -c max_connections=200" ;;
stop-redis) stop_pid "$state/run/redis.pid" ;;
start-redis) printf 'requirepass %s\\n' "$(cat "$state/secrets/redis")" | redis-server - \\
    --bind 127.0.0.1 --port "$((port + 2))" --save "" --appendonly no --daemonize yes \\
    --pidfile "$state/run/redis.pid" --logfile "$state/logs/redis.log" ;;
stop-chroma) stop_pid "$state/run/chroma.pid" ;;
start-chroma)
    (cd "$state/chroma" && exec "$venv/bin/chroma" run --path "$state/chroma" --host 127.0.0.1 \\
        --port "$((port + 3))" </dev/null >>"$state/logs/chroma.log" 2>&1) &
    echo $! >"$state/run/chroma.pid" ;;
esac
"""
"""start.sh's and stop.sh's commands for one service: state folder $1, base port $2,
virtualenv $3, what to do $4 (``stop-postgres``, ``start-redis``, ...)."""


def _service(cluster: Cluster, action: str) -> None:
    subprocess.run(
        [
            "bash",
            "-c",
            _SERVICE_SCRIPT,
            "service",
            str(cluster.state),
            str(cluster.port),
            str(VENV),
            action,
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )


def stop_service(cluster: Cluster, service: Service) -> None:
    """Stop ``service`` as stop.sh does (SIGTERM, or ``pg_ctl stop -m fast``) and wait for it."""
    _service(cluster, f"stop-{service}")
    logger.info("%s stopped", service)


def start_service(cluster: Cluster, service: Service, timeout: float = 60.0) -> None:
    """Start ``service`` again as start.sh does, on its port and data, and wait until it answers."""
    _service(cluster, f"start-{service}")
    port = cluster.port + {"postgres": 1, "redis": 2, "chroma": 3}[service]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if service == "chroma":
                httpx.get(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=2).raise_for_status()
            else:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
            logger.info("%s started again", service)
            return
        except (OSError, httpx.HTTPError):
            time.sleep(0.5)
    raise AssertionError(f"{service} did not answer {timeout} s after its start")
