"""The README's quick start for your own documents, with the shipped models, as a user runs it.

``crag ingest --store STORE FOLDER`` on a folder holding a real PDF, DOCX and PPTX and a broken
file, then ``crag ask --store STORE QUESTION`` with a question only the PDF answers: the broken
file gets its one line, the others are ingested, and the answer is right and cites the PDF's
page. The real embedder, evaluator and generator run; the web search (asked only when the
evaluator finds no passage right) goes to a search server on 127.0.0.1 that finds nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from crag.app.cli.commands import main
from tests.document_factory import PAGES, QUESTION, SAMPLES, write_docx, write_pdf, write_pptx
from tests.websearch_server import WebsearchServer

pytestmark = pytest.mark.integration


def test_ingest_a_folder_then_ask_it_cites_the_pdf_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    write_pdf(docs / "report.pdf", PAGES, roman_front=2)
    write_docx(docs / "method.docx")
    write_pptx(docs / "review.pptx")
    shutil.copy(SAMPLES / "invalid.pdf", docs / "broken.pdf")
    store = str(tmp_path / "store")

    assert main(["ingest", "--store", store, str(docs)]) == 0
    ingested = capsys.readouterr()
    assert f"failed: {docs / 'broken.pdf'}: not a readable PDF" in ingested.err
    assert "3 added, 0 replaced, 0 unchanged, 1 failed" in ingested.err + ingested.out

    with WebsearchServer() as web:
        web_settings = ["--set", "search_provider=searxng", "--set", f"search_url={web.url}"]
        web_settings += ["--set", "allowed_hosts=127.0.0.1"]
        assert main(["ask", "-q", "--store", store, *web_settings, QUESTION]) == 0
    answer, sources = capsys.readouterr().out.split("Sources:\n")
    assert "4.2" in answer, answer
    assert f"{docs / 'report.pdf'}, p. 1" in sources, sources
