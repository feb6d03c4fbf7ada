"""A folder of PDF and Office files ingested with the real embedder, then cited by page.

The folder holds good files next to broken ones; the good ones are ingested, each broken one
gives one line; a question only the PDF answers is answered from, and cited by, its page.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_huggingface import HuggingFaceEmbeddings

from crag.app.cli.commands import main
from crag.graph.builder import build_graph
from crag.settings.context import Context
from crag.settings.method import MethodConfig
from crag.vectorstore.ingest import IngestOptions, IngestReport, chunk_id, ingest_paths
from crag.vectorstore.store import open_store
from tests.document_factory import (
    PAGES,
    QUESTION,
    SAMPLES,
    ZEPHYR,
    write_docx,
    write_pdf,
    write_pptx,
)
from tests.fakes import FakeComponents, FixedScoreEvaluator, ScriptedChatModel, app_components

pytestmark = pytest.mark.integration

BROKEN = {
    "invalid.pdf": "not a readable PDF (startxref not found)",
    "encrypted.pdf": "encrypted PDF; it needs a password: save a decrypted copy",
    "scanned.pdf": "no text layer (a scanned PDF?): OCR is not supported",
    "encrypted.docx": "password-protected (encrypted) Office file; save an unencrypted copy",
}


@pytest.fixture(scope="module")
def ingested(
    tmp_path_factory: pytest.TempPathFactory, embeddings: HuggingFaceEmbeddings
) -> tuple[Path, Chroma, IngestReport]:
    """A store holding the folder: a generated PDF, DOCX and PPTX, real files, broken files."""
    root = tmp_path_factory.mktemp("documents")
    folder = root / "docs"
    folder.mkdir()
    write_pdf(folder / "report.pdf", PAGES, roman_front=2)
    write_docx(folder / "method.docx")
    write_pptx(folder / "review.pptx")
    shutil.copy(SAMPLES / "lorem.pdf", folder / "lorem.pdf")
    for name in BROKEN:
        shutil.copy(SAMPLES / name, folder / name)
    store = open_store(root / "store", "docs", embeddings, create=True)
    report = ingest_paths(
        [folder], store, IngestOptions(chunk_size=300, chunk_overlap=0, progress=False)
    )
    return folder, store, report


def chunks_of(store: Chroma, source: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """``(id, text, metadata)`` of a document's chunks, by chunk index."""
    found = store.get(where={"source": str(source)}, include=["documents", "metadatas"])
    rows = zip(found["ids"], found["documents"], found["metadatas"], strict=True)
    return sorted(((i, t, dict(m)) for i, t, m in rows), key=lambda row: int(row[2]["chunk"]))


def test_good_files_are_ingested_next_to_broken_ones(
    ingested: tuple[Path, Chroma, IngestReport],
) -> None:
    folder, _, report = ingested
    assert sorted(Path(s).name for s in report.added) == [
        "lorem.pdf",
        "method.docx",
        "report.pdf",
        "review.pptx",
    ]
    failed = dict(report.failed)
    assert sorted(Path(s).name for s in failed) == sorted(BROKEN)
    for name, reason in BROKEN.items():  # one line each: the file, then what is wrong
        message = failed[str(folder / name)]
        assert message.startswith(f"{folder / name}: ") and reason in message
        assert "\n" not in message


def test_each_chunk_records_its_page_slide_or_heading(
    ingested: tuple[Path, Chroma, IngestReport],
) -> None:
    folder, store, _ = ingested
    report = chunks_of(store, (folder / "report.pdf").absolute())
    # One chunk per page here; ids are the document's chunk ids, in order.
    assert [row[0] for row in report] == [
        chunk_id(str((folder / "report.pdf").absolute()), i) for i in range(4)
    ]
    assert [(m["page"], m["page_label"], m["location"]) for _, _, m in report] == [
        (1, "i", "p. i"),
        (2, "ii", "p. ii"),
        (3, "1", "p. 1"),
        (4, "2", "p. 2"),
    ]
    assert report[2][1] == ZEPHYR
    assert all("slide" not in m and "headings" not in m for _, _, m in report)

    method = chunks_of(store, (folder / "method.docx").absolute())
    evaluator = [m for _, text, m in method if "T5-large" in text]
    assert [(m["headings"], m["location"]) for m in evaluator] == [
        ("Method > Evaluator", "Method > Evaluator")
    ]
    review = chunks_of(store, (folder / "review.pptx").absolute())
    hiring = [m for _, text, m in review if "Lisbon" in text]
    assert [(m["slide"], m["location"]) for m in hiring] == [(2, "slide 2")]


def answering(answer: str) -> ScriptedChatModel:
    return ScriptedChatModel(respond=lambda _: answer, prompts=[])


def components(store: Chroma) -> FakeComponents:
    """The real store; an evaluator that trusts the Zephyr passage; a fixed answer."""
    return FakeComponents(
        store=store,
        scorer=FixedScoreEvaluator({"Zephyr": 0.9}),
        chat=answering("It produces 4.2 megawatts [1]."),
    )


def test_the_answer_cites_the_pdf_page(ingested: tuple[Path, Chroma, IngestReport]) -> None:
    folder, store, _ = ingested
    source = str((folder / "report.pdf").absolute())
    graph = build_graph(components=components(store), method=MethodConfig(number_knowledge=True))
    out = graph.invoke({"question": QUESTION}, context=Context())
    top = out["documents"][0]
    assert (top["source"], top["text"], top.get("location")) == (source, ZEPHYR, "p. 1")
    assert out["citations"] == [1]
    cited = out["knowledge"][0]
    assert (cited["source"], cited.get("location")) == (source, "p. 1")
    assert out["messages"][-1].additional_kwargs["citations"] == [
        {"number": 1, "title": source, "source": source, "chunk": 2, "location": "p. 1"}
    ]


def test_crag_ask_prints_the_page(
    ingested: tuple[Path, Chroma, IngestReport], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, store, _ = ingested
    with app_components(components(store)):
        assert main(["ask", "-q", "--set", "number_knowledge=true", QUESTION]) == 0
    out = capsys.readouterr().out
    answer, sources = out.split("Sources:\n")
    assert "4.2 megawatts" in answer and "[1]" in answer
    assert sources == f"  [1] {(folder / 'report.pdf').absolute()}, p. 1\n"
