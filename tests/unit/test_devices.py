"""Where local models run: a CPU-only torch is known from its build file, not imported."""

from __future__ import annotations

import importlib.util
import textwrap
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

from crag.core import devices
from tests.fresh_python import run_python

CPU_BUILD = """
from typing import Optional
__version__ = '2.13.0+cpu'
cuda: Optional[str] = None
hip: Optional[str] = None
xpu: Optional[str] = None
"""


def fake_torch(monkeypatch: pytest.MonkeyPatch, folder: Path, version_text: str | None) -> None:
    folder.mkdir()
    if version_text is not None:
        (folder / "version.py").write_text(textwrap.dedent(version_text), encoding="utf-8")
    spec = ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: spec if name == "torch" else real(name, *a)
    )


def test_a_cpu_build_is_known_from_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_torch(monkeypatch, tmp_path / "torch", CPU_BUILD)
    assert not devices.torch_build_has_gpu()


@pytest.mark.parametrize(
    "version_text",
    [
        CPU_BUILD.replace("cuda: Optional[str] = None", "cuda: Optional[str] = '12.8'"),
        CPU_BUILD.replace("hip: Optional[str] = None", "hip: Optional[str] = '6.3.4'"),
        "__version__ = '9.0'\n",  # fields it does not know: ask torch
        None,  # no file to read: ask torch
    ],
)
def test_a_gpu_build_or_one_it_cannot_read_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version_text: str | None
) -> None:
    fake_torch(monkeypatch, tmp_path / "torch", version_text)
    assert devices.torch_build_has_gpu()


def test_this_machine_runs_on_the_cpu_without_importing_torch() -> None:
    script = (
        "import sys\nfrom crag.core.devices import default_device\n"
        "print(default_device(), 'torch' in sys.modules)"
    )
    assert run_python(script).split() == ["cpu", "False"]
