"""Everyday failures of a real ``crag`` process end in one line, never a traceback (issue 59).

Each test runs the command the way a user does, in a subprocess, on files and folders it makes:
odd file names, trees too deep to recurse, folders this user cannot enter, an output that
cannot be written, a threads file that is not SQLite, a store path that is not UTF-8. The
embedder hashes words (no model to load).

Permissions do not bind root, and these tests may run as root: there the command runs with
``CAP_DAC_OVERRIDE`` and ``CAP_DAC_READ_SEARCH`` dropped (``setpriv --bounding-set``), so a
mode-000 folder is closed to it as to any user; without ``setpriv`` such a test fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.warm_support import ROOT

pytestmark = pytest.mark.integration

HASH_CLI = """
import sys
import crag.vectorstore.embeddings as embeddings
from tests.hash_embeddings import HashEmbeddings
fast = HashEmbeddings()
embeddings.shared_embeddings = lambda name="": fast
embeddings.load_embeddings = lambda name="": fast
from crag.app.cli.console import main
sys.argv = ["crag", *sys.argv[1:]]
sys.exit(main())
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _without_permission_override() -> list[str]:
    """The prefix that makes permissions bind the command (as root: dropped capabilities)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv, "running as root, and no setpriv to drop the permission override"
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search"]


def crag(
    cwd: Path, *args: str | bytes, env: dict[str, str] | None = None, **popen: object
) -> subprocess.CompletedProcess[bytes]:
    """Run ``crag ARGS`` (hash embedder) in ``cwd``; stdout and stderr captured as bytes."""
    command: list[str | bytes] = [sys.executable, "-c", HASH_CLI, *args]
    if popen.pop("confined", False):
        command = [*_without_permission_override(), *command]
    if "stdout" not in popen:
        popen["capture_output"] = True
    return subprocess.run(command, cwd=cwd, env=env or _env(), timeout=180, check=False, **popen)  # type: ignore[call-overload, no-any-return]


def _assert_one_line_failure(done: subprocess.CompletedProcess[bytes], needle: str) -> None:
    err = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err[-3000:]
    assert done.returncode != 0, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], err


def _ingested(cwd: Path, folder: Path, *extra: str) -> tuple[str, str, int]:
    done = crag(cwd, "ingest", "--no-server", "--store", "store", str(folder), *extra)
    return done.stdout.decode(), done.stderr.decode("utf-8", "replace"), done.returncode


def test_a_file_name_that_is_not_utf8_is_skipped_and_the_rest_ingested(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.txt").write_text("Zeppelins are rigid airships.\n")
    bad = os.path.join(os.fsencode(folder), b"bad\xff.txt")
    with open(bad, "wb") as handle:
        handle.write(b"a file from a Latin-1 system\n")
    out, err, code = _ingested(tmp_path, folder)
    assert code == 0 and "Traceback" not in err, err
    assert "1 added" in out and "1 failed" in out, out
    named = [line for line in err.splitlines() if "bad\\xff.txt" in line]
    assert len(named) == 1 and "not valid UTF-8" in named[0], err


def test_a_deeply_nested_json_line_fails_alone(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.txt").write_text("Zeppelins are rigid airships.\n")
    line = '{"text": "x", "a": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    (folder / "deep.jsonl").write_text(line)
    out, err, code = _ingested(tmp_path, folder)
    assert code == 0 and "Traceback" not in err, err
    assert "1 added" in out and "1 failed" in out, out
    assert "deep.jsonl, line 1: JSON nested too deeply" in err, err


def test_a_folder_thousands_of_levels_deep_is_skipped_with_a_warning(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.txt").write_text("Zeppelins are rigid airships.\n")
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        for _ in range(2100):  # by descriptor: the whole path is past PATH_MAX
            os.mkdir("a", dir_fd=descriptor)
            inner = os.open("a", os.O_RDONLY, dir_fd=descriptor)
            os.close(descriptor)
            descriptor = inner
    finally:
        os.close(descriptor)
    try:
        out, err, code = _ingested(tmp_path, folder)
    finally:  # GNU rm walks any depth; pytest's own clean-up of old runs would recurse
        subprocess.run(["rm", "-rf", str(folder / "a")], check=True, timeout=120)
    assert code == 0 and "Traceback" not in err, err[-3000:]
    assert "1 added" in out, out
    assert "cannot read folder (File name too long)" in err, err[-500:]


def test_folders_this_user_cannot_enter_are_named(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    (folder / "locked").mkdir(parents=True)
    (folder / "listed").mkdir()
    (folder / "good.txt").write_text("Zeppelins are rigid airships.\n")
    (folder / "locked" / "secret.txt").write_text("hidden\n")
    (folder / "listed" / "inside.txt").write_text("listed, not enterable\n")
    (folder / "locked").chmod(0o000)
    (folder / "listed").chmod(0o444)
    try:
        done = crag(
            tmp_path, "ingest", "--no-server", "--store", "store", str(folder), confined=True
        )
    finally:
        (folder / "locked").chmod(0o755)
        (folder / "listed").chmod(0o755)
    err = done.stderr.decode()
    assert done.returncode == 0 and "Traceback" not in err, err
    assert "locked: cannot read folder (Permission denied)" in err, err
    assert f"failed: {folder / 'listed' / 'inside.txt'}: cannot read file" in err, err
    assert "1 added" in done.stdout.decode(), done.stdout


def test_each_failed_file_is_named_once(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.txt").write_text("Zeppelins are rigid airships.\n")
    (folder / "latin.txt").write_bytes(b"caf\xe9\n")
    _, err, code = _ingested(tmp_path, folder)
    assert code == 0, err
    assert err.count("latin.txt") == 1, err


def test_an_output_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    with open("/dev/full", "wb") as full:
        _assert_one_line_failure(
            crag(tmp_path, "graph", stdout=full, stderr=subprocess.PIPE),
            "crag: error: no space left on the device",
        )
    closed = crag(
        tmp_path,
        "graph",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: os.close(1),
    )
    _assert_one_line_failure(closed, "crag: error: standard output is closed")


def test_a_closed_pipe_is_one_line(tmp_path: Path) -> None:
    reader, writer = os.pipe()
    os.close(reader)  # `| head -c1` gone before crag writes
    try:
        done = crag(tmp_path, "graph", stdout=writer, stderr=subprocess.PIPE)
    finally:
        os.close(writer)
    _assert_one_line_failure(done, "crag: error: the output was closed")


def test_a_threads_file_that_is_not_sqlite_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "threads.sqlite").write_text("not a database, some notes\n")
    done = crag(tmp_path, "history", "t1", "--threads-db", "threads.sqlite")
    _assert_one_line_failure(done, "threads.sqlite cannot be used (file is not a database)")
    assert (tmp_path / "threads.sqlite").read_text() == "not a database, some notes\n"


def test_server_token_on_a_read_only_folder_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        done = crag(tmp_path, "server-token", "--store", str(folder / "chroma"), confined=True)
    finally:
        folder.chmod(0o755)
    _assert_one_line_failure(done, "cannot read or make the server token")
    assert b"Permission denied" in done.stderr


def test_a_store_path_that_is_not_utf8_is_refused_as_a_path(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Zeppelins are rigid airships.\n")
    env = _env()
    env_bytes = {os.fsencode(k): os.fsencode(v) for k, v in env.items()}
    env_bytes[b"CRAG_STORE_PATH"] = os.fsencode(tmp_path) + b"/st\xff"
    done = subprocess.run(
        [sys.executable, "-c", HASH_CLI, "ingest", "--no-server", "a.txt"],
        cwd=tmp_path,
        env=env_bytes,
        capture_output=True,
        timeout=180,
        check=False,
    )
    _assert_one_line_failure(done, "st\\xff cannot be used: it is not valid UTF-8")
    assert "delete" not in done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2
