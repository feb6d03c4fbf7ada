"""SIGTERM in ``crag ask`` is handled as Ctrl-C: the run's worker threads stop too, exit 143.

The same Ambiguous run as ``test_ctrl_c_in_crag_ask_stops_the_parallel_branch``: refine scores
its strips on a worker thread that an exception in the main thread does not reach; only the
run's cancellation token stops it.
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.unit.test_cancellation import SignalledRun


@pytest.mark.skipif(os.name != "posix", reason="sends SIGTERM to this process")
def test_sigterm_in_crag_ask_stops_the_run_and_exits_143(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # as in a fresh `crag` process
    run = SignalledRun(signal.SIGTERM)
    code, returned_at = run.ask()
    assert code == 143
    assert capsys.readouterr().err.strip().splitlines()[-1] == "crag: terminated"
    run.assert_stopped_in_time(returned_at)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored
