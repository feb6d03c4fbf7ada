"""``crag serve`` keeps serving whatever its clients do, and a deleted directory is one line.

Real ``crag serve``, ``crag ingest`` and ``crag ask`` processes talking over a Unix socket in a
temporary directory. The server's embedder hashes words instead of running a model
(:func:`tests.warm_support.hash_server`), so it starts in seconds and each test controls how
long its batches take; the server ignores SIGINT, as one started with ``nohup crag serve &``
does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from crag.app.warm.server import SEND_TIMEOUT_S
from tests.warm_support import (
    CLIENT,
    ROOT,
    crag,
    hash_server,
    raw_request,
    wait_for_output,
    write_big_file,
)

pytestmark = pytest.mark.integration

EMBED_BATCH = 512
"""Chunks the ingest embeds and writes at a time (``EMBED_BATCH_SIZE``)."""

IN_PROCESS_CLI = [
    sys.executable,
    "-c",
    "import sys; from crag.app.cli.commands import main; sys.exit(main())",
]
"""The CLI itself, without the warm client in front (as ``python -m crag.app.cli.commands``)."""

STOPPING = "crag serve: stopping (asked by `crag serve --stop`)"
"""What the server writes to its own stderr when ``crag serve --stop`` reaches it."""


def _answered_once_free(
    env: dict[str, str], cwd: Path, argv: list[str], within: float
) -> list[dict[str, Any]]:
    """Send ``argv`` to the server until it accepts it (it refuses while busy); its answer."""
    deadline = time.monotonic() + within
    while True:
        answered = raw_request(env, cwd, argv)
        if answered[0] == {"accepted": True}:
            return answered
        assert "busy" in answered[0].get("refused", ""), answered
        assert time.monotonic() < deadline, f"the server stayed busy for {within:g} s"
        time.sleep(0.2)


def _stored_chunks(store: Path) -> dict[str, set[int]]:
    """Each stored source and the chunk numbers stored of it."""
    from crag.vectorstore.store import open_store
    from tests.hash_embeddings import HashEmbeddings

    opened = open_store(store, "crag", HashEmbeddings(), create=False)
    metadatas = opened._collection.get(include=["metadatas"])["metadatas"] or []
    chunks: dict[str, set[int]] = {}
    for meta in metadatas:
        chunk = meta["chunk"]
        assert isinstance(chunk, int)
        chunks.setdefault(str(meta["source"]), set()).add(chunk)
    return chunks


def _failing_files(folder: Path, count: int) -> list[str]:
    """``count`` files of a type crag does not read: two lines of output each (~500 bytes)."""
    folder.mkdir()
    for number in range(count):
        (folder / f"f{number}.xyz").write_text("not a document\n")
    return [f"{folder.name}/f{number}.xyz" for number in range(count)]


def test_a_stopped_client_is_dropped_and_blocks_no_one(tmp_path: Path) -> None:
    """A client that stops reading (SIGSTOP) is dropped after a while; the others are served.

    4,000 failing files make about 2 MB of output, far more than the socket and the client's
    pipe hold: the server's sends to the stopped client time out, and its run is cancelled.
    """
    small = tmp_path / "small.txt"
    small.write_text("Sea otters hold hands while they sleep.\n")
    failing = _failing_files(tmp_path / "bad", 4000)
    with hash_server(tmp_path) as (server, env):
        client = subprocess.Popen(
            [*CLIENT, "ingest", "--store", "st", *failing],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            # read until the server streams; unread from here on, the pipe fills at 64 KiB
            wait_for_output(client.stderr, "failed: ", timeout=60)
            os.kill(client.pid, signal.SIGSTOP)
            started = time.monotonic()
            answered = _answered_once_free(
                env, tmp_path, ["ingest", "--store", "st", str(small)], within=SEND_TIMEOUT_S + 15
            )
            assert answered[-1] == {"exit": 0}
            assert time.monotonic() - started < SEND_TIMEOUT_S + 15
            stopped = crag("serve", "--stop", env=env, cwd=tmp_path, timeout=30)
            assert stopped.returncode == 0, stopped.stderr
            assert "stopped after answering 2 command(s)" in stopped.stderr
            assert server.wait(timeout=30) == 0
            assert server.stderr is not None
            assert b"dropped a client that read nothing" in server.stderr.read()
        finally:
            os.kill(client.pid, signal.SIGCONT)
            _, err = client.communicate(timeout=30)
    assert client.returncode == 1  # what it read before it was dropped, then the end
    assert (
        err.decode()
        .rstrip()
        .endswith("crag: error: the warm server closed the connection without an answer")
    )
    assert list(_stored_chunks(tmp_path / "st")) == [str(small.resolve())]


def test_an_interrupted_stop_still_stops_the_server(tmp_path: Path) -> None:
    """``crag serve --stop`` interrupted while an ingest runs: the stop holds, a second works."""
    started, gate = tmp_path / "started", tmp_path / "gate"
    note = tmp_path / "otters.txt"
    note.write_text("Sea otters hold hands while they sleep so they do not drift apart.\n")
    with hash_server(tmp_path, started=started, gate=gate) as (server, env):
        assert server.stderr is not None
        ingest = subprocess.Popen(
            [*CLIENT, "ingest", "--store", "st", str(note)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        stops: list[subprocess.Popen[bytes]] = []
        try:
            _wait_for_file(started, timeout=60)  # the ingest is embedding, held at the gate
            stops.append(_stop_client(tmp_path, env))
            wait_for_output(server.stderr, STOPPING, timeout=60)
            stops[0].send_signal(signal.SIGINT)  # as `timeout -s INT 5 crag serve --stop`
            _, first_err = stops[0].communicate(timeout=30)
            assert stops[0].returncode == 130 and b"crag: interrupted" in first_err

            stops.append(_stop_client(tmp_path, env))
            wait_for_output(server.stderr, STOPPING, timeout=60)
            refused = raw_request(env, tmp_path, ["ingest", "--store", "st", str(note)])
            assert refused == [{"refused": "it is stopping"}]  # the client runs it in-process

            gate.write_text("go")
            out, err = ingest.communicate(timeout=60)
            assert ingest.returncode == 0 and b"1 added" in out, err
            _, second_err = stops[1].communicate(timeout=30)
            assert stops[1].returncode == 0, second_err
            assert b"stopped after answering 1 command(s)" in second_err
            assert server.wait(timeout=30) == 0
        finally:
            for process in (ingest, *stops):
                if process.poll() is None:
                    process.kill()
                    process.wait()
        assert not Path(env["CRAG_SERVE_SOCKET"]).exists()
        assert crag("serve", "--stop", env=env, cwd=tmp_path, timeout=60).returncode == 1


def _wait_for_file(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


def _stop_client(cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A ``crag serve --stop`` process (through the real entry point)."""
    return subprocess.Popen(
        [*CLIENT, "serve", "--stop"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_a_cancelled_warm_ingest_keeps_only_whole_documents(tmp_path: Path) -> None:
    """Ctrl-C during a batch: that batch is written, its whole documents stay, nothing else.

    What docs/documents.md and docs/cli.md say: the batch being written when the run is
    cancelled finishes; the documents it (or an earlier batch) completed stay, whole; the
    unfinished ones are removed. Re-ingesting finds the kept ones unchanged.
    """
    started, gate = tmp_path / "started", tmp_path / "gate"
    files = [
        str(write_big_file(tmp_path / f"craft{n}.txt", chunks=40, craft=f"Airship{n}"))
        for n in range(30)
    ]  # about 1,200 chunks: a batch of 512 ends in the middle of a document
    with hash_server(tmp_path, started=started, gate=gate) as (_server, env):
        client = subprocess.Popen(
            [*CLIENT, "ingest", "--store", "st", *files],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            _wait_for_file(started, timeout=60)  # the first batch is embedding, at the gate
            client.send_signal(signal.SIGINT)
            _, err = client.communicate(timeout=30)
        finally:
            if client.poll() is None:
                client.kill()
        assert client.returncode == 130 and b"crag: interrupted" in err
        time.sleep(0.5)  # the server sees the client gone and cancels the run
        gate.write_text("go")  # the batch being written finishes

        _answered_once_free(env, tmp_path, ["ingest", "--help"], within=30)  # it has ended
        kept = _stored_chunks(tmp_path / "st")
        again = _answered_once_free(env, tmp_path, ["ingest", "--store", "st", *files], 30)
        complete = _stored_chunks(tmp_path / "st")
    assert again[-1] == {"exit": 0}, again
    assert kept, "the batch being written when the run was cancelled was not finished"
    assert sum(len(chunks) for chunks in kept.values()) <= EMBED_BATCH
    for source, chunks in kept.items():
        assert chunks == complete[source], f"{source} was kept incomplete"
    summary = "".join(m.get("out", "") for m in again)
    assert f"{len(files) - len(kept)} added" in summary, summary
    assert f"{len(kept)} unchanged" in summary, summary
    documents_page = " ".join((ROOT / "docs" / "documents.md").read_text().split())
    assert "the batch being written then is finished" in documents_page
    assert "the documents it or an earlier batch completed stay, whole" in documents_page
    cli_page = " ".join((ROOT / "docs" / "cli.md").read_text().split())
    assert "the batch being written is finished, the documents completed so far" in cli_page


@pytest.mark.parametrize(
    "command",
    [
        pytest.param([*CLIENT, "ask"], id="warm-client"),
        pytest.param([*CLIENT, "ask", "--no-server"], id="no-server"),
        pytest.param([*IN_PROCESS_CLI, "ask"], id="cli"),
    ],
)
def test_a_deleted_working_directory_is_one_line(tmp_path: Path, command: list[str]) -> None:
    """``crag ask`` in a directory deleted under its shell: one line, exit 2, no traceback."""
    gone = tmp_path / "gone"
    gone.mkdir()
    gone = gone.resolve()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")}
    env.update(
        PYTHONPATH=str(ROOT), XDG_RUNTIME_DIR=str(tmp_path / "run"), CRAG_SERVE_AUTOSTART="0"
    )
    # as a shell does: in the directory when it is deleted, then the command starts there
    in_deleted = ["sh", "-c", 'rmdir -- "$PWD" && exec "$@"', "sh"]
    started = time.monotonic()
    done = subprocess.run(
        [*in_deleted, *command, "Who painted the Mona Lisa?"],
        cwd=gone,
        env={**env, "PWD": str(gone)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert not gone.exists()
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"crag: error: the current directory no longer exists: {gone}; "
        "change to an existing directory"
    ]
    assert time.monotonic() - started < 60
    assert not (tmp_path / "run").exists()  # no socket directory made for a gone directory


def _send_raw(env: dict[str, str], line: bytes) -> list[dict[str, Any]]:
    """Send ``line`` to the server as a request; every message it answers with."""
    import json
    import socket

    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(30)
    conn.connect(env["CRAG_SERVE_SOCKET"])
    with conn:
        conn.sendall(line + b"\n")
        buffer = b""
        while chunk := conn.recv(65536):
            buffer += chunk
    return [json.loads(part) for part in buffer.splitlines() if part.strip()]


def _bad_requests(cwd: Path, env: dict[str, str]) -> list[tuple[dict[str, Any], str]]:
    """Requests with a field of the wrong type, each with the field its refusal names."""
    from crag.app.warm.server import deployment_environment

    good: dict[str, Any] = {
        "argv": ["ingest", "--help"],
        "cwd": str(cwd),
        "env": deployment_environment(env),
        "tty": {"out": False, "err": False},
    }
    wrong: list[tuple[str, Any]] = [
        ("tty", "yes"),
        ("tty", ["out"]),
        ("tty", 1),
        ("tty", None),
        ("tty", {"out": "yes", "err": False}),
        ("tty", {"err": 1}),
        ("argv", "ingest --help"),
        ("argv", [["ingest"]]),
        ("argv", [{"ingest": 1}, "--help"]),
        ("argv", ["ingest", 5]),
        ("argv", ["ingest", None]),
        ("argv", ["ingest", "--store", "a\x00b"]),
        ("cwd", 5),
        ("cwd", ["/"]),
        ("cwd", {"path": "/"}),
        ("env", "CRAG_X"),
        ("env", ["CRAG_X"]),
        ("env", {"CRAG_X": 5}),
        ("stop", "no"),
        ("stop", 1),
        ("stop", {"now": True}),
    ]
    return [({**good, field: value}, field) for field, value in wrong]


def test_a_request_with_fields_of_the_wrong_type_is_refused_and_kills_nothing(
    tmp_path: Path,
) -> None:
    """Every field the server reads is type-checked: a wrong one is refused, naming it.

    ``"tty": "yes"`` raised AttributeError in the server's main thread and ``crag serve``
    exited (issue 59, item 5); ``"stop": "no"`` stopped it; an unhashable ``argv[0]`` or JSON
    nested too deep for the parser killed the connection's thread with a traceback.
    """
    import json

    note = tmp_path / "otters.txt"
    note.write_text("Sea otters hold hands while they sleep so they do not drift apart.\n")
    with hash_server(tmp_path) as (server, env):
        for request, field in _bad_requests(tmp_path, env):
            answered = _send_raw(env, json.dumps(request).encode())
            assert len(answered) == 1 and "refused" in answered[0], (request, answered)
            reason = answered[0]["refused"]
            assert f"`{field}`" in reason, (request, reason)
            assert server.poll() is None, f"crag serve exited after {request!r}"
        deep = _send_raw(env, b"[" * 200_000 + b"]" * 200_000)
        assert deep == [{"refused": "the request is not JSON: it is nested too deeply"}]
        not_utf8 = _send_raw(env, b'{"argv": ["\xff"]}')
        assert len(not_utf8) == 1 and "not JSON" in not_utf8[0]["refused"], not_utf8
        assert server.poll() is None
        answered = raw_request(env, tmp_path, ["ingest", "--store", "st", str(note)])
        assert answered[0] == {"accepted": True} and answered[-1] == {"exit": 0}, answered
        stopped = crag("serve", "--stop", env=env, cwd=tmp_path, timeout=30)
        assert stopped.returncode == 0, stopped.stderr
        assert "stopped after answering 1 command(s)" in stopped.stderr
        assert server.wait(timeout=30) == 0
