"""``crag serve``: the warm CLI answers ``crag ask`` / ``crag ingest`` with the same output.

Real models and a real store on disk; the server and the commands run as separate processes,
as a user runs them, talking over a Unix socket in a temporary directory. The server ignores
SIGINT, as one started with ``nohup crag serve &`` does: a client's Ctrl-C must still cancel
its run. The tests share one server and run in order; the last one stops it and checks how many
commands it answered.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration_support import build_small_store
from tests.warm_support import CLIENT, ROOT, crag, raw_request, wait_for_output, write_big_file

pytestmark = pytest.mark.integration

QUESTION = "Who painted the Mona Lisa?"
START_TIMEOUT_S = 300
EMBED_BATCH = 512
"""Chunks the ingest embeds and writes at a time (``EMBED_BATCH_SIZE``)."""

Workspace = tuple[Path, dict[str, str]]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    """A directory with a small store, and the environment pointing at a short socket path."""
    cwd = tmp_path_factory.mktemp("warm")
    build_small_store(cwd / "store", others=10)
    socket_dir = Path(tempfile.mkdtemp(prefix="crag-sock-"))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "CRAG_SERVE_SOCKET": str(socket_dir / "serve.sock"),
    }
    env.pop("CRAG_STORE_PATH", None)
    yield cwd, env
    shutil.rmtree(socket_dir, ignore_errors=True)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `nohup crag serve &` leaves it


@pytest.fixture(scope="module")
def server(workspace: Workspace) -> Iterator[subprocess.Popen[str]]:
    cwd, env = workspace
    proc = subprocess.Popen(
        [sys.executable, "-m", "crag.app.cli.commands", "serve", "--store", "store"],
        cwd=cwd,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ignore_sigint,
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    assert proc.stderr is not None
    for line in proc.stderr:
        if "crag serve: ready on" in line:
            break
        assert time.monotonic() < deadline, "crag serve did not start"
    else:
        pytest.fail(f"crag serve exited: {proc.wait()}")
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_ask_and_ingest_answer_the_same_through_the_server(
    workspace: Workspace, server: subprocess.Popen[str]
) -> None:
    cwd, env = workspace
    ask = ("ask", "--store", "store", QUESTION)
    warm = crag(*ask, env=env, cwd=cwd)
    cold = crag(*ask, "--no-server", env=env, cwd=cwd)
    assert warm.returncode == cold.returncode == 0, warm.stderr + cold.stderr
    assert "Leonardo" in warm.stdout
    assert warm.stdout == cold.stdout
    progress = [line for line in warm.stderr.splitlines() if line.startswith("[")]
    assert progress == [line for line in cold.stderr.splitlines() if line.startswith("[")]

    note = cwd / "otters.txt"
    note.write_text("Sea otters hold hands while they sleep so they do not drift apart.\n")
    added = crag("ingest", "--store", "store", str(note), env=env, cwd=cwd)
    again = crag("ingest", "--store", "store", str(note), "--no-server", env=env, cwd=cwd)
    assert added.returncode == again.returncode == 0, added.stderr + again.stderr
    assert "1 added" in added.stdout + added.stderr
    assert "1 unchanged" in again.stdout + again.stderr  # the in-process run sees the write

    bad = crag("ask", "--store", "store", "   ", env=env, cwd=cwd)  # errors come back too
    assert bad.returncode == 2 and "crag: error:" in bad.stderr

    other = {**env, "CRAG_DEFAULT_CORPUS_LIMIT": "3"}  # other deployment settings: in-process
    assert crag(*ask, env=other, cwd=cwd).stdout == cold.stdout


def test_each_directory_gets_its_own_store(
    workspace: Workspace, server: subprocess.Popen[str], tmp_path: Path
) -> None:
    """``--store store`` in another directory is that directory's store, warm or not."""
    cwd, env = workspace
    other = tmp_path / "b"
    other.mkdir()
    (other / "zorbo.txt").write_text(
        "The Mona Lisa was painted by Zorbo Quintavalle, a glassblower from Murano, in 1802.\n"
    )
    added = crag("ingest", "--store", "store", "zorbo.txt", env=env, cwd=other)
    assert added.returncode == 0 and "1 added" in added.stdout, added.stderr
    assert (other / "store").is_dir()

    ask = ("ask", "--json", "--store", "store", QUESTION)
    warm_here = crag(*ask, env=env, cwd=cwd)
    warm_there = crag(*ask, env=env, cwd=other)
    cold_there = crag(*ask, "--no-server", env=env, cwd=other)
    assert warm_there.returncode == cold_there.returncode == 0, warm_there.stderr
    assert warm_there.stdout == cold_there.stdout
    there = {d["source"] for d in json.loads(warm_there.stdout)["documents"]}
    here = {d["source"] for d in json.loads(warm_here.stdout)["documents"]}
    assert there == {str((other / "zorbo.txt").resolve())}, there  # that directory's store
    assert "wikipedia:Mona Lisa" in here


def test_an_idle_connection_blocks_no_one(
    workspace: Workspace, server: subprocess.Popen[str]
) -> None:
    cwd, env = workspace
    idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    idle.connect(env["CRAG_SERVE_SOCKET"])  # connects and says nothing
    try:
        answered = raw_request(env, cwd, ["ask", "-q", "--store", "store", QUESTION])
    finally:
        idle.close()
    assert answered[0] == {"accepted": True}
    assert answered[-1] == {"exit": 0}
    assert "Leonardo" in "".join(m.get("out", "") for m in answered)


def test_an_oversized_request_is_refused_at_once(
    workspace: Workspace, server: subprocess.Popen[str]
) -> None:
    cwd, env = workspace
    flood = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    flood.settimeout(10)
    flood.connect(env["CRAG_SERVE_SOCKET"])
    started = time.monotonic()
    with contextlib.suppress(OSError):  # the server stops reading and closes: the point
        flood.sendall(b"x" * 2_000_000)  # no newline
    try:
        reply = flood.recv(65536)
    except ConnectionResetError:
        reply = b""
    flood.close()
    assert time.monotonic() - started < 10
    assert reply == b"" or b"longer than" in reply
    answered = raw_request(env, cwd, ["ask", "-q", "--store", "store", QUESTION])
    assert answered[0] == {"accepted": True} and answered[-1] == {"exit": 0}


def test_stop_reports_what_it_answered(workspace: Workspace, server: subprocess.Popen[str]) -> None:
    cwd, env = workspace
    stopped = crag("serve", "--stop", env=env, cwd=cwd)
    assert stopped.returncode == 0
    # ask, ingest, bad ask; ingest, ask, ask (two directories); idle; oversized
    assert "after answering 8 command(s)" in stopped.stderr
    assert server.wait(timeout=30) == 0
    assert not Path(env["CRAG_SERVE_SOCKET"]).exists()
    assert crag("serve", "--stop", env=env, cwd=cwd).returncode == 1


HASH_SERVER = """
import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `nohup crag serve &` leaves it
import crag.app.cli.commands as cli
import crag.vectorstore.embeddings as embeddings
from tests.hash_embeddings import HashEmbeddings
slow = HashEmbeddings(delay=float(sys.argv[1]))
embeddings.shared_embeddings = lambda name="": slow  # no model: each batch takes `delay` s
embeddings.load_embeddings = lambda name="": slow
cli._warm_up = lambda context: None  # nothing to load before it listens
sys.exit(cli.main(["serve"]))
"""
BATCH_DELAY_S = 1.5


@pytest.fixture
def hash_server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path, dict[str, str]]]:
    """``crag serve``, ignoring SIGINT, whose embedder takes 1.5 s a batch (hashes, no model)."""
    socket_dir = Path(tempfile.mkdtemp(prefix="crag-sock-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")}
    env.update(PYTHONPATH=str(ROOT), CRAG_SERVE_SOCKET=str(socket_dir / "serve.sock"))
    env["CRAG_SERVE_AUTOSTART"] = "0"  # a client that finds no server starts none
    proc = subprocess.Popen(
        [sys.executable, "-c", HASH_SERVER, str(BATCH_DELAY_S)],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert "crag serve: ready on" in line, line + proc.stderr.read()
    yield proc, tmp_path, env
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    shutil.rmtree(socket_dir, ignore_errors=True)


def _stored_sources(store: Path) -> list[str]:
    from crag.vectorstore.store import open_store
    from tests.hash_embeddings import HashEmbeddings

    opened = open_store(store, "crag", HashEmbeddings(), create=False)
    metadatas = opened._collection.get(include=["metadatas"])["metadatas"] or []
    return [str(m.get("source")) for m in metadatas]


def _ingest_client(big: Path, cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A warm ``crag ingest`` of ``big``, once its first batch is written (to be undone)."""
    client = subprocess.Popen(
        [*CLIENT, "ingest", "--store", "st", str(big)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_for_output(client.stderr, f"{EMBED_BATCH}/", timeout=120)
    return client


def test_ctrl_c_on_the_client_cancels_its_ingest(
    hash_server: tuple[subprocess.Popen[str], Path, dict[str, str]],
) -> None:
    """The server ignores SIGINT; the client's Ctrl-C cancels the run through its token."""
    server, cwd, env = hash_server
    big = write_big_file(cwd / "big.txt", chunks=6 * EMBED_BATCH)  # 9 s of embedding
    client = _ingest_client(big, cwd, env)
    try:
        client.send_signal(signal.SIGINT)
        _, err = client.communicate(timeout=30)
    finally:
        if client.poll() is None:
            client.kill()
    assert client.returncode == 130 and b"crag: interrupted" in err

    small = cwd / "small.txt"
    small.write_text("Sea otters hold hands while they sleep.\n")
    started = time.monotonic()
    while True:  # refused as busy while the run winds down (one batch at most), then answered
        answered = raw_request(env, cwd, ["ingest", "--store", "st", str(small)])
        if answered[0] == {"accepted": True}:
            break
        assert "busy" in answered[0].get("refused", ""), answered
        time.sleep(0.2)
    assert time.monotonic() - started < 3 * BATCH_DELAY_S + 2, "the cancelled ingest went on"
    assert answered[-1] == {"exit": 0}
    sources = _stored_sources(cwd / "st")
    assert sources == [str(small.resolve())]  # nothing of the cancelled document
    assert server.poll() is None


def test_sigterm_stops_the_server_and_its_running_ingest(
    hash_server: tuple[subprocess.Popen[str], Path, dict[str, str]],
) -> None:
    server, cwd, env = hash_server
    big = write_big_file(cwd / "big.txt", chunks=6 * EMBED_BATCH)
    client = _ingest_client(big, cwd, env)
    try:
        server.send_signal(signal.SIGTERM)
        _, err = client.communicate(timeout=30)
        assert server.wait(timeout=30) == 143
    finally:
        if client.poll() is None:
            client.kill()
    assert client.returncode == 143 and b"crag: terminated" in err, err[-2000:]
    assert server.stderr is not None and "crag: terminated" in server.stderr.read()
    assert not Path(env["CRAG_SERVE_SOCKET"]).exists()
    assert not [s for s in _stored_sources(cwd / "st") if s.endswith("big.txt")]
