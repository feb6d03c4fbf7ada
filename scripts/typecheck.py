"""Type-check crag with mypy through a tree of links that gives each folder its import name.

crag installs each top-level folder as a subpackage of ``crag`` (``graph/`` as ``crag.graph``,
``[tool.setuptools.package-dir]`` in ``pyproject.toml``). mypy finds modules by their folders
only, so this script writes ``.typecheck/crag/<folder>``, a link to each folder, and then runs
mypy with the configuration of ``pyproject.toml`` (whose ``mypy_path`` names ``.typecheck``).
Arguments are passed on to mypy.

Usage: .venv/bin/python scripts/typecheck.py [MYPY_ARGS...]
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / ".typecheck" / "crag"


def package_folders(pyproject: Path) -> dict[str, str]:
    """``{subpackage name under crag: folder}`` from the package-dir table."""
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    table: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    return {name.removeprefix("crag."): folder for name, folder in table.items()}


def write_tree() -> None:
    """(Re)write the links of :data:`TREE`, one per folder; remove stale ones."""
    TREE.mkdir(parents=True, exist_ok=True)
    folders = package_folders(ROOT / "pyproject.toml")
    for stale in TREE.iterdir():
        if stale.name not in folders:
            stale.unlink()
    for name, folder in folders.items():
        link = TREE / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(Path("..", "..", folder), target_is_directory=True)


def main() -> int:
    """Write the tree and replace this process with mypy."""
    write_tree()
    os.chdir(ROOT)
    mypy = Path(sys.executable).with_name("mypy")
    os.execv(mypy, [str(mypy), *sys.argv[1:]])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
