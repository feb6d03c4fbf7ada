"""The product's wheel: everything under ``crag/``, no research code or data, no other name."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The wheel built from a copy of what the product's pyproject.toml packages."""
    source = tmp_path_factory.mktemp("source")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for folder in config["tool"]["setuptools"]["package-dir"].values():
        shutil.copytree(
            ROOT / folder,
            source / folder,
            ignore=shutil.ignore_patterns("__pycache__", "node_modules"),
        )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*command, "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("crag-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_installs_crag_and_nothing_beside_it(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    assert {name.split("/")[0] for name in names} == {"crag", "crag-0.1.0.dist-info"}
    for expected in (
        "crag/graph/builder.py",
        "crag/core/state.py",
        "crag/nodes/retrieve.py",
        "crag/documents/formats/pdf.py",
        "crag/evaluator/weights/README.md",
    ):
        assert expected in names


def test_the_wheel_holds_no_research_code_or_data(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    assert not [n for n in names if "crag_bench" in n or "evaluation" in n.split("/")]
    assert not [n for n in names if n.endswith((".jsonl", "fanoutqa-split.json"))]
    sources = [wheel.read(n).decode("utf-8") for n in names if n.endswith(".py")]
    imports = re.compile(r"^\s*(from|import)\s+crag_bench\b", re.MULTILINE)
    assert not [text for text in sources if imports.search(text)]
    entry_points = wheel.read("crag-0.1.0.dist-info/entry_points.txt").decode("utf-8")
    assert "crag = crag.app.cli.console:main" in entry_points
    assert "crag-bench" not in entry_points


def test_the_wheel_ships_the_built_chat_page_and_not_its_sources(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    for built in ("index.html", "app.js", "app.css", "THIRD_PARTY_LICENSES.txt"):
        assert f"crag/app/web/dist/{built}" in names
    assert not [n for n in names if "node_modules" in n or n.startswith("crag/app/web/src/")]
