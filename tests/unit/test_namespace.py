"""One import namespace: the product is ``crag.*``, the research ``crag_bench``, nothing else.

The repository keeps its folders at the top (``app/``, ``graph/``, ``nodes/``, ...) and installs
each as a subpackage of ``crag`` (``[tool.setuptools.package-dir]``). These tests check that the
code imports them only by those names, and that the product never loads the research package.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
    "tool"
]["setuptools"]["package-dir"]
"""``crag.<name>`` -> its folder."""
BARE_NAMES = {folder.split("/")[0] for folder in FOLDERS.values()} | {"evaluation"}
"""Names the folders would have as top-level packages: never imported as such."""


def _python_files() -> list[Path]:
    folders = [*FOLDERS.values(), "bench", "tests", "scripts"]
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def _top_level_imports(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name.split(".")[0], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.module.split(".")[0], node.lineno))
    return found


def test_every_folder_is_a_crag_subpackage() -> None:
    assert set(FOLDERS) == {f"crag.{folder}" for folder in FOLDERS.values()}
    assert {"crag.app", "crag.core", "crag.graph", "crag.nodes", "crag.prompts"} <= set(FOLDERS)


def test_no_code_imports_a_folder_by_its_bare_name() -> None:
    offending = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in _python_files()
        for name, line in _top_level_imports(path)
        if name in BARE_NAMES
    ]
    assert not offending, offending


def test_import_crag_and_every_product_module_without_the_research_package() -> None:
    """``import crag`` works; importing all of the product loads no ``crag_bench`` module."""
    spec = importlib.util.spec_from_file_location("import_edges", ROOT / "scripts/import_edges.py")
    assert spec is not None and spec.loader is not None
    import_edges = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = import_edges  # its dataclasses look their module up there
    spec.loader.exec_module(import_edges)
    modules = sorted(import_edges.project_modules(ROOT, sorted(FOLDERS), FOLDERS))
    script = (
        "import importlib, json, sys\n"
        "import crag\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "from crag.app.cli.commands import build_parser\n"
        "build_parser().parse_args(['ask', 'Who painted the Mona Lisa?'])\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('crag_bench', 'evaluation'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT / "tests",  # not the repository root: its folders are not on the path
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
    assert len(modules) > 100
