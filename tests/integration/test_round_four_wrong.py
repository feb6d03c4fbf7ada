"""Issue 59, item 8: what round four found wrong, each run the way a user runs it.

Each test runs the real command as its own process on files it writes. The model server of the
first test is tests/model_server.py's **fake** (on 127.0.0.1): no real server echoes the
``Authorization`` header it got on demand.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.model_server import FakeModelServer, Reply
from tests.warm_support import ROOT

pytestmark = pytest.mark.integration

ASK_ON_ENDPOINT = """
import sys
from langchain_core.documents import Document
from crag.generator.factory import load_chat_model
from tests.fakes import MONA_LISA, FakeComponents, FixedScoreEvaluator, StaticStore, app_components
store = StaticStore([Document(page_content=MONA_LISA, metadata={"source": "d", "chunk": 0})])
components = FakeComponents(store, FixedScoreEvaluator({"Mona": 0.9}), load_chat_model("endpoint"))
from crag.app.cli.console import main
with app_components(components):
    sys.exit(main())
"""

CLI = "import sys; from crag.app.cli.console import main; sys.exit(main())"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", CRAG_SERVE_AUTOSTART="0", **extra)
    return env


def _crag(
    args: list[str], cwd: Path, *, script: str = CLI, timeout: float = 300, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# -- a password in the model server's URL ------------------------------------------------------


@pytest.mark.parametrize("status", [400, 500])
def test_a_password_in_the_base_url_is_never_printed(tmp_path: Path, status: int) -> None:
    user, password = "alice", "correct-horse-battery"
    echoed = Reply(
        status=status,
        body='{"error": {"message": "unexpected header Authorization: {echo}"}}',
        echo_header="authorization",
    )
    models = Reply(status=404, body='{"error": "no model list for {echo}"}', echo_header="x")
    with FakeModelServer(default=echoed, models_reply=models) as server:
        url = server.base_url.replace("://", f"://{user}:{password}@")
        done = _crag(
            ["-vv", "ask", "--no-server", "Who painted the Mona Lisa?"],
            tmp_path,
            script=ASK_ON_ENDPOINT,
            CRAG_GENERATOR="endpoint",
            CRAG_LLM_BASE_URL=url,
            CRAG_LLM_MODEL="fake",
            CRAG_LLM_MAX_RETRIES="0",
            CRAG_LLM_TIMEOUT="20",
        )
        sent = [h.get("authorization", "") for h in server.headers]
    basic = base64.b64encode(f"{user}:{password}".encode()).decode()
    assert f"Basic {basic}" in sent  # the server did get (and echo) the password in base64
    printed = done.stdout + done.stderr
    assert done.returncode != 0
    assert "model server" in printed  # the failure is reported
    for secret in (password, basic, basic[:16], f"{user}:"):
        assert secret not in printed, printed[-3000:]


# -- --set chunk_size, an empty store path, a damaged chroma.sqlite3 ----------------------------


@pytest.mark.parametrize("pair", ["chunk_size=200", "chunk_overlap=10"])
def test_set_chunking_says_which_run_takes_it(tmp_path: Path, pair: str) -> None:
    (tmp_path / "a.txt").write_text("Some text.\n", encoding="utf-8")
    done = _crag(["ingest", "--store", str(tmp_path / "s"), "--set", pair, "a.txt"], tmp_path)
    key = pair.partition("=")[0]
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"setting {key} is chosen per run of the served ingest graph" in done.stderr
    assert "unknown setting" not in done.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "given",
    [["ingest", "--set", "store_path=", "a.txt"], ["ingest", "--store", "", "a.txt"]],
    ids=["set", "store"],
)
def test_an_empty_store_path_is_refused(tmp_path: Path, given: list[str]) -> None:
    """Before, ``--store ''`` was ignored: the default corpus filled the current directory."""
    (tmp_path / "a.txt").write_text("Some text.\n", encoding="utf-8")
    done = _crag(given, tmp_path)
    assert done.returncode != 0, done.stderr[-2000:]
    assert "store path is empty" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]  # nothing written here


def test_a_damaged_sqlite_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Some text about Leonardo.\n", encoding="utf-8")
    store = tmp_path / "store"
    first = _crag(["ingest", "--store", str(store), "a.txt"], tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    sqlite = store / "chroma.sqlite3"
    data = bytearray(sqlite.read_bytes())
    data[:4096] = os.urandom(4096)
    sqlite.write_bytes(bytes(data))
    (tmp_path / "b.txt").write_text("More text about Leonardo.\n", encoding="utf-8")
    done = _crag(["ingest", "--store", str(store), "b.txt"], tmp_path)
    assert done.returncode != 0, done.stderr[-2000:]
    assert "is damaged (it is not a SQLite database)" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert sqlite.read_bytes() == bytes(data)  # nothing written to it
