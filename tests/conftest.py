"""Shared fixtures: offline environment, fakes and the graphs built with them."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# No `crag ask` of a test starts a warm server it would leave behind (app/warm/autostart.py);
# tests/integration/test_warm_autostart.py turns it on, and stops what it starts.
os.environ["CRAG_SERVE_AUTOSTART"] = "0"
if os.environ.get("PYTEST_XDIST_WORKER"):
    # make test's workers already share the cores: torch's own threads on top of them spent a
    # third of the suite's CPU waiting on each other (docs/development.md). Servers the tests
    # start inherit it.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

from crag.graph.builder import CragGraph, build_graph
from tests import network_guard
from tests.fakes import (
    FakeComponents,
    FixedScoreEvaluator,
    StaticSearch,
    StaticStore,
    corpus_documents,
    scripted_chat,
    use_app_components,
)
from tests.file_order import long_unit_files_before_integration
from tests.process_caches import clear_evaluator_cache
from tests.tiny_cross_encoder import build_tiny_cross_encoder
from tests.tiny_t5 import build_tiny_t5

network_guard.install()

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # A suite started in the background by a script (`make test &`, no job control) inherits
    # SIGINT ignored, and so would every process it starts: the tests that press Ctrl-C on a
    # client (test_warm_server*.py, test_make_serve.py) need it as a terminal leaves it.
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    long_unit_files_before_integration(items)


@pytest.fixture
def fake_components() -> FakeComponents:
    """Fakes to build graphs with: Mona Lisa passage scores 0.9, others -1.

    The graphs call them at run time, so a test may swap a part (``fake_components.scorer =
    ...``) after building its graph.
    """
    return FakeComponents(
        store=StaticStore(corpus_documents()),
        scorer=FixedScoreEvaluator({"Leonardo": 0.9, "Louvre": 0.2, "Mona Lisa": 0.7}),
        chat=scripted_chat(),
        web=StaticSearch(error="search is off in this test"),
    )


@pytest.fixture
def fake_graph(fake_components: FakeComponents) -> CragGraph:
    """The CRAG graph built with :func:`fake_components`."""
    return build_graph(components=fake_components)


@pytest.fixture
def fake_app(fake_components: FakeComponents, monkeypatch: pytest.MonkeyPatch) -> FakeComponents:
    """The app's graphs (:mod:`crag.app.graphs`, what the CLI and API run) built with the fakes.

    Returns the fakes (:func:`fake_components`: the same object).
    """
    use_app_components(monkeypatch, fake_components)
    return fake_components


@pytest.fixture
def fresh_registry() -> Iterator[None]:
    """An empty evaluator cache before and after the test."""
    clear_evaluator_cache()
    yield
    clear_evaluator_cache()


@pytest.fixture(scope="session")
def tiny_t5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random T5 evaluator checkpoint (see :mod:`tests.tiny_t5`)."""
    return build_tiny_t5(tmp_path_factory.mktemp("tiny_t5"))


@pytest.fixture(scope="session")
def tiny_ce(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random cross-encoder checkpoint with regression output."""
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny_ce"), output="regression")


@pytest.fixture(scope="module")
def postgres_uri() -> Iterator[str]:
    """A real PostgreSQL (pgserver) for the module: its URI."""
    import pgserver  # noqa: F401 - missing, the test fails: it never skips
    import psycopg_pool  # noqa: F401 - missing, the test fails: it never skips

    from tests.postgres_support import postgres_server

    with postgres_server() as (_, uri):
        yield uri
