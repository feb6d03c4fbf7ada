"""When the garbage collector runs in a ``crag`` process (:mod:`crag.app.cli.collector`)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from crag.app.cli import collector, commands

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def paused() -> Iterator[None]:
    """The collector paused as the console entry point leaves it; restored afterwards."""
    was_enabled = gc.isenabled()
    collector.pause()
    try:
        yield
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()


def test_resuming_collects_again_but_never_over_what_was_alive(paused: None) -> None:
    assert not gc.isenabled()
    collector.resume_if_paused()
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0


def test_a_process_that_never_paused_is_left_as_it_is() -> None:
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    collector.resume_if_paused()
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen


def test_commands_other_than_ask_and_serve_run_with_the_collector(
    paused: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert commands.main(["graph"]) == 0
    assert "retrieve" in capsys.readouterr().out
    assert gc.isenabled()


def test_serve_stop_keeps_it_paused(
    paused: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAG_SERVE_SOCKET", str(tmp_path / "none.sock"))
    assert commands.main(["serve", "--stop"]) == 1  # no server answers: a short process
    assert not gc.isenabled()


def test_the_console_entry_point_runs_a_command_paused_and_exits_frozen(tmp_path: Path) -> None:
    """``crag serve --stop`` through the entry point: paused throughout, frozen at exit."""
    script = textwrap.dedent(
        """
        import atexit, gc, sys
        from crag.app.cli import console
        seen = []
        import crag.app.cli.commands
        real = crag.app.cli.commands.run_command
        def spy(*args, **kwargs):
            seen.append(gc.isenabled())
            return real(*args, **kwargs)
        crag.app.cli.commands.run_command = spy
        atexit.register(lambda: print(seen, gc.isenabled(), gc.get_freeze_count() > 0))
        sys.argv = ["crag", "serve", "--stop"]
        sys.exit(console.main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "CRAG_SERVE_SOCKET": str(tmp_path / "none.sock")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout.split() == ["[False]", "False", "True"], done.stderr
