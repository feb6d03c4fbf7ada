"""Run a script in a fresh interpreter: what a new ``crag`` process imports, loads and prints."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_python(
    script: str,
    cwd: Path = ROOT,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> str:
    """Run ``script`` in a fresh interpreter in ``cwd`` (the repository root); its standard output.

    Fails the test, with the script's standard error, if it exits with an error.
    """
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
