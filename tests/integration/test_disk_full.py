"""A disk that fills up during ``crag ingest`` ends it in one line, and nothing stored is lost.

Each case runs real ``crag ingest`` processes in a mount namespace of their own (``unshare``)
over a small tmpfs holding the store, so the disk really fills (``ENOSPC``) without touching
the machine's. Their embedder hashes words (no model to load). Two ways a disk fills:

- the ingestion itself: the batch that would not fit is refused before it is written, while
  there is still room to remove what the run wrote (:mod:`crag.vectorstore.disk_space`);
- another program, while a batch is being written: Chroma's write fails; the command names the
  full disk, and once space is freed the next ingestion removes the unfinished document.

Either way the document stored before is intact, and the same files ingest once there is room.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.warm_support import ROOT, write_big_file

HASH_CLI = """
import sys
import crag.vectorstore.embeddings as embeddings
from tests.hash_embeddings import HashEmbeddings
fast = HashEmbeddings()
embeddings.shared_embeddings = lambda name="": fast
embeddings.load_embeddings = lambda name="": fast
from crag.app.cli.console import main
sys.exit(main())
"""

SOURCES = """
import collections, json, sys
from crag.vectorstore.store import open_store
from tests.hash_embeddings import HashEmbeddings
store = open_store(sys.argv[1], "crag", HashEmbeddings(), create=False)
metadatas = store._collection.get(include=["metadatas"])["metadatas"] or []
print(json.dumps(collections.Counter(str(m["source"]).rsplit("/", 1)[-1] for m in metadatas)))
"""

DRIVER = """
import json, os, subprocess, sys, time
work, mode = sys.argv[1], sys.argv[2]
disk = os.path.join(work, "disk")
cli = [sys.executable, "-c", HASH_CLI, "ingest", "--no-server", "--store", "disk/store"]
result = {}

def ingest(name):
    done = subprocess.run(cli + [name], cwd=work, capture_output=True, text=True, timeout=300)
    return {"rc": done.returncode, "out": done.stdout, "err": done.stderr}

def sources():
    done = subprocess.run([sys.executable, "-c", SOURCES, os.path.join(disk, "store")],
                          capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout) if done.returncode == 0 else done.stderr

result["small"] = ingest("small.txt")
if mode == "itself":
    result["big"] = ingest("big.txt")
else:  # another program fills the disk once the first batch is written
    big = subprocess.Popen(cli + ["big.txt"], cwd=work, stderr=subprocess.PIPE, text=True)
    seen = ""
    while "512/" not in seen and big.poll() is None:
        seen += big.stderr.read(1)
    with open(os.path.join(disk, "filler"), "wb") as filler:
        try:
            while True:
                filler.write(bytes(1 << 20))
                filler.flush()
        except OSError:
            pass
    result["big"] = {"rc": big.wait(timeout=300), "err": seen + big.stderr.read()}
    os.remove(os.path.join(disk, "filler"))
result["after"] = sources()
result["again"] = ingest("small.txt")
result["cleaned"] = sources()
subprocess.run(["mount", "-o", "remount,size=200m", disk], check=True)
result["roomy"] = ingest("big.txt")
result["final"] = sources()
print(json.dumps(result))
"""


def _in_own_mount_namespace(work: Path, mode: str, size: str) -> dict[str, Any]:
    """Run :data:`DRIVER` in a mount namespace of its own over a ``size`` tmpfs at work/disk."""
    unshare = shutil.which("unshare")
    assert unshare is not None, "this test needs util-linux's unshare"
    as_root = [] if os.geteuid() == 0 else ["--map-root-user"]
    (work / "disk").mkdir()
    script = f'mount -t tmpfs -o size={size} tmpfs "$1/disk" && exec "$2" -c "$3" "$1" "$4"'
    driver = DRIVER.replace("HASH_CLI", repr(HASH_CLI)).replace("SOURCES", repr(SOURCES))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [unshare, *as_root, "--mount", "--propagation", "private", "sh", "-c", script, "sh",
         str(work), sys.executable, driver, mode],
        cwd=work, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, f"the namespace could not be set up: {done.stderr[-2000:]}"
    return dict(json.loads(done.stdout.splitlines()[-1]))


def _files(tmp_path: Path) -> None:
    write_big_file(tmp_path / "small.txt", chunks=3, craft="Heron")
    write_big_file(tmp_path / "big.txt", chunks=3000)


def _assert_nothing_lost(result: dict[str, Any]) -> None:
    assert result["small"]["rc"] == 0, result["small"]["err"][-2000:]
    assert result["big"]["rc"] == 2
    assert "Traceback" not in result["big"]["err"], result["big"]["err"][-3000:]
    assert result["again"]["rc"] == 0, result["again"]["err"][-2000:]
    assert "1 unchanged" in result["again"]["out"]
    assert result["cleaned"] == {"small.txt": 4}
    assert result["roomy"]["rc"] == 0, result["roomy"]["err"][-2000:]
    assert result["final"]["small.txt"] == 4 and result["final"]["big.txt"] > 3000


def test_an_ingestion_that_would_fill_the_disk_stops_before_it_does(tmp_path: Path) -> None:
    _files(tmp_path)
    result = _in_own_mount_namespace(tmp_path, "itself", "16m")
    _assert_nothing_lost(result)
    last = result["big"]["err"].strip().splitlines()[-1]
    assert "crag: error: the disk holding the vector store" in last
    assert "MB free" in last and "free some space and ingest again" in last
    assert result["after"] == {"small.txt": 4}  # readable at once: the run's chunks are gone


def test_a_disk_another_program_fills_during_an_ingestion_is_named(tmp_path: Path) -> None:
    _files(tmp_path)
    result = _in_own_mount_namespace(tmp_path, "filler", "40m")
    _assert_nothing_lost(result)
    last = result["big"]["err"].strip().splitlines()[-1]
    assert "crag: error: the disk holding the vector store" in last, result["big"]["err"][-2000:]
    assert "full" in last or "MB free" in last
    assert isinstance(result["after"], dict) and result["after"].get("small.txt") == 4
