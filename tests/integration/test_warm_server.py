"""``crag serve``: the warm CLI answers ``crag ask`` / ``crag ingest`` with the same output.

Real models and a real store on disk; the server and the commands run as separate processes,
as a user runs them, talking over a Unix socket in a temporary directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration_support import build_small_store

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "Who painted the Mona Lisa?"
START_TIMEOUT_S = 300


def _crag(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from crag.app.console import main; sys.exit(main())",
            *args,
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
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


@pytest.fixture(scope="module")
def server(workspace: tuple[Path, dict[str, str]]) -> Iterator[subprocess.Popen[str]]:
    cwd, env = workspace
    proc = subprocess.Popen(
        [sys.executable, "-m", "crag.app.cli", "serve", "--store", "store"],
        cwd=cwd,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
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
    workspace: tuple[Path, dict[str, str]], server: subprocess.Popen[str]
) -> None:
    cwd, env = workspace
    ask = ("ask", "--store", "store", QUESTION)
    warm = _crag(*ask, env=env, cwd=cwd)
    cold = _crag(*ask, "--no-server", env=env, cwd=cwd)
    assert warm.returncode == cold.returncode == 0, warm.stderr + cold.stderr
    assert "Leonardo" in warm.stdout
    assert warm.stdout == cold.stdout
    progress = [line for line in warm.stderr.splitlines() if line.startswith("[")]
    assert progress == [line for line in cold.stderr.splitlines() if line.startswith("[")]

    note = cwd / "otters.txt"
    note.write_text("Sea otters hold hands while they sleep so they do not drift apart.\n")
    added = _crag("ingest", "--store", "store", str(note), env=env, cwd=cwd)
    again = _crag("ingest", "--store", "store", str(note), "--no-server", env=env, cwd=cwd)
    assert added.returncode == again.returncode == 0, added.stderr + again.stderr
    assert "1 added" in added.stdout + added.stderr
    assert "1 unchanged" in again.stdout + again.stderr  # the in-process run sees the write

    bad = _crag("ask", "--store", "store", "   ", env=env, cwd=cwd)  # errors come back too
    assert bad.returncode == 2 and "crag: error:" in bad.stderr

    other = {**env, "CRAG_DEFAULT_CORPUS_LIMIT": "3"}  # other deployment settings: in-process
    assert _crag(*ask, env=other, cwd=cwd).stdout == cold.stdout

    stopped = _crag("serve", "--stop", env=env, cwd=cwd)
    assert stopped.returncode == 0
    assert "after answering 3 command(s)" in stopped.stderr  # warm ask, ingest, the bad ask
    assert server.wait(timeout=30) == 0
    assert not Path(env["CRAG_SERVE_SOCKET"]).exists()
    assert _crag("serve", "--stop", env=env, cwd=cwd).returncode == 1
