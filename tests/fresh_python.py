"""Run a script in a fresh interpreter: what a new ``crag`` process imports, loads and prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_python(script: str) -> str:
    """Run ``script`` in a fresh interpreter at the repository root; its standard output.

    Fails the test, with the script's standard error, if it exits with an error.
    """
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
