"""The process environment every ``crag`` entry point starts from: offline, quiet, no spinning.

Standard library only: the console entry point (:mod:`crag.app.cli.console`) applies it before it
knows whether the warm server or the CLI runs the command, and the CLIs apply it again when
called directly (``python -m crag.app.cli.commands``, ``crag-bench``, tests).
"""

from __future__ import annotations

import os

OFFLINE_DEFAULTS = {
    "ANONYMIZED_TELEMETRY": "False",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' "Loading weights" bar on every start
    # torch's OpenMP threads sleep when idle instead of spinning: the nodes run on LangGraph's
    # worker threads, each with a team of its own, and spinning teams starve the working one
    # (on two busy cores one answer took 0.6-30 s, against 0.9-1.5 s). Results are the same.
    "OMP_WAIT_POLICY": "PASSIVE",
}
"""Every library offline and quiet, and torch's threads idle without spinning, unless the
user's environment says otherwise. Applied before torch is imported: OpenMP reads it once."""


def configure_environment() -> None:
    """Apply :data:`OFFLINE_DEFAULTS` where the environment does not set them."""
    for name, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(name, value)
