"""SIGTERM in ``crag ask`` is handled as Ctrl-C: the run's worker threads stop too, exit 143.

The same Ambiguous run as ``test_ctrl_c_in_crag_ask_stops_the_parallel_branch``: refine scores
its strips on a worker thread that an exception in the main thread does not reach; only the
run's cancellation token stops it.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from crag.app.wiring import LockedEvaluator
from crag.evaluator.embedding import EmbeddingEvaluator
from tests.fakes import FakeComponents, StaticStore, app_components, scripted_chat
from tests.unit.test_cancellation import (
    FREED_WITHIN,
    QUESTION,
    AmbiguousThenSlow,
    SlowEmbeddings,
    many_passages,
)


@pytest.mark.skipif(os.name != "posix", reason="sends SIGTERM to this process")
def test_sigterm_in_crag_ask_stops_the_run_and_exits_143(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from crag.app.cli import main

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # as in a fresh `crag` process
    embeddings = SlowEmbeddings(delay=0.4)
    lock = threading.Lock()
    evaluator = LockedEvaluator(EmbeddingEvaluator(embeddings, chunk_size=1), lock)
    components = FakeComponents(
        store=StaticStore(many_passages(10)),
        scorer=AmbiguousThenSlow(evaluator),
        chat=scripted_chat(),
    )
    terminated_at: list[float] = []

    def terminate_once() -> None:
        if embeddings.calls == 2 and not terminated_at:
            terminated_at.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGTERM)

    embeddings.on_call = terminate_once
    with app_components(components):
        code = main(["ask", "-q", QUESTION])
        returned_at = time.monotonic()
    assert terminated_at, "refine never scored its strips"
    assert code == 143
    assert capsys.readouterr().err.strip().splitlines()[-1] == "crag: terminated"
    assert returned_at - terminated_at[0] < FREED_WITHIN
    assert embeddings.calls < 10  # refine stopped scoring its 10 strips
    assert not lock.locked()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored
