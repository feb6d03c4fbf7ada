"""When Python's cyclic garbage collector runs in a ``crag`` process: not while it starts up.

Why: a cold ``crag ask`` imports some 4,000 modules (torch, transformers, LangGraph, Chroma) and
loads two models, and almost nothing it creates becomes garbage before it exits. The collector
still walked all of it: its full passes during the imports cost about 1 s of the 9 s a cold
``crag ask`` took on two cores, and its last pass at interpreter exit another 1.4 s (docs/cli.md,
"Cold path"). Reference counting frees everything that is not in a cycle either way; only
cycles wait for the collector.

So the console entry point (:mod:`crag.app.cli.console`) pauses it first thing. ``crag ask`` (one
question, then exit) runs with it paused; ``crag serve`` resumes it once its models are loaded;
every other command resumes it before it runs. Resuming freezes what is alive then (the
modules, the models: :func:`gc.freeze`), so later collections never walk it again; and before
the process exits, what is alive is frozen too, so the interpreter's teardown skips that walk.
Standard library only, as the console entry point imports it before anything else.
"""

from __future__ import annotations

import gc


def pause() -> None:
    """No automatic collections from here on (the process is starting up)."""
    gc.disable()


def resume_if_paused() -> None:
    """Collect again, never over what is alive now; nothing to do unless :func:`pause` held.

    In a process that never paused (``crag serve`` running a client's command, ``crag-bench``,
    tests) the collector is left as it is, and nothing is frozen.
    """
    if gc.isenabled():
        return
    gc.freeze()
    gc.enable()


def before_exit() -> None:
    """Spare the interpreter's teardown a collection over everything still alive."""
    gc.freeze()
