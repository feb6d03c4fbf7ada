"""SIGTERM (``timeout``, systemd, ``docker stop``) is handled as Ctrl-C is.

A real ``crag ingest`` process, terminated after its first batch of chunks was written: it
exits 143 with one line, and the store keeps nothing of the document it was writing (the
interrupted-ingest cleanup ran). Its embedder hashes words and takes 1.5 s a batch (no model to
load), so the signal reliably lands between batches.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.hash_embeddings import HashEmbeddings
from tests.warm_support import ROOT, wait_for_output, write_big_file

EMBED_BATCH = 512
"""Chunks the ingest embeds and writes at a time (``EMBED_BATCH_SIZE``)."""

HASH_CLI = """
import sys
import crag.vectorstore.embeddings as embeddings
from tests.hash_embeddings import HashEmbeddings
slow = HashEmbeddings(delay=1.5)
embeddings.shared_embeddings = lambda name="": slow  # no model: each batch takes 1.5 s
embeddings.load_embeddings = lambda name="": slow
from crag.app.cli.console import main
sys.exit(main())
"""


def test_sigterm_during_an_ingest_leaves_nothing_of_the_document(tmp_path: Path) -> None:
    from crag.vectorstore.store import open_store

    big = write_big_file(tmp_path / "big.txt", chunks=6 * EMBED_BATCH)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")}
    env["PYTHONPATH"] = str(ROOT)
    ingest = subprocess.Popen(
        [sys.executable, "-c", HASH_CLI, "ingest", "--no-server", "--store", "store", str(big)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_output(ingest.stderr, f"{EMBED_BATCH}/", timeout=120)  # a batch is written
        ingest.send_signal(signal.SIGTERM)
        _, err = ingest.communicate(timeout=60)
    finally:
        if ingest.poll() is None:
            ingest.kill()
    assert ingest.returncode == 143, err[-2000:]
    assert b"crag: terminated" in err and b"Traceback" not in err

    store = open_store(tmp_path / "store", "crag", HashEmbeddings(), create=False)
    metadatas = store._collection.get(include=["metadatas"])["metadatas"] or []
    assert not [m for m in metadatas if str(m.get("source", "")).endswith("big.txt")]
