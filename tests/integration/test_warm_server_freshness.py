"""``crag serve`` answers from the store as it is on disk, whoever wrote to it last.

Issue 59, item 4: the warm server kept the store it had opened, and its Chroma client the
vector index it had loaded, so a file ingested by another process (``crag ingest --no-server``,
or an ingest run in-process because the server was busy) was never found through it, and after
a large one every warm answer said the index was damaged and could not be rebuilt.

Real ``crag serve``, ``crag ingest`` and ``crag ask`` processes on a store in a temporary
directory. The server and the ingesting clients embed by hashing words
(:class:`tests.hash_embeddings.HashEmbeddings`), so both sides write vectors of the same kind in
seconds; the server's evaluator, generator and web search are fakes (:mod:`tests.fakes`), so an
``ask`` runs the real retrieval on the real store without loading a model.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.warm_support import ROOT, raw_request, wait_for_output, write_big_file

pytestmark = pytest.mark.integration

HASHED = """
import sys, time
from pathlib import Path
import crag.vectorstore.embeddings as embeddings
from tests.hash_embeddings import HashEmbeddings
hold = Path(sys.argv[1]) if sys.argv[1] else None

class Held(HashEmbeddings):
    def embed_documents(self, texts):
        if hold is not None and hold.exists():
            hold.with_name("started").write_text("embedding")
            deadline = time.monotonic() + 120
            while hold.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return super().embed_documents(texts)

embedder = Held()
embeddings.shared_embeddings = lambda name="": embedder  # no model: what runs embed with
embeddings.load_embeddings = lambda name="": embedder
"""
"""Both sides embed by hashing words; a batch waits while the file ``argv[1]`` exists."""

SERVER = (
    HASHED
    + """
import crag.app.cli.commands as cli
from crag.app.graphs import components
from tests.fakes import FixedScoreEvaluator, StaticSearch, scripted_chat
components.evaluator = lambda settings: FixedScoreEvaluator({}, default=1.0)
components.chat_model = lambda settings: scripted_chat(answer="An answer.")
components.search = lambda settings: StaticSearch(error="search is off in this test")
cli._warm_up = lambda context: None  # nothing to load before it listens
sys.exit(cli.main(["serve"]))
"""
)
"""A real ``crag serve`` whose models are fakes; its store is real."""

CLIENT = (
    HASHED
    + """
from crag.app.cli.console import main
sys.argv = ["crag", *sys.argv[2:]]
sys.exit(main())
"""
)
"""``crag`` through its real entry point (the warm client first), embedding by hashing."""

OTTERS = "Sea otters hold hands while they sleep so that they do not drift apart."
QUESTION = "Why do sea otters hold hands while they sleep?"


@contextmanager
def fake_model_server(cwd: Path, hold: Path | None = None) -> Iterator[dict[str, str]]:
    """A real ``crag serve`` in ``cwd`` (see :data:`SERVER`); yields the clients' environment."""
    socket_dir = Path(tempfile.mkdtemp(prefix="crag-sock-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")}
    env.update(PYTHONPATH=str(ROOT), CRAG_SERVE_SOCKET=str(socket_dir / "serve.sock"))
    env["CRAG_SERVE_AUTOSTART"] = "0"  # a client that finds no server starts none
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(hold or "")], cwd=cwd, env=env, stderr=subprocess.PIPE
    )
    try:
        wait_for_output(server.stderr, "crag serve: ready on", timeout=120)
        yield env
        assert server.poll() is None, "crag serve exited"
    finally:
        server.kill()
        server.wait()
        if server.stderr is not None:
            server.stderr.close()
        shutil.rmtree(socket_dir, ignore_errors=True)


def hashed_crag(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``crag ARGS`` (see :data:`CLIENT`) to the end."""
    return subprocess.run(
        [sys.executable, "-c", CLIENT, "", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def answered_once_free(env: dict[str, str], cwd: Path, argv: list[str]) -> list[dict[str, Any]]:
    """Send ``argv`` until the server accepts it (busy a moment after its last answer)."""
    deadline = time.monotonic() + 60
    while True:
        answered = raw_request(env, cwd, argv)
        if answered[0] == {"accepted": True}:
            return answered
        assert "busy" in answered[0].get("refused", ""), answered
        assert time.monotonic() < deadline, "the server stayed busy"
        time.sleep(0.1)


def warm_ask(env: dict[str, str], cwd: Path) -> str:
    """Ask :data:`QUESTION` on the server; all it printed."""
    answered = answered_once_free(env, cwd, ["ask", "--json", "-q", "--store", "st", QUESTION])
    assert answered[-1] == {"exit": 0}, answered
    return "".join(m.get("out", "") + m.get("err", "") for m in answered)


def retrieved_texts(printed: str) -> list[str]:
    """The texts of the passages the answer was built from (``ask --json``)."""
    turn = json.loads(printed[printed.index("{") :])
    passages: list[dict[str, Any]] = turn.get("documents") or turn.get("passages") or []
    return [str(passage.get("text", "")) for passage in passages]


def _fill_the_store(tmp_path: Path, env: dict[str, str]) -> None:
    """Ingest 60 chunks of airships through the server, and ask once (the store is opened)."""
    airships = write_big_file(tmp_path / "airships.txt", chunks=60)
    first = answered_once_free(env, tmp_path, ["ingest", "--store", "st", str(airships)])
    assert first[-1] == {"exit": 0}, first
    assert OTTERS not in warm_ask(env, tmp_path)


@pytest.mark.parametrize("extra_chunks", [0, 1500], ids=["one-chunk", "large"])
def test_a_no_server_ingest_is_found_by_the_next_warm_ask(
    tmp_path: Path, extra_chunks: int
) -> None:
    """``crag ingest --no-server`` of a new file beside the server: the next warm ask finds it.

    The large one (1,500 more chunks) is written into Chroma's vector index files, not only
    its log; the warm server answered every ask after it with "index damaged… could not be
    rebuilt".
    """
    note = tmp_path / "otters.txt"
    note.write_text(OTTERS + "\n")
    files = [str(note)]
    if extra_chunks:
        files.append(str(write_big_file(tmp_path / "more.txt", extra_chunks, craft="Balloon")))
    with fake_model_server(tmp_path) as env:
        _fill_the_store(tmp_path, env)
        done = hashed_crag("ingest", "--no-server", "--store", "st", *files, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        printed = warm_ask(env, tmp_path)
    assert "damaged" not in printed, printed
    texts = retrieved_texts(printed)
    if not extra_chunks:
        assert any(OTTERS in text for text in texts), printed
        return
    # Among 1,500 near-identical hashed chunks the approximate (HNSW) search may rank another
    # new chunk above the note: what shows the store was reopened is that new chunks are found
    # at all (a stale client finds only the airships it had).
    assert any(OTTERS in text or "Balloon" in text for text in texts), printed


def test_an_ingest_run_in_process_while_the_server_is_busy_is_found_after(
    tmp_path: Path,
) -> None:
    """An ingest that runs in-process because the server is busy: the next warm ask finds it."""
    note = tmp_path / "otters.txt"
    note.write_text(OTTERS + "\n")
    hold = tmp_path / "hold"
    with fake_model_server(tmp_path, hold=hold) as env:
        _fill_the_store(tmp_path, env)
        hold.write_text("wait")
        busy = subprocess.Popen(  # the server's batch waits while `hold` exists: it is busy
            [
                sys.executable,
                "-c",
                CLIENT,
                "",
                "ingest",
                "--store",
                "other",
                str(ROOT / "README.md"),
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            _wait_for(tmp_path / "started")
            done = hashed_crag("ingest", "--store", "st", str(note), env=env, cwd=tmp_path)
            assert done.returncode == 0, done.stderr
            assert "1 added" in done.stdout, done.stdout
        finally:
            hold.unlink()
            _, err = busy.communicate(timeout=120)
        assert busy.returncode == 0, err
        printed = warm_ask(env, tmp_path)
    assert "damaged" not in printed, printed
    assert any(OTTERS in text for text in retrieved_texts(printed)), printed


def _wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)
