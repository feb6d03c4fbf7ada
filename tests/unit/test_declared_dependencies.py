"""Every third-party distribution the product imports is declared in a pyproject.toml.

A package that only arrives as another one's dependency can vanish from an install when that
other package changes, and crag then fails at import time on a machine set up from its own
declarations. This test reads the product's sources (the folders of ``[tool.setuptools]
package-dir``: ``app/``, ``core/``, ``graph/``, ... never ``tests/``, ``bench/scripts/`` or
``scripts/``) and the research package ``bench/crag_bench`` with :mod:`ast`, maps each imported
module to the installed distribution that provides it
(:func:`importlib.metadata.packages_distributions`, and the distribution's own file list where
several share a top-level name, as ``langgraph`` and ``langgraph.checkpoint.postgres`` do), and
fails naming every distribution that is imported but not declared where the import needs it.

Where a distribution may be declared, decided by where the import is:

* an import at a module's top level runs whenever the module is imported: it needs a runtime
  dependency (``[project] dependencies``), except in the server-only modules (``app/web/``, only
  imported by the LangGraph server and the commands that manage its accounts), where the
  ``server`` extra also counts;
* an import inside a function or under ``if TYPE_CHECKING:`` runs only when that feature is
  used: any extra but ``dev`` also counts (``postgres`` for psycopg when the threads database is
  a ``postgresql://`` URL, ``tavily`` for the Tavily search provider, ``server`` for Aegra's
  FastAPI app).

``dev`` never counts: what the tests need must not be what the product needs. The research
package also counts what it declares of crag (``crag[server]``) and its own extras likewise.
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import sys
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FIRST_PARTY = frozenset({"crag", "crag_bench", "tests"})

SERVER_ONLY = ("app/web/",)
"""Folders whose modules only the server (and its account commands) import."""

NEVER_COUNTS = frozenset({"dev"})
"""Extras that never satisfy an import of the product: the tests' and tools' packages."""

NOT_INSTALLED_HERE = {"tavily": "tavily-python"}
"""Optional packages this environment does not install: their import name's distribution."""


@dataclass(frozen=True)
class Imported:
    """One imported module: where, and whether it runs only when a feature is used."""

    module: str
    path: str
    lazy: bool


@dataclass(frozen=True)
class Declared:
    """The distributions a pyproject.toml declares: runtime and per extra (normalised names)."""

    runtime: frozenset[str]
    extras: dict[str, frozenset[str]]

    def allowed(self, imported: Imported) -> frozenset[str]:
        """What may satisfy ``imported``, by the rules of the module docstring."""
        names = set(self.runtime)
        if imported.path.startswith(SERVER_ONLY):
            names |= self.extras.get("server", frozenset())
        if imported.lazy:
            for extra, members in self.extras.items():
                if extra not in NEVER_COUNTS:
                    names |= members
        return frozenset(names)


def normalise(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement(spec: str) -> tuple[str, list[str]]:
    """The name and extras of a requirement string (``crag[server]>=1`` -> crag, [server])."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?", spec)
    assert match, f"cannot read the requirement {spec!r}"
    extras = [e.strip() for e in (match.group(2) or "").split(",") if e.strip()]
    return normalise(match.group(1)), extras


def _names(specs: list[str], base: Declared | None) -> frozenset[str]:
    """The distributions ``specs`` name; a requirement of crag itself adds what crag declares."""
    names: set[str] = set()
    for spec in specs:
        name, extras = _requirement(spec)
        names.add(name)
        if name == "crag" and base is not None:
            names |= base.runtime
            for extra in extras:
                names |= base.extras[extra]
    return frozenset(names)


def declared(pyproject: Path, base: Declared | None = None) -> Declared:
    """What ``pyproject`` declares (``base``: crag's, for a package that requires crag)."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    extras = {
        extra: _names(specs, base)
        for extra, specs in project.get("optional-dependencies", {}).items()
    }
    return Declared(_names(project.get("dependencies", []), base), extras)


class _Imports(ast.NodeVisitor):
    """Collects the absolute imports of one module, marking those that run only on use."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.depth = 0
        self.found: list[Imported] = []

    def _nested(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = _nested

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", "")
        if name == "TYPE_CHECKING":
            self.depth += 1
            for child in node.body:
                self.visit(child)
            self.depth -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append(Imported(alias.name, self.path, self.depth > 0))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self.found.append(Imported(node.module, self.path, self.depth > 0))


def imports_of(folders: list[str]) -> Iterator[Imported]:
    """The third-party imports of every Python file under ``folders`` (relative to ROOT)."""
    for folder in folders:
        for file in sorted((ROOT / folder).rglob("*.py")):
            path = file.relative_to(ROOT).as_posix()
            visitor = _Imports(path)
            visitor.visit(ast.parse(file.read_text(encoding="utf-8"), filename=path))
            for imported in visitor.found:
                top = imported.module.partition(".")[0]
                if top not in sys.stdlib_module_names and top not in FIRST_PARTY:
                    yield imported


@cache
def _top_level_distributions() -> Mapping[str, list[str]]:
    """:func:`importlib.metadata.packages_distributions`, read once (it scans every install)."""
    return metadata.packages_distributions()


@cache
def _modules_of(distribution: str) -> frozenset[str]:
    """The dotted module and package names a distribution's files provide."""
    modules = set()
    for file in metadata.distribution(distribution).files or []:
        parts = list(file.parts)
        if parts and parts[-1].endswith(".py"):
            parts[-1] = parts[-1].removesuffix(".py")
            if parts[-1] == "__init__":
                parts.pop()
            modules.add(".".join(parts))
    return frozenset(modules)


def distribution_of(module: str) -> str | None:
    """The normalised distribution providing ``module``, or ``None`` if none installed does."""
    top = module.partition(".")[0]
    candidates = _top_level_distributions().get(top, [])
    if not candidates:
        known = NOT_INSTALLED_HERE.get(top)
        return normalise(known) if known else None
    if len(set(candidates)) == 1:
        return normalise(candidates[0])
    prefixes = [".".join(module.split(".")[:n]) for n in range(module.count(".") + 1, 0, -1)]
    for prefix in prefixes:  # longest first: langgraph.checkpoint.postgres before langgraph
        owners = [c for c in candidates if prefix in _modules_of(c)]
        if owners:
            return normalise(owners[0])
    return normalise(candidates[0])


def undeclared(folders: list[str], rules: Declared) -> dict[str, list[str]]:
    """Each distribution imported but not declared where needed, with the places importing it."""
    missing: dict[str, list[str]] = {}
    for imported in imports_of(folders):
        dist = distribution_of(imported.module)
        where = f"{imported.path} ({imported.module})"
        if dist is None:
            missing.setdefault(f"<no distribution provides {imported.module}>", []).append(where)
        elif dist not in rules.allowed(imported):
            missing.setdefault(dist, []).append(where)
    return missing


def _report(missing: dict[str, list[str]], pyproject: str) -> str:
    lines = [f"imported but not declared in {pyproject} where the import needs it:"]
    lines += [
        f"  {dist}: {', '.join(sorted(set(places)))}" for dist, places in sorted(missing.items())
    ]
    return "\n".join(lines)


def crag_declared() -> Declared:
    return declared(ROOT / "pyproject.toml")


def product_folders() -> list[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return sorted(set(pyproject["tool"]["setuptools"]["package-dir"].values()))


def _assert_the_check_is_sound(folders: list[str], rules: Declared) -> None:
    """The walk covers the product's folders only, and the mapping and the rules hold."""
    expected = {"app", "core", "generator", "nodes", "graph", "evaluator", "websearch"}
    assert expected | {"vectorstore", "documents", "knowledge", "prompts"} <= set(folders)
    assert not {"tests", "bench", "scripts"} & set(folders)
    assert distribution_of("langgraph.graph") == "langgraph"
    assert distribution_of("langgraph.checkpoint.postgres.aio") == "langgraph-checkpoint-postgres"
    assert distribution_of("bs4") == "beautifulsoup4"
    assert distribution_of("tavily") == "tavily-python"
    assert "pytest" in rules.extras["dev"] and "pytest" not in rules.runtime
    for lazy in (False, True):  # dev never satisfies the product, lazily or not
        assert "pytest" not in rules.allowed(Imported("pytest", "core/x.py", lazy))


def test_every_distribution_crag_imports_is_declared() -> None:
    folders, rules = product_folders(), crag_declared()
    _assert_the_check_is_sound(folders, rules)
    missing = undeclared(folders, rules)
    assert not missing, _report(missing, "pyproject.toml")


def test_every_distribution_the_research_package_imports_is_declared() -> None:
    rules = declared(ROOT / "bench" / "pyproject.toml", base=crag_declared())
    missing = undeclared(["bench/crag_bench"], rules)
    assert not missing, _report(missing, "bench/pyproject.toml")
