"""The ``crag`` command's entry point: a running ``crag serve`` first, else the CLI in-process.

Kept to the standard library until it knows it must run the command itself: a command the warm
server answers costs this process about 0.05 s of imports, where importing the CLI (LangChain,
LangGraph, the graph's modules) costs about a second.
"""

from __future__ import annotations

import contextlib
import os
import sys

from crag.app.cli import collector
from crag.app.cli.output_errors import ClosedOutput, discard_pending_output, os_error_text
from crag.app.environment import configure_environment


def _output_failed(exc: OSError) -> int:
    """Say on stderr why the output failed (``| head``, ``> /dev/full``): exit code 1."""
    discard_pending_output()
    with contextlib.suppress(OSError, ValueError, AttributeError):  # stderr gone too
        sys.stderr.write(f"crag: error: {os_error_text(exc)}\n")
        sys.stderr.flush()
    return 1


INTERRUPTED_CODES = (130, 143)
"""Exit codes of a command stopped by Ctrl-C (130) or SIGTERM (143)."""


def _exit_now(code: int) -> None:
    """End the process with ``code`` at once, its output flushed.

    A stopped command has already undone what it must (an ingestion's unfinished documents);
    what its worker threads are still doing (parsing a page, loading a model) is abandoned.
    Python would otherwise wait for them on its way out: a page being parsed kept a terminated
    ``crag ask`` running for seconds.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(code)


def main() -> int:
    """Run ``crag`` with ``sys.argv``: on the warm server when one answers, else here.

    The garbage collector is paused while the process starts (:mod:`crag.app.cli.collector`).
    A command that was interrupted or terminated ends at once (:func:`_exit_now`).
    """
    collector.pause()
    if sys.stdout is None:
        sys.stdout = ClosedOutput()
    try:
        code = _run()
    except OSError as exc:
        return _output_failed(exc)
    finally:
        collector.before_exit()
    if code in INTERRUPTED_CODES:
        _exit_now(code)
    return code


def _run() -> int:
    """The command on the warm server, else in this process; its output flushed."""
    from crag.app.warm.server import run_on_server

    configure_environment()
    argv = sys.argv[1:]
    answered = run_on_server(argv)
    if answered is None:
        from crag.app.cli.commands import main as run_cli

        answered = run_cli(argv)
    sys.stdout.flush()
    return answered


if __name__ == "__main__":
    sys.exit(main())
