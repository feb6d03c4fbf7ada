"""The environment every ``crag`` entry point starts from (:mod:`crag.app.environment`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from crag.app.environment import OFFLINE_DEFAULTS, configure_environment

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """None of the defaults set; each restored to what it was after the test."""
    for name in OFFLINE_DEFAULTS:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return monkeypatch


def test_torchs_threads_are_set_to_sleep_when_idle(clean_environment: pytest.MonkeyPatch) -> None:
    configure_environment()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


def test_the_users_own_wait_policy_is_kept(clean_environment: pytest.MonkeyPatch) -> None:
    clean_environment.setenv("OMP_WAIT_POLICY", "ACTIVE")
    configure_environment()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_torch_loaded_after_the_entry_points_setup_never_spins_its_idle_threads() -> None:
    """OpenMP reads the policy once, when torch loads it: the setup must come first, and does.

    torch's OpenMP (libgomp) prints its settings with ``OMP_DISPLAY_ENV=VERBOSE``;
    ``GOMP_SPINCOUNT`` is how long an idle thread spins before it sleeps: 300000 by default,
    which on two busy cores let the idle threads of one LangGraph worker starve the working one
    (one answer took 0.6-30 s, against 0.9-1.5 s), and 0 once the policy is passive.
    """
    env = {name: value for name, value in os.environ.items() if name != "OMP_WAIT_POLICY"}
    env["OMP_DISPLAY_ENV"] = "VERBOSE"
    script = (
        "from crag.app.environment import configure_environment\n"
        "configure_environment()\n"
        "import torch\n"
        "torch.ones(2, 2) @ torch.ones(2, 2)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    if "GOMP_SPINCOUNT" not in result.stderr:
        pytest.skip("this torch is not built with GNU OpenMP (libgomp)")
    assert "GOMP_SPINCOUNT = '0'" in result.stderr, result.stderr
