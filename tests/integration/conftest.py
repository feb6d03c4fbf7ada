"""Fixtures the integration tests share: the shipped embedder and an on-disk store that counts
what it embeds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_huggingface import HuggingFaceEmbeddings

from crag.vectorstore.embeddings import load_embeddings
from crag.vectorstore.store import open_store
from tests.browser_support import browser
from tests.fakes import CountingEmbeddings


@pytest.fixture(scope="session")
def embeddings() -> HuggingFaceEmbeddings:
    """The shipped embedder (all-MiniLM-L6-v2), loaded once."""
    return load_embeddings()


@pytest.fixture
def counting(embeddings: HuggingFaceEmbeddings) -> CountingEmbeddings:
    """The shipped embedder, counting the texts it embeds."""
    return CountingEmbeddings(embeddings)


@pytest.fixture
def store(tmp_path: Path, counting: CountingEmbeddings) -> Chroma:
    """An empty on-disk store of the test's own, collection ``docs``, embedding by ``counting``."""
    return open_store(tmp_path / "store", "docs", counting, create=True)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Headless Chromium (Debian's, driven by Playwright), one per test module."""
    with browser() as launched:
        yield launched
