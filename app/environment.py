"""The process environment every ``crag`` entry point starts from: offline and quiet.

Standard library only: the console entry point (:mod:`crag.app.console`) applies it before it
knows whether the warm server or the CLI runs the command, and the CLIs apply it again when
called directly (``python -m crag.app.cli``, ``crag-bench``, tests).
"""

from __future__ import annotations

import os

OFFLINE_DEFAULTS = {
    "ANONYMIZED_TELEMETRY": "False",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' "Loading weights" bar on every start
}
"""Every library offline and quiet, unless the user's environment says otherwise."""


def configure_environment() -> None:
    """Apply :data:`OFFLINE_DEFAULTS` where the environment does not set them."""
    for name, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(name, value)
