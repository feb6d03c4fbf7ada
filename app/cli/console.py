"""The ``crag`` command's entry point: a running ``crag serve`` first, else the CLI in-process.

Kept to the standard library until it knows it must run the command itself: a command the warm
server answers costs this process about 0.05 s of imports, where importing the CLI (LangChain,
LangGraph, the graph's modules) costs about a second.
"""

from __future__ import annotations

import sys

from crag.app.cli import collector
from crag.app.environment import configure_environment


def main() -> int:
    """Run ``crag`` with ``sys.argv``: on the warm server when one answers, else here.

    The garbage collector is paused while the process starts (:mod:`crag.app.cli.collector`).
    """
    collector.pause()
    try:
        from crag.app.warm.server import run_on_server

        configure_environment()
        argv = sys.argv[1:]
        answered = run_on_server(argv)
        if answered is not None:
            return answered
        from crag.app.cli.commands import main as run_cli

        return run_cli(argv)
    finally:
        collector.before_exit()


if __name__ == "__main__":
    sys.exit(main())
