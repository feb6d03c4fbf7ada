"""torch's OpenMP threads wait passively in crag's processes (see :mod:`crag.generator`).

libgomp reads ``OMP_WAIT_POLICY`` once, when torch loads, so what matters is its value at that
moment: each probe records it as ``torch`` is first imported, while the CLI, the served graphs
and the API are imported and a model is built the way ``crag ask`` builds one.
"""

from __future__ import annotations

import os
import subprocess
import sys

_PROBE = """
import importlib.abc, os, sys
seen = []
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.append(os.environ.get("OMP_WAIT_POLICY"))
        return None
sys.meta_path.insert(0, Watch())
import crag.app.cli.commands, crag.app.served_graphs, crag.app.api
import torch
print(seen[0], os.environ.get("OMP_WAIT_POLICY"))
"""


def _probe(env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True
    )
    return result.stdout.strip().splitlines()[-1]


def test_entry_points_set_passive_waiting_before_torch_loads() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    assert _probe(env) == "PASSIVE PASSIVE"


def test_a_wait_policy_the_user_set_is_kept() -> None:
    env = {**os.environ, "OMP_WAIT_POLICY": "ACTIVE"}
    assert _probe(env) == "ACTIVE ACTIVE"
