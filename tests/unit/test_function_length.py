"""No function of the source packages is longer than 60 lines.

A function's length is all its lines from ``def`` to its last line, its docstring included:
a function that needs pages of documentation for its arguments takes too many of them, and a
documented dataclass of options (e.g.
:class:`crag_bench.evaluator_training.options.TrainingOptions`) documents each option once,
where it is declared. A parser builder is no exception: it adds each command, or each group of
options, with its own helper (``crag``'s ``build_parser``, ``crag-bench eval``'s
``add_eval_command``). The exemptions, :data:`ARGPARSE_BUILDERS` and :data:`NOT_YET_SPLIT`
(both empty now), may only shrink: a listed function that is short now (or gone) fails the
test until it is taken off.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

MAX_LINES = 60

ARGPARSE_BUILDERS: frozenset[str] = frozenset()
"""Functions that only add commands and options to ``argparse`` parsers (none now: split)."""

NOT_YET_SPLIT: frozenset[str] = frozenset()
"""Long functions not split yet (none now); remove an entry once it is split."""


def _source_files() -> list[Path]:
    """The Python files of the product's folders, the research package and the scripts."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    top_level = set(pyproject["tool"]["setuptools"]["package-dir"].values())
    folders = sorted(top_level | {"scripts", "bench"})
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def _functions(
    node: ast.AST, prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function under ``node`` with its qualified name (``Class.method``, ``f.inner``)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + child.name, child
            yield from _functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def function_length(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the function's end, its docstring included."""
    end = function.end_lineno or function.lineno
    return end - function.lineno + 1


def _lengths() -> dict[str, int]:
    """``path:qualified.name`` -> length, for every function of the source files."""
    lengths: dict[str, int] = {}
    for path in _source_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        relative = path.relative_to(ROOT).as_posix()
        for name, function in _functions(tree):
            lengths[f"{relative}:{name}"] = function_length(function)
    return lengths


def test_the_source_packages_are_found() -> None:
    files = {path.relative_to(ROOT).as_posix() for path in _source_files()}
    assert "app/cli/commands.py" in files
    assert "bench/crag_bench/evaluator_training/trainer.py" in files
    assert "core/state.py" in files
    assert "scripts/import_edges.py" in files


def test_function_length_counts_the_docstring() -> None:
    source = 'def f(x):\n    """Doc.\n\n    More.\n    """\n    y = x\n    return y\n'
    function = ast.parse(source).body[0]
    assert isinstance(function, ast.FunctionDef)
    assert function_length(function) == 7


def test_no_function_is_longer_than_the_limit() -> None:
    exempt = ARGPARSE_BUILDERS | NOT_YET_SPLIT
    too_long = {
        name: length
        for name, length in _lengths().items()
        if length > MAX_LINES and name not in exempt
    }
    assert not too_long, (
        f"functions over {MAX_LINES} lines (docstring included); split them into named "
        f"helpers: {too_long}"
    )


def test_every_exemption_is_still_needed() -> None:
    lengths = _lengths()
    stale = sorted(
        name for name in ARGPARSE_BUILDERS | NOT_YET_SPLIT if lengths.get(name, 0) <= MAX_LINES
    )
    assert not stale, f"no longer over {MAX_LINES} lines (or gone): take them off the list: {stale}"
