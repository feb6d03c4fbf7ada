"""A deterministic bag-of-words embedder: no model to load, so subprocesses start fast.

Used where a test needs several processes on one store (locking, a killed ingestion, a
read-only store as another user); retrieval quality is not what those tests check.
"""

from __future__ import annotations

import hashlib
import math
import time
from pathlib import Path

from langchain_core.embeddings import Embeddings

DIMENSIONS = 64


def _vector(text: str) -> list[float]:
    vector = [0.0] * DIMENSIONS
    for word in text.lower().split():
        digest = hashlib.sha1(word.strip(".,;:!?").encode("utf-8")).digest()
        vector[digest[0] % DIMENSIONS] += 1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


class HashEmbeddings(Embeddings):
    """Embeds by hashing words into buckets; optionally slow, announcing its first call.

    Args:
        delay: Seconds to sleep per ``embed_documents`` call.
        started: A file created when ``embed_documents`` is first called.
        wait_for: On the first call, wait (up to two minutes) until this file exists.
    """

    def __init__(
        self, delay: float = 0.0, started: Path | None = None, wait_for: Path | None = None
    ) -> None:
        self.delay = delay
        self.started = started
        self.wait_for = wait_for
        self.calls = 0
        self.documents = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        self.documents += len(texts)
        if self.calls == 1 and self.started is not None:
            self.started.write_text("embedding")
        if self.calls == 1 and self.wait_for is not None:
            deadline = time.monotonic() + 120
            while not self.wait_for.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        if self.delay:
            time.sleep(self.delay)
        return [_vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return _vector(text)
