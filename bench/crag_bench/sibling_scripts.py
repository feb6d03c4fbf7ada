"""Import one of ``bench/scripts/`` from another: the scripts are files, not a package."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def bench_script(name: str) -> ModuleType:
    """``bench/scripts/NAME.py``, imported from its file.

    Raises:
        RuntimeError: There is no such script.
    """
    path = SCRIPTS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise RuntimeError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
