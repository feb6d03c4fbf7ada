"""Shared fixtures: offline environment, fakes installed as the graph's components."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from graph.components import use_components
from tests import network_guard
from tests.fakes import (
    FakeComponents,
    FixedScoreEvaluator,
    StaticSearch,
    StaticStore,
    corpus_documents,
    scripted_chat,
)

network_guard.install()


@pytest.fixture
def fake_components() -> Iterator[FakeComponents]:
    """Fakes installed for the graph: Mona Lisa passage scores 0.9, others -1."""
    components = FakeComponents(
        store=StaticStore(corpus_documents()),
        scorer=FixedScoreEvaluator({"Leonardo": 0.9, "Louvre": 0.2, "Mona Lisa": 0.7}),
        chat=scripted_chat(),
        web=StaticSearch(error="search is off in this test"),
    )
    with use_components(components):
        yield components
