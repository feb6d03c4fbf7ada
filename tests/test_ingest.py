"""Ingestion with the real MiniLM embedder into Chroma on disk."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from langchain_chroma import Chroma
from langchain_core.embeddings import Embeddings
from langchain_huggingface import HuggingFaceEmbeddings

from vectorstore.embeddings import load_embeddings
from vectorstore.ingest import IngestReport, chunk_id, ingest, ingest_documents
from vectorstore.loaders import LoadedDocument
from vectorstore.store import count, open_store, retrieve

pytestmark = pytest.mark.integration

BREAD = (
    "Bread is baked from a dough of flour and water. Yeast makes the dough rise, and a hot "
    "oven gives the loaf its brown crust after about forty minutes."
)
EIFFEL = (
    "The Eiffel Tower is a wrought-iron lattice tower in Paris. It was completed in 1889 as "
    "the entrance arch to the World's Fair and is named after the engineer Gustave Eiffel."
)
PENGUINS = (
    "Emperor penguins live in Antarctica. They huddle together against the winter wind, and "
    "the males keep the eggs warm on their feet for about two months."
)


class CountingEmbeddings(Embeddings):
    """Delegates to the real embedder and counts the texts it embeds."""

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner
        self.documents = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents += len(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


@pytest.fixture(scope="module")
def embeddings() -> HuggingFaceEmbeddings:
    return load_embeddings()


@pytest.fixture
def counting(embeddings: HuggingFaceEmbeddings) -> CountingEmbeddings:
    return CountingEmbeddings(embeddings)


@pytest.fixture
def store(tmp_path: Path, counting: CountingEmbeddings) -> Chroma:
    return open_store(tmp_path / "store", "docs", counting, create=True)


def write_corpus(root: Path) -> dict[str, Path]:
    root.mkdir(parents=True, exist_ok=True)
    files = {
        "txt": root / "notes.txt",
        "md": root / "bees.md",
        "html": root / "volcano.html",
        "jsonl": root / "space.jsonl",
    }
    files["txt"].write_text(f"{BREAD}\n\n{EIFFEL}\n\n{PENGUINS}\n")
    files["md"].write_text(
        "# Honey bees\n\nHoney bees collect nectar from flowers and turn it into honey, "
        "which they store in wax combs inside the hive.\n"
    )
    files["html"].write_text(
        "<html><head><title>Etna</title><script>var penguins = 'Eiffel';</script></head>"
        "<body><nav>Home | About</nav><p>Mount Etna is an active volcano on the island of "
        "Sicily in Italy.</p></body></html>"
    )
    files["jsonl"].write_text(
        json.dumps({"title": "Moon", "text": "The Moon is Earth's only natural satellite."})
        + "\n"
        + json.dumps(
            {
                "title": "Mars",
                "contents": "Mars is called the Red Planet because of "
                "the iron oxide on its surface.",
            }
        )
        + "\n"
    )
    return files


def sources_in(store: Chroma) -> list[str]:
    return sorted({m["source"] for m in store.get(include=["metadatas"])["metadatas"]})


def test_ingest_every_format_and_retrieve(
    tmp_path: Path, store: Chroma, counting: CountingEmbeddings
) -> None:
    files = write_corpus(tmp_path / "docs")
    report = ingest([tmp_path / "docs"], store, chunk_size=200, chunk_overlap=0, progress=False)
    jsonl = str(files["jsonl"].absolute())
    assert sorted(report.added) == sorted(
        [str(files[k].absolute()) for k in ("txt", "md", "html")]
        + [f"{jsonl}#line1", f"{jsonl}#line2"]
    )
    assert report.failed == [] and report.skipped == [] and report.replaced == []
    # notes.txt has three paragraphs of ~150 characters: three chunks at chunk_size=200.
    assert report.chunks_added == 3 + 1 + 1 + 2
    assert count(store) == report.chunks_added == counting.documents

    expectations = {
        "When was the Eiffel Tower completed?": (files["txt"], 1, "1889"),
        "How do penguins keep their eggs warm?": (files["txt"], 2, "Emperor penguins"),
        "What do honey bees make from nectar?": (files["md"], 0, "Honey bees"),
        "Which volcano is on Sicily?": (files["html"], 0, "Mount Etna"),
        "Which planet is known as the Red Planet?": (Path(f"{jsonl}#line2"), 0, "Mars"),
    }
    for question, (source, chunk, needle) in expectations.items():
        best = retrieve(store, question, 3)[0]
        assert best["source"] == str(source.absolute()), question
        assert best["chunk"] == chunk, question
        assert needle in best["text"], question
        assert best["score"] is None
    # The HTML page's script and nav never reach the store.
    stored = store.get(include=["documents"])["documents"]
    assert not any("var penguins" in text or "Home | About" in text for text in stored)


def test_chunk_ids_and_metadata(tmp_path: Path, store: Chroma) -> None:
    files = write_corpus(tmp_path / "docs")
    ingest([files["txt"], files["html"]], store, chunk_size=200, chunk_overlap=0, progress=False)
    txt = str(files["txt"].absolute())
    digest = hashlib.sha256(files["txt"].read_bytes()).hexdigest()
    got = store.get(ids=[chunk_id(txt, i) for i in range(3)], include=["metadatas", "documents"])
    by_chunk = {m["chunk"]: (m, d) for m, d in zip(got["metadatas"], got["documents"], strict=True)}
    assert sorted(by_chunk) == [0, 1, 2]
    assert all(m["source"] == txt and m["sha256"] == digest for m, _ in by_chunk.values())
    assert by_chunk[1][1] == EIFFEL
    assert chunk_id(txt, 1) == f"{hashlib.sha1(txt.encode()).hexdigest()}:1"
    html_meta = store.get(ids=[chunk_id(str(files["html"].absolute()), 0)])["metadatas"][0]
    assert html_meta["title"] == "Etna"


def test_second_ingest_embeds_nothing(
    tmp_path: Path, store: Chroma, counting: CountingEmbeddings
) -> None:
    write_corpus(tmp_path / "docs")
    first = ingest([tmp_path / "docs"], store, chunk_size=200, chunk_overlap=0, progress=False)
    embedded, chunks = counting.documents, count(store)
    second = ingest([tmp_path / "docs"], store, chunk_size=200, chunk_overlap=0, progress=False)
    assert sorted(second.skipped) == sorted(first.added)
    assert second.added == [] and second.replaced == [] and second.chunks_added == 0
    assert counting.documents == embedded, "an unchanged document was embedded again"
    assert count(store) == chunks
    assert second.summary() == "0 added, 0 replaced, 5 unchanged, 0 failed (0 chunks embedded)"


def test_changed_file_replaces_its_chunks(
    tmp_path: Path, store: Chroma, counting: CountingEmbeddings
) -> None:
    files = write_corpus(tmp_path / "docs")
    ingest([tmp_path / "docs"], store, chunk_size=200, chunk_overlap=0, progress=False)
    before = count(store)
    txt = str(files["txt"].absolute())
    files["txt"].write_text("Tea was first drunk in China as a medicine.\n")
    embedded = counting.documents

    report = ingest([tmp_path / "docs"], store, chunk_size=200, chunk_overlap=0, progress=False)
    assert report.replaced == [txt]
    assert report.added == [] and len(report.skipped) == 4
    assert report.chunks_added == 1 and counting.documents == embedded + 1
    assert count(store) == before - 3 + 1
    rows = store.get(where={"source": txt}, include=["documents", "metadatas"])
    assert rows["ids"] == [chunk_id(txt, 0)]
    assert rows["documents"] == ["Tea was first drunk in China as a medicine."]
    assert rows["metadatas"][0]["sha256"] == hashlib.sha256(files["txt"].read_bytes()).hexdigest()
    stored = " ".join(store.get(include=["documents"])["documents"])
    assert "Eiffel Tower" not in stored and "penguins" not in stored
    assert retrieve(store, "Where does tea come from?", 1)[0]["source"] == txt


def test_jsonl_lines_removed_from_file_leave_the_store(tmp_path: Path, store: Chroma) -> None:
    files = write_corpus(tmp_path / "docs")
    ingest([files["jsonl"]], store, progress=False)
    jsonl = str(files["jsonl"].absolute())
    files["jsonl"].write_text(json.dumps({"title": "Mars", "text": "Mars has two moons."}) + "\n")
    report = ingest([files["jsonl"]], store, progress=False)
    assert report.replaced == [f"{jsonl}#line1"]
    assert report.removed == [f"{jsonl}#line2"]
    assert sources_in(store) == [f"{jsonl}#line1"]
    meta = store.get(ids=[chunk_id(f"{jsonl}#line1", 0)])["metadatas"][0]
    assert meta["title"] == "Mars"


def test_bad_files_are_reported_and_the_rest_ingested(
    tmp_path: Path, store: Chroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = tmp_path / "docs"
    files = write_corpus(docs)
    (docs / "latin1.txt").write_bytes("Crème brûlée".encode("latin-1"))
    (docs / "broken.jsonl").write_text('{"text": "ok"}\n{"text": oops}\n')
    (docs / "locked.md").write_text("Top secret.")
    (docs / "empty.txt").write_text("  \n")
    (docs / "ignored.pdf").write_bytes(b"%PDF")  # found while walking: silently not supported
    explicit_pdf = tmp_path / "slides.pdf"
    explicit_pdf.write_bytes(b"%PDF")
    missing = tmp_path / "missing.txt"

    # Tests run as root, for whom chmod 000 changes nothing: make the OS refuse instead.
    real_read_bytes = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.name == "locked.md":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    report = ingest([docs, explicit_pdf, missing], store, progress=False)
    failed = dict(report.failed)
    assert set(failed) == {
        str(docs / "broken.jsonl"),
        str(docs / "latin1.txt"),
        str(explicit_pdf),
        str(missing),
        str(docs / "locked.md"),
        str((docs / "empty.txt").absolute()),
    }
    assert "line 2: malformed JSON" in failed[str(docs / "broken.jsonl")]
    assert "not valid UTF-8" in failed[str(docs / "latin1.txt")]
    assert "offset 2" in failed[str(docs / "latin1.txt")]
    assert "unsupported file type" in failed[str(explicit_pdf)]
    assert "does not exist" in failed[str(missing)]
    assert "cannot read file (Permission denied)" in failed[str(docs / "locked.md")]
    assert "no text" in failed[str((docs / "empty.txt").absolute())]
    # Every good file still made it in.
    assert len(report.added) == 5
    assert str(files["md"].absolute()) in sources_in(store)
    assert not report.ok
    assert "6 failed" in report.summary()


def test_progress_bar_goes_to_stderr(
    tmp_path: Path, store: Chroma, capsys: pytest.CaptureFixture[str]
) -> None:
    files = write_corpus(tmp_path / "docs")
    ingest([files["md"]], store, progress=False)
    assert capsys.readouterr().err == ""
    ingest([files["html"]], store, progress=True)
    captured = capsys.readouterr()
    assert "embedding" in captured.err and "chunk" in captured.err
    assert captured.out == ""


def test_ingest_documents_batches_and_dedupes(store: Chroma, counting: CountingEmbeddings) -> None:
    docs = [
        LoadedDocument(source=f"mem:{i}", text=f"Fact number {i} about counting.", sha256=str(i))
        for i in range(7)
    ]
    report = ingest_documents([*docs, docs[0]], store, progress=False, batch_size=3)
    assert report.added == [d.source for d in docs]
    assert report.chunks_added == 7 == count(store) == counting.documents
    again = ingest_documents(docs, store, progress=False)
    assert again.skipped == [d.source for d in docs] and again.chunks_added == 0


def test_bad_chunking_parameters(tmp_path: Path, store: Chroma) -> None:
    with pytest.raises(ValueError, match="chunk_overlap"):
        ingest([tmp_path], store, chunk_size=100, chunk_overlap=100)
    with pytest.raises(ValueError, match="chunk_size"):
        ingest([tmp_path], store, chunk_size=0)


def test_report_summary_wording() -> None:
    report = IngestReport(added=["a"], chunks_added=1)
    assert report.summary() == "1 added, 0 replaced, 0 unchanged, 0 failed (1 chunk embedded)"
    assert report.ok
