"""Start ``langgraph dev`` on 127.0.0.1 with a generated config, and stop it again.

Used by ``crag-bench server`` (when no server URL is given) and by the server tests. The server
serves the graphs of the repository's ``langgraph.json`` with the environment passed in (not the
repository's ``.env``), runs in its own working directory (its ``.langgraph_api`` folder lands
there), never opens a browser, and is stopped with its whole process group.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
"""The project root (holds ``langgraph.json``)."""

HOST = "127.0.0.1"
TOKEN_ENV = "CRAG_SERVER_TOKEN"
"""The server's token in its environment (:mod:`crag.app.web.credentials`); one per start."""
DEFAULT_JOBS_PER_WORKER = 10
"""Runs a started server executes at once (as ``make serve`` starts it)."""

OFFLINE_ENV: dict[str, str] = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "1",
    "LANGSMITH_TRACING": "false",
    "ANONYMIZED_TELEMETRY": "False",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
}
"""Environment that keeps the server, LangSmith and the model libraries off the network."""


class DevServerError(RuntimeError):
    """``langgraph dev`` could not be started (the message holds the end of its log)."""


@dataclass
class DevServer:
    """A running ``langgraph dev``."""

    url: str
    """Its base URL, ``http://127.0.0.1:PORT``."""
    process: subprocess.Popen[bytes]
    """The CLI process (leader of its own process group)."""
    log: Path
    """Where its stdout and stderr go."""
    token: str = field(default="", repr=False)
    """The server's token (``CRAG_SERVER_TOKEN``), which every call but ``/ok`` must send."""

    @property
    def headers(self) -> dict[str, str]:
        """The headers that sign a program's request in (``X-Api-Key``)."""
        return {"x-api-key": self.token}

    @property
    def page_url(self) -> str:
        """The chat page's address with the token: what ``make serve`` prints."""
        return f"{self.url}/chat/?token={self.token}"

    def log_tail(self, chars: int = 6000) -> str:
        """The end of the server's log."""
        return log_tail(self.log, chars)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the server's process group, then SIGKILL it if it does not exit in time."""
        stop_process_group(self.process, timeout)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def log_tail(log: Path, chars: int = 6000) -> str:
    """The last ``chars`` characters of a log file."""
    try:
        return log.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError as exc:
        return f"(no server output: {exc})"


def stop_process_group(process: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """SIGTERM ``process``'s group (started with ``start_new_session``), SIGKILL if needed."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout)


def served_graphs(config_path: Path = REPO / "langgraph.json") -> dict[str, Any]:
    """The graphs of a ``langgraph.json``, their file paths made absolute.

    A graph named in module syntax (``crag.app.graphs:graph``, no ``/``) is kept as it is: the
    server imports the module from the installed package.
    """
    config = json.loads(config_path.read_text(encoding="utf-8"))
    graphs: dict[str, Any] = {}
    for name, spec in config["graphs"].items():
        path = spec["path"] if isinstance(spec, dict) else str(spec)
        file, _, attr = path.rpartition(":")
        if "/" not in file:
            graphs[name] = spec
            continue
        absolute = f"{(config_path.parent / file).resolve()}:{attr}"
        graphs[name] = {**spec, "path": absolute} if isinstance(spec, dict) else absolute
    return graphs


def _cli() -> Path:
    cli = Path(sys.executable).with_name("langgraph")
    if not cli.is_file():
        raise DevServerError(
            f"the LangGraph CLI is not installed next to {sys.executable}; install the server "
            "extra: pip install -e '.[server]'"
        )
    return cli


OPEN_APP = "crag_bench.open_app:app"
"""The served app without the gate, for measuring what the gate and the auth cost."""


def _dev_config(env: Mapping[str, str], *, access: bool = True) -> dict[str, Any]:
    """The served config: the repository's graphs and its app's middleware (``http``), ``env``.

    The middleware (app/web/http.py: the gate, and the refusal of what a run may not set) and the
    authentication (app/web/server_auth.py) are served as deployed.
    """
    config: dict[str, Any] = {
        "dependencies": [str(REPO)],
        "graphs": served_graphs(),
        "env": dict(env),
    }
    served = json.loads((REPO / "langgraph.json").read_text(encoding="utf-8"))
    for key in ("http", "auth"):
        if served.get(key):
            config[key] = served[key]
    if not access:  # langgraph-api's defaults: no auth, CORS *, no gate
        config.pop("auth", None)
        config["http"] = {"app": OPEN_APP}
    return config


def start_dev_server(
    workdir: Path,
    env: Mapping[str, str],
    *,
    port: int | None = None,
    jobs_per_worker: int = DEFAULT_JOBS_PER_WORKER,
    startup_timeout: float = 90.0,
    access: bool = True,
) -> DevServer:
    """Start ``langgraph dev`` on 127.0.0.1 and wait until it answers ``/ok``.

    Args:
        workdir: Its working directory (config, log and ``.langgraph_api`` go there).
        env: The graphs' environment (``CRAG_STORE_PATH`` ...), written into the config; a
            random ``CRAG_SERVER_TOKEN`` is added unless it names one.
        port: The port (default: a free one).
        jobs_per_worker: Runs executed at once (``--n-jobs-per-worker``; passed always: the
            installed ``langgraph dev`` starts one job without it, whatever its help says).
        startup_timeout: Seconds to wait for ``/ok``.
        access: Serve the repository's gate and authentication (``False``: neither, to
            measure what they cost; never for anything else).

    Returns:
        The running server; stop it with :meth:`DevServer.stop`.

    Raises:
        DevServerError: The CLI is missing, or the server exited or did not answer in time.
    """
    cli = _cli()
    workdir.mkdir(parents=True, exist_ok=True)
    token = env.get(TOKEN_ENV) or secrets.token_urlsafe(32)
    config = _dev_config({**env, TOKEN_ENV: token}, access=access)
    config_file = workdir / "langgraph.json"
    config_file.write_text(json.dumps(config, indent=2), encoding="utf-8")
    port = port or free_port()
    command = [
        str(cli), "dev", "--no-browser", "--no-reload", "--host", HOST,
        "--port", str(port), "--config", str(config_file),
    ]  # fmt: skip
    command += ["--n-jobs-per-worker", str(jobs_per_worker)]
    log = workdir / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env={**os.environ, **OFFLINE_ENV},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = DevServer(url=f"http://{HOST}:{port}", process=process, log=log, token=token)
    try:
        _wait_until_up(server, startup_timeout)
    except BaseException:
        server.stop()
        raise
    logger.info("langgraph dev is up at %s (pid %d)", server.url, process.pid)
    return server


def _wait_until_up(server: DevServer, startup_timeout: float) -> None:
    """Poll ``/ok`` until it answers 200; raise if the server exits or the time runs out."""
    deadline = time.monotonic() + startup_timeout
    while True:
        if server.process.poll() is not None:
            raise DevServerError(
                f"langgraph dev exited with {server.process.returncode} before answering /ok:\n"
                f"{server.log_tail()}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.url}/ok", timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise DevServerError(
                f"langgraph dev did not answer {server.url}/ok within {startup_timeout:.0f} s:\n"
                f"{server.log_tail()}"
            )
        time.sleep(0.25)


@contextlib.contextmanager
def dev_server(
    workdir: Path,
    env: Mapping[str, str],
    *,
    port: int | None = None,
    jobs_per_worker: int = DEFAULT_JOBS_PER_WORKER,
    startup_timeout: float = 90.0,
    access: bool = True,
) -> Iterator[DevServer]:
    """:func:`start_dev_server` as a context manager: the server is stopped on exit."""
    server = start_dev_server(
        workdir,
        env,
        port=port,
        jobs_per_worker=jobs_per_worker,
        startup_timeout=startup_timeout,
        access=access,
    )
    try:
        yield server
    finally:
        server.stop()
