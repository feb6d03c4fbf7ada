"""A cold ``crag ask`` imports only what the question needs: no BM25, no HTML parser.

Searching by words (bm25s, which brings SciPy's sparse matrices) and reading web pages
(BeautifulSoup) are imported when first used, not when the graphs are: a question answered from
the store by meaning, the default, never pays for them.
"""

from __future__ import annotations

import textwrap

from tests.fresh_python import run_python


def _modules_after(code: str) -> list[str]:
    """Which of the lazily imported packages are loaded after running ``code`` afresh."""
    script = textwrap.dedent(code) + textwrap.dedent(
        """
        import sys
        lazy = ("bm25s", "bs4")
        print(sorted(name for name in lazy if name in sys.modules))
        """
    )
    return run_python(script).split()


def test_the_cli_and_the_graphs_import_neither_bm25_nor_an_html_parser() -> None:
    assert _modules_after(
        """
        import crag.app.cli.commands
        from crag.app.graphs import graph, rag_graph
        """
    ) == ["[]"]


def test_each_is_imported_when_first_used() -> None:
    assert _modules_after(
        """
        from crag.vectorstore.lexical import build_index
        from crag.websearch.pages import html_text
        index = build_index(["a", "b"], ["the Mona Lisa", "a river in spring"])
        assert index.search("Mona Lisa", 1)[0][0] == "a", index.search("Mona Lisa", 1)
        assert html_text("<title>T</title><p>One paragraph of text here.</p>")[0] == "T"
        """
    ) == ["['bm25s',", "'bs4']"]
