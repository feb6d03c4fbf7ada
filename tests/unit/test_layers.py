"""The import layers: no module imports from a layer above its own (pyproject.toml's contract).

``lint-imports`` (run by ``make test``) checks the contract; these tests check it again with
``scripts/import_edges.py`` (no package needed), check that every module is in a layer, and
check that the graph modules import no app module while the served graphs are the app's, built
with its default components and no model loaded.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from tests.fresh_python import run_python

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def import_edges() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_edges", ROOT / "scripts/import_edges.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_no_module_imports_from_a_layer_above(
    import_edges: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    code = import_edges.main(["--check"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "none upward or sideways" in out


def test_the_listing_shows_the_edges_between_layers(
    import_edges: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert import_edges.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("crag.nodes -> crag.core  [L6 -> L1]") for line in lines), lines
    assert any(line.startswith("crag.app -> crag.graph  [L8 -> L7]") for line in lines), lines
    assert not any(line.startswith("crag.nodes -> crag.app") for line in lines)
    assert not any(line.startswith("crag.core -> ") for line in lines)  # the ground floor
    assert any(line.startswith("crag.settings -> crag.core  [L2 -> L1]") for line in lines)
    assert not any(line.startswith("crag.core -> crag.net") for line in lines)  # one floor


def test_the_check_finds_an_upward_import_and_a_module_in_no_layer(
    import_edges: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [tool.importlinter]
            root_packages = ["top", "low"]

            [[tool.importlinter.contracts]]
            name = "layers"
            type = "layers"
            layers = ["top", "low.a : low.b"]
            """
        ),
        encoding="utf-8",
    )
    for package in ("top", "low"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "top/cli.py").write_text("from low.a import x\n", encoding="utf-8")
    (tmp_path / "low/a.py").write_text(
        "def f():\n    from top import cli\n    from . import b\n", encoding="utf-8"
    )
    (tmp_path / "low/b.py").write_text("", encoding="utf-8")
    (tmp_path / "low/c.py").write_text("", encoding="utf-8")

    assert import_edges.main(["--check", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "upward: low.a (L1) imports top.cli (L2) at low/a.py:2" in out
    assert "in no layer: low.c (low/c.py)" in out
    assert "low.b" not in out  # a sibling of the same layer may be imported


def test_the_graph_modules_import_no_app_module() -> None:
    """The graph builders take their components: nothing below the app names the app."""
    script = textwrap.dedent(
        """
        import importlib, sys
        for name in ("crag.graph.builder", "crag.graph.baselines", "crag.graph.ingest_graph"):
            importlib.import_module(name)
        print(sorted(m for m in sys.modules if m == "crag.app" or m.startswith("crag.app.")))
        """
    )
    assert run_python(script).split() == ["[]"]


def test_served_graphs_are_the_apps_built_with_its_components_and_load_no_model() -> None:
    """langgraph.json serves crag.app.served_graphs (crag.app.graphs' graphs, each run marked as
    served): DefaultComponents, no model loaded at import."""
    served = json.loads((ROOT / "langgraph.json").read_text(encoding="utf-8"))["graphs"]
    paths = {name: spec["path"] for name, spec in served.items()}
    assert paths == {
        "crag": "crag.app.served_graphs:graph",
        "ingest": "crag.app.served_graphs:ingest_graph",
        "rag": "crag.app.served_graphs:rag_graph",
        "crag-tutorial": "crag.app.served_graphs:tutorial_graph",
    }
    script = textwrap.dedent(
        """
        import sys
        from crag.app import graphs, served_graphs
        heavy = ("torch", "transformers", "sentence_transformers", "llama_cpp", "onnxruntime")
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in heavy)
        components = graphs.components
        print(loaded, type(components).__module__, type(components).__name__)
        print(components._stores, components._evaluators)
        print(
            served_graphs.graph.name,
            served_graphs.ingest_graph.name,
            served_graphs.rag_graph.name,
            served_graphs.tutorial_graph.name,
        )
        print(served_graphs.graph.nodes["retrieve"] is graphs.graph.nodes["retrieve"])
        """
    )
    lines = run_python(script).splitlines()
    assert lines[0].split() == ["[]", "crag.app.wiring", "DefaultComponents"]
    assert lines[1] == "{} {}"  # no store opened, no evaluator loaded
    assert lines[2].split() == ["crag", "ingest", "rag", "tutorial"]
    assert lines[3] == "True"  # the same nodes, so one set of components


def test_no_module_imports_itself_back_through_others(import_edges: ModuleType) -> None:
    contract = import_edges.read_contract(ROOT / "pyproject.toml")
    modules = import_edges.project_modules(ROOT, contract.roots, contract.folders)
    found = import_edges.circles(import_edges.module_edges(modules, ROOT))
    assert not found, found


def test_the_circle_finder_finds_a_circle_of_three(import_edges: ModuleType) -> None:
    edge = import_edges.Edge
    edges = [
        edge("a", "b", "a:1"),
        edge("b", "c", "b:1"),
        edge("c", "a", "c:1"),
        edge("c", "d", ""),
    ]
    assert import_edges.circles(edges) == [["a", "b", "c"]]
