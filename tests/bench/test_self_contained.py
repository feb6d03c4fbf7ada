"""A clone of the repository needs nothing beside it: data it reads ships inside it."""

from __future__ import annotations

import json
import os
import re
import shutil
import tomllib
from pathlib import Path

from crag_bench import fanoutqa
from tests.fresh_python import run_python

ROOT = Path(__file__).resolve().parents[2]
SKIPPED_DIRS = {
    ".git",
    ".venv",
    ".crag",
    ".langgraph_api",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".typecheck",
    "build",
    "dist",
}
OUTSIDE_DIR = "shared"
"""The folder beside the repository that development machines have and clones do not."""
CODE_SUFFIXES = {".py", ".sh", ".toml", ".cfg", ".ini", ".json", ".yml", ".yaml"}
# A path component named "shared": "../shared", "/shared/", or the quoted name joined to a path.
OUTSIDE_PATH = re.compile(r"(?:\.\.[/\\]|[/\\]|[\"'])shared(?:[\"'/\\]|$)", re.MULTILINE)


def project_code_files() -> list[Path]:
    """Python, shell, Makefile, toml and config files of the repository (no caches, no venv)."""
    found: list[Path] = []
    for directory, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
        for name in files:
            path = Path(directory) / name
            if path.suffix in CODE_SUFFIXES or name == "Makefile" or is_shell_script(path):
                found.append(path)
    return found


def is_shell_script(path: Path) -> bool:
    if path.suffix:
        return False
    try:
        with path.open("rb") as handle:
            first = handle.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"sh" in first


def test_the_split_ships_inside_the_evaluation_package() -> None:
    package = Path(fanoutqa.__file__).resolve().parent
    assert fanoutqa.DEFAULT_SPLIT.is_relative_to(package)
    assert fanoutqa.DEFAULT_SPLIT.is_file()
    split = fanoutqa.load_split()
    assert len(split["train"]) == 186 and len(split["dev"]) == 62
    assert not set(split["train"]) & set(split["dev"])
    readme = (package / "data" / "README.md").read_text(encoding="utf-8")
    assert "CC BY-SA 4.0" in readme and "held out" in readme


def test_the_research_wheel_carries_the_split() -> None:
    config = tomllib.loads((ROOT / "bench" / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = config["tool"]["setuptools"]
    assert "crag_bench" in setuptools["packages"]
    patterns = setuptools["package-data"]["crag_bench"]
    package = ROOT / "bench" / "crag_bench"
    shipped = {path for pattern in patterns for path in package.glob(pattern)}
    assert fanoutqa.DEFAULT_SPLIT in shipped


def test_a_copy_with_nothing_beside_it_finds_the_split(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    shutil.copytree(
        ROOT / "bench" / "crag_bench",
        clone / "crag_bench",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    assert not (tmp_path / OUTSIDE_DIR).exists()
    script = (
        "import json; from crag_bench import fanoutqa; split = fanoutqa.load_split(); "
        "print(json.dumps([fanoutqa.__file__, {k: len(v) for k, v in split.items()}]))"
    )
    env = {**os.environ, "PYTHONPATH": str(clone)}
    module_file, sizes = json.loads(run_python(script, cwd=clone, env=env, timeout=60))
    assert Path(module_file).resolve().is_relative_to(clone.resolve())
    assert sizes == {"train": 186, "dev": 62}


def test_no_project_file_reaches_for_a_shared_directory() -> None:
    files = project_code_files()
    names = {path.relative_to(ROOT).as_posix() for path in files}
    assert {"Makefile", "pyproject.toml", "bench/crag_bench/fanoutqa.py", ".ci/run"} <= names
    offending = []
    for path in files:
        if path == Path(__file__).resolve():
            continue  # this file names the directory in order to look for it
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in OUTSIDE_PATH.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            offending.append(f"{path.relative_to(ROOT)}:{line}")
    assert not offending, f"paths to a 'shared' directory: {offending}"


def test_the_guard_recognises_such_paths() -> None:
    name = OUTSIDE_DIR
    for text in (
        f"Path(__file__).parents[1].parent / '{name}' / 'eval'",
        f'open("../{name}/eval/split.json")',
        f"cat ../{name}/eval/x.json",
        f'ROOT / "{name}"',
    ):
        assert OUTSIDE_PATH.search(text), text
    for text in ("the shared embedder", "as _shared", "chromadb.api.shared_system_client"):
        assert not OUTSIDE_PATH.search(text), text
