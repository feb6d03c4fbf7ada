"""List the import edges between crag's folders, and the ones that go upward or sideways.

Every ``import`` and ``from ... import`` in the project's packages counts, wherever it is
written (module level, inside a function, under ``if TYPE_CHECKING``), as ``lint-imports``
counts them. A *unit* is an entry of the layers contract in ``pyproject.toml``
(``[tool.importlinter]``: a folder's package such as ``crag.nodes``), or the root package for a
module no entry covers. A root package's folder is the one ``[tool.setuptools.package-dir]``
names (``crag.graph`` is ``graph/``), else ``bench/<name>`` or ``<name>``. The script prints
one line per pair of units with the places the imports are written, then the imports that go
from a lower layer to a higher one, those between independent units of one layer (written
``a | b`` in the contract), and the modules no layer covers.

Usage: .venv/bin/python scripts/import_edges.py [--check] [--root DIR]
    --check   print only the problems; exit 1 if an import goes upward or sideways or a module
              is in no layer (``lint-imports`` checks the same contract; this needs no package)
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Edge:
    """One import statement: the importing module, the imported one, where it is written."""

    source: str
    target: str
    where: str


@dataclass(frozen=True)
class Contract:
    """The root packages, the layers (top first, each a list of entries), the folders."""

    roots: list[str]
    layers: list[list[str]]
    independent: set[int]
    """Indexes of the layers whose entries may not import each other (``a | b``)."""
    folders: dict[str, str]
    """``[tool.setuptools.package-dir]``: package name -> folder."""


def read_contract(pyproject: Path) -> Contract:
    """The import-linter layers contract and the package folders of ``pyproject``."""
    config = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {})
    linter = config.get("importlinter", {})
    layers: list[list[str]] = []
    independent: set[int] = set()
    for contract in linter.get("contracts", []):
        if contract.get("type") == "layers":
            for layer in contract["layers"]:
                separator = ":" if ":" in layer else "|"
                if separator == "|" and "|" in layer:
                    independent.add(len(layers))
                layers.append([entry.strip() for entry in layer.split(separator)])
    folders = dict(config.get("setuptools", {}).get("package-dir", {}))
    return Contract(list(linter.get("root_packages", [])), layers, independent, folders)


def package_folder(root: Path, package: str, folders: dict[str, str]) -> Path:
    """The folder holding ``package``: its package-dir entry, else bench/ or the root's."""
    if package in folders:
        return root / folders[package]
    nested = root / "bench" / package.replace(".", "/")
    return nested if nested.is_dir() else root / package.replace(".", "/")


def project_modules(root: Path, packages: list[str], folders: dict[str, str]) -> dict[str, Path]:
    """Every module of ``packages`` by dotted name (a package is its ``__init__``)."""
    modules: dict[str, Path] = {}
    for package in packages:
        folder = package_folder(root, package, folders)
        for path in sorted(folder.rglob("*.py")):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module ``name`` is or lies in (``crag.core.state.State``: its module)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _imported_names(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The dotted names an import statement written in ``package`` may bring in."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: ``from . import x`` in package ``a.b`` is ``a.b.x``
        parts = package.split(".")
        anchor = parts[: len(parts) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    return [f"{base}.{alias.name}" for alias in node.names]


def module_edges(modules: dict[str, Path], root: Path) -> list[Edge]:
    """Every import of one project module by another, in file and line order."""
    edges: list[Edge] = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        where_file = path.relative_to(root).as_posix()
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for name in _imported_names(node, package):
                target = _resolve(name, modules)
                if target is not None and target != module:
                    edges.append(Edge(module, target, f"{where_file}:{node.lineno}"))
    return sorted(set(edges), key=_place)


def circles(edges: list[Edge]) -> list[list[str]]:
    """The import circles: sets of two or more modules each reachable from the others.

    Tarjan's strongly connected components over the module edges, each sorted, in order.
    """
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in edges:
        graph[edge.source].add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component: list[str] = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def _place(edge: Edge) -> tuple[str, int, str]:
    """Sort key: file, then line number (as a number), then the imported module."""
    file, _, line = edge.where.rpartition(":")
    return file, int(line), edge.target


def unit_of(module: str, entries: list[str]) -> str | None:
    """The contract entry covering ``module`` (the longest matching one), if any."""
    matches = [e for e in entries if module == e or module.startswith(e + ".")]
    return max(matches, key=len) if matches else None


def classify(
    edges: list[Edge],
    unit: Callable[[str], str],
    rank: dict[str, int],
    alone: set[str],
) -> tuple[dict[tuple[str, str], list[str]], list[Edge], list[Edge]]:
    """The places of the imports between each pair of units, the upward and sideways imports.

    ``rank`` is each unit's layer (higher is above); ``alone`` holds the units of the layers
    whose entries may not import each other.
    """
    between: dict[tuple[str, str], list[str]] = defaultdict(list)
    upward: list[Edge] = []
    sideways: list[Edge] = []
    for edge in edges:
        source, target = unit(edge.source), unit(edge.target)
        if source != target:
            between[source, target].append(edge.where)
        if rank.get(source, 0) and rank.get(target, 0) > rank[source]:
            upward.append(edge)
        elif source != target and source in alone and rank.get(target) == rank[source]:
            sideways.append(edge)
    return between, upward, sideways


def main(argv: list[str] | None = None) -> int:
    """Print the edges between units (or, with ``--check``, only the problems)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="print only the problems")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this)")
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    contract = read_contract(root / "pyproject.toml")
    if not contract.roots:
        parser.error("pyproject.toml has no [tool.importlinter] root_packages")
    layers = contract.layers
    entries = [entry for layer in layers for entry in layer]
    rank = {entry: len(layers) - index for index, layer in enumerate(layers) for entry in layer}
    alone = {entry for i in contract.independent for entry in layers[i]}
    modules = project_modules(root, contract.roots, contract.folders)
    edges = module_edges(modules, root)

    def unit(module: str) -> str:
        return unit_of(module, entries) or unit_of(module, contract.roots) or module

    between, upward, sideways = classify(edges, unit, rank, alone)
    # A package's own __init__ holding no import needs no layer.
    importing = {edge.source for edge in edges}
    unassigned = [
        m
        for m in modules
        if unit_of(m, entries) is None
        and (modules[m].name != "__init__.py" or m in importing or not layers)
    ]
    out = sys.stdout
    if not args.check:
        for (source, target), places in sorted(between.items()):
            levels = f"L{rank.get(source, '?')} -> L{rank.get(target, '?')}"
            out.write(f"{source} -> {target}  [{levels}]  {', '.join(places)}\n")
        out.write(f"{len(between)} edges between {len({u for p in between for u in p})} units\n")
    for edge in upward:
        out.write(
            f"upward: {edge.source} (L{rank[unit(edge.source)]}) imports {edge.target} "
            f"(L{rank[unit(edge.target)]}) at {edge.where}\n"
        )
    for edge in sideways:
        out.write(f"sideways: {edge.source} imports {edge.target} at {edge.where}\n")
    for module in unassigned:
        out.write(f"in no layer: {module} ({modules[module].relative_to(root)})\n")
    if args.check and not upward and not sideways and not unassigned:
        out.write(f"{len(edges)} imports between {len(modules)} modules, none upward or sideways\n")
    return 1 if upward or sideways or unassigned else 0


if __name__ == "__main__":
    sys.exit(main())
