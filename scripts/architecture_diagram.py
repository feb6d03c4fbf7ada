"""Write the graph's diagram in docs/architecture.md from the compiled graph, or check it.

The diagram is drawn from the ``crag`` graph as the server compiles it
(:mod:`crag.app.graphs`, what ``crag graph`` prints: its nodes and edges, conditional ones
dotted), with a label on each conditional edge (:data:`LABELS`), so the page cannot describe a
graph that no longer exists. It replaces what lies between the two marker lines of the page.

Usage: .venv/bin/python scripts/architecture_diagram.py [--check]
    --check   write nothing; exit 1 when the page's diagram is not the compiled graph's
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from crag.app.graphs import graph

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- the graph: written by scripts/architecture_diagram.py from the compiled graph -->"
END = "<!-- end of the graph -->"

LABELS: dict[tuple[str, str], str] = {
    ("__start__", "retrieve"): "single question",
    ("__start__", "contextualize"): "chat messages / thread",
    ("decide_action", "refine"): "Correct / Ambiguous",
    ("decide_action", "rewrite_query"): "Incorrect / Ambiguous",
    ("decide_answer", "generate"): "knowledge found",
    ("decide_answer", "abstain"): "no knowledge",
}
"""What each conditional edge means (the routers' outcomes)."""

_NAMES = {"__start__": "START([start])", "__end__": "END([end])"}


def _node(name: str, seen: set[str]) -> str:
    """A node as mermaid names it: start and end drawn round the first time they appear."""
    if name in _NAMES and name not in seen:
        seen.add(name)
        return _NAMES[name]
    return name.strip("_").upper() if name in _NAMES else name


def render() -> str:
    """The diagram, a mermaid block, from the compiled ``crag`` graph."""
    drawn = graph.get_graph()
    order = list(drawn.nodes)
    edges = sorted(
        drawn.edges, key=lambda e: (order.index(e.source), order.index(e.target), e.conditional)
    )
    seen: set[str] = set()
    lines = ["```mermaid", "graph TD;"]
    for edge in edges:
        arrow = "-.->" if edge.conditional else "-->"
        label = LABELS.get((edge.source, edge.target)) if edge.conditional else None
        middle = f"{arrow}|{label}|" if label else arrow
        lines.append(f"    {_node(edge.source, seen)} {middle} {_node(edge.target, seen)}")
    lines.append("```")
    return "\n".join(lines)


def with_diagram(page: str, diagram: str) -> str:
    """``page`` with what lies between the markers replaced by ``diagram``."""
    head, begin, rest = page.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise SystemExit(f"{TARGET} lacks the marker lines {BEGIN!r} and {END!r}")
    return f"{head}{BEGIN}\n{diagram}\n{END}{tail}"


def main(argv: Sequence[str] | None = None) -> int:
    """Write the diagram into the page, or (``--check``) say whether it is current."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    page = TARGET.read_text(encoding="utf-8")
    current = with_diagram(page, render())
    if args.check:
        if current != page:
            sys.stderr.write(
                f"{TARGET.relative_to(ROOT)}'s diagram is not the compiled graph's: run "
                ".venv/bin/python scripts/architecture_diagram.py\n"
            )
            return 1
        return 0
    TARGET.write_text(current, encoding="utf-8")
    sys.stdout.write(f"wrote the diagram of {TARGET.relative_to(ROOT)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
