"""Ingestion with the real MiniLM embedder into Chroma on disk."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from langchain_chroma import Chroma
from langchain_huggingface import HuggingFaceEmbeddings

from crag.documents.limits import ChunkLimitError
from crag.documents.loaders import LoadedDocument
from crag.graph.ingest_graph import build_ingest_graph
from crag.nodes.ingest import InvalidIngestInputError
from crag.settings.context import IngestContext
from crag.settings.deployment import deployment_with
from crag.vectorstore.ingest import (
    QUIET,
    IngestOptions,
    IngestReport,
    chunk_id,
    ingest_documents,
    ingest_paths,
    prune_missing,
    remove_sources,
)
from crag.vectorstore.store import count, open_store, retrieve
from tests.fakes import CountingEmbeddings, InterruptingEmbeddings
from tests.hash_embeddings import HashEmbeddings

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
    report = ingest_paths(
        [tmp_path / "docs"], store, IngestOptions(chunk_size=200, chunk_overlap=0, progress=False)
    )
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
    ingest_paths(
        [files["txt"], files["html"]],
        store,
        IngestOptions(chunk_size=200, chunk_overlap=0, progress=False),
    )
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
    first = ingest_paths(
        [tmp_path / "docs"], store, IngestOptions(chunk_size=200, chunk_overlap=0, progress=False)
    )
    embedded, chunks = counting.documents, count(store)
    second = ingest_paths(
        [tmp_path / "docs"], store, IngestOptions(chunk_size=200, chunk_overlap=0, progress=False)
    )
    assert sorted(second.skipped) == sorted(first.added)
    assert second.added == [] and second.replaced == [] and second.chunks_added == 0
    assert counting.documents == embedded, "an unchanged document was embedded again"
    assert count(store) == chunks
    assert second.summary() == "0 added, 0 replaced, 5 unchanged, 0 failed (0 chunks embedded)"


def test_changed_file_replaces_its_chunks(
    tmp_path: Path, store: Chroma, counting: CountingEmbeddings
) -> None:
    files = write_corpus(tmp_path / "docs")
    ingest_paths(
        [tmp_path / "docs"], store, IngestOptions(chunk_size=200, chunk_overlap=0, progress=False)
    )
    before = count(store)
    txt = str(files["txt"].absolute())
    files["txt"].write_text("Tea was first drunk in China as a medicine.\n")
    embedded = counting.documents

    report = ingest_paths(
        [tmp_path / "docs"], store, IngestOptions(chunk_size=200, chunk_overlap=0, progress=False)
    )
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
    ingest_paths([files["jsonl"]], store, QUIET)
    jsonl = str(files["jsonl"].absolute())
    files["jsonl"].write_text(json.dumps({"title": "Mars", "text": "Mars has two moons."}) + "\n")
    report = ingest_paths([files["jsonl"]], store, QUIET)
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
    (docs / "ignored.odt").write_bytes(b"PK")  # found while walking: silently not supported
    (docs / "cut.pdf").write_bytes(b"%PDF")  # a supported type, but truncated
    explicit_odt = tmp_path / "slides.odt"
    explicit_odt.write_bytes(b"PK")
    missing = tmp_path / "missing.txt"

    # Tests run as root, for whom chmod 000 changes nothing: make the OS refuse instead.
    real_read_bytes = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.name == "locked.md":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    report = ingest_paths([docs, explicit_odt, missing], store, QUIET)
    failed = dict(report.failed)
    assert set(failed) == {
        str(docs / "broken.jsonl"),
        str(docs / "latin1.txt"),
        str(docs / "cut.pdf"),
        str(explicit_odt),
        str(missing),
        str(docs / "locked.md"),
        str((docs / "empty.txt").absolute()),
    }
    assert "line 2: malformed JSON" in failed[str(docs / "broken.jsonl")]
    assert "not valid UTF-8" in failed[str(docs / "latin1.txt")]
    assert "offset 2" in failed[str(docs / "latin1.txt")]
    assert "unsupported file type" in failed[str(explicit_odt)]
    assert "not a readable PDF" in failed[str(docs / "cut.pdf")]
    assert "does not exist" in failed[str(missing)]
    assert "cannot read file (Permission denied)" in failed[str(docs / "locked.md")]
    assert "no text" in failed[str((docs / "empty.txt").absolute())]
    # Every good file still made it in.
    assert len(report.added) == 5
    assert str(files["md"].absolute()) in sources_in(store)
    assert not report.ok
    assert "7 failed" in report.summary()


def test_progress_bar_goes_to_stderr(
    tmp_path: Path, store: Chroma, capsys: pytest.CaptureFixture[str]
) -> None:
    files = write_corpus(tmp_path / "docs")
    ingest_paths([files["md"]], store, QUIET)
    assert capsys.readouterr().err == ""
    ingest_paths([files["html"]], store, IngestOptions(progress=True))
    captured = capsys.readouterr()
    assert "embedding" in captured.err and "chunk" in captured.err
    assert captured.out == ""


def test_ingest_documents_batches_and_dedupes(store: Chroma, counting: CountingEmbeddings) -> None:
    docs = [
        LoadedDocument(source=f"mem:{i}", text=f"Fact number {i} about counting.", sha256=str(i))
        for i in range(7)
    ]
    report = ingest_documents([*docs, docs[0]], store, IngestOptions(progress=False, batch_size=3))
    assert report.added == [d.source for d in docs]
    assert report.chunks_added == 7 == count(store) == counting.documents
    again = ingest_documents(docs, store, QUIET)
    assert again.skipped == [d.source for d in docs] and again.chunks_added == 0


def test_one_options_object_serves_many_runs(store: Chroma) -> None:
    """Options hold no run's state: each run counts its own chunks, tags are copied in."""
    tags = ["facts"]
    options = IngestOptions(progress=False, max_chunks=2, tags=tags)
    tags.append("later")  # the caller's list, changed afterwards, changes nothing

    def facts(prefix: str, n: int) -> list[LoadedDocument]:
        return [
            LoadedDocument(source=f"mem:{prefix}{i}", text=f"Fact {prefix}{i}.", sha256=prefix)
            for i in range(n)
        ]

    assert ingest_documents(facts("a", 2), store, options).chunks_added == 2
    assert ingest_documents(facts("b", 2), store, options).chunks_added == 2  # a fresh budget
    with pytest.raises(ChunkLimitError, match="more than 2 chunks"):
        ingest_documents(facts("c", 3), store, options)
    assert store.get(where={"source": "mem:b1"})["metadatas"][0]["tags"] == ["facts"]
    assert count(store) == 4


def test_bad_chunking_parameters(tmp_path: Path, store: Chroma) -> None:
    with pytest.raises(ValueError, match="chunk_overlap"):
        ingest_paths([tmp_path], store, IngestOptions(chunk_size=100, chunk_overlap=100))
    with pytest.raises(ValueError, match="chunk_size"):
        ingest_paths([tmp_path], store, IngestOptions(chunk_size=0))


def test_report_summary_wording() -> None:
    report = IngestReport(added=["a"], chunks_added=1)
    assert report.summary() == "1 added, 0 replaced, 0 unchanged, 0 failed (1 chunk embedded)"
    assert report.ok


# --- integrity: the ingest root, interruptions, pruning, special files, one writer ---------

REPO = Path(__file__).resolve().parents[2]


def run_python(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh interpreter at the repository root (this checkout's code)."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_symlink_out_of_the_ingest_root_is_refused(
    tmp_path: Path, embeddings: HuggingFaceEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("The launch code of the rocket is 0000.")
    (root / "notes.md").write_text("Otters hold hands while they sleep.")
    (root / "leak.txt").symlink_to(Path("../outside/secret.txt"))
    (root / "alias.md").symlink_to(root / "notes.md")  # a link that stays inside is fine
    monkeypatch.setenv("CRAG_INGEST_ROOT", str(root))
    deployment = deployment_with(store_path=str(tmp_path / "store"), collection="confined")
    served = build_ingest_graph(deployment=deployment)  # as served, CRAG_INGEST_ROOT set
    context = IngestContext(chunk_size=1000)

    report = served.invoke({"paths": [str(root)]}, context=context)
    failed = {f["source"]: f["error"] for f in report["failed"]}
    assert list(failed) == [str(root / "leak.txt")]
    assert f"outside {root}" in failed[str(root / "leak.txt")]
    assert sorted(report["added"]) == [str(root / "alias.md"), str(root / "notes.md")]
    store = open_store(tmp_path / "store", "confined", embeddings, create=False)
    assert not any("launch code" in text for text in store.get()["documents"])

    # Named directly, the link is refused before anything is read.
    with pytest.raises(InvalidIngestInputError, match="outside"):
        served.invoke({"paths": [str(root / "leak.txt")]}, context=context)
    # The same confinement in the Python API, for named paths and walked files alike.
    direct = ingest_paths(
        [root / "leak.txt", root], store, IngestOptions(root=root, progress=False)
    )
    assert [source for source, _ in direct.failed] == [str(root / "leak.txt")]
    assert sorted(direct.skipped) == sorted(report["added"])


def write_big_file(path: Path, paragraphs: int = 12) -> None:
    """``paragraphs`` paragraphs of about 150 characters: one chunk each at chunk_size=200."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join(f"Paragraph {i}. {EIFFEL[:130]}" for i in range(paragraphs)))


def test_ctrl_c_during_ingestion_leaves_no_partial_document(
    tmp_path: Path, embeddings: HuggingFaceEmbeddings
) -> None:
    docs = tmp_path / "docs"
    big = docs / "big.txt"
    write_big_file(big)
    (docs / "tea.md").write_text("Tea was first drunk in China as a medicine.")
    interrupting = InterruptingEmbeddings(embeddings, interrupt_on=3)
    store = open_store(tmp_path / "store", "docs", interrupting, create=True)
    options = IngestOptions(chunk_size=200, chunk_overlap=0, progress=False, batch_size=3)

    # Two batches of big.txt's twelve chunks are written, then Ctrl-C on the third.
    with pytest.raises(KeyboardInterrupt):
        ingest_paths([docs], store, options)
    assert interrupting.calls == 3
    assert count(store) == 0, "the interrupted document's chunks stayed in the store"

    big.write_text("The Eiffel Tower was painted red in its first years.")
    report = ingest_paths([docs], store, options)
    assert sorted(report.added) == [str(big.absolute()), str((docs / "tea.md").absolute())]
    assert report.chunks_added == 2 == count(store)
    again = ingest_paths([docs], store, options)
    assert len(again.skipped) == 2 and again.chunks_added == 0


def test_ctrl_c_while_replacing_keeps_the_counts_right(
    tmp_path: Path, embeddings: HuggingFaceEmbeddings
) -> None:
    big = tmp_path / "docs" / "big.txt"
    write_big_file(big, paragraphs=4)
    interrupting = InterruptingEmbeddings(embeddings, interrupt_on=4)  # call 1: version 1
    store = open_store(tmp_path / "store", "docs", interrupting, create=True)
    source = str(big.absolute())
    doc = LoadedDocument(source=source, text=big.read_text(), sha256="v1")
    options = IngestOptions(chunk_size=200, chunk_overlap=0, progress=False)
    assert ingest_documents([doc], store, options).added

    # Version 2 (twelve chunks) replaces version 1 (four): interrupted after two batches.
    write_big_file(big, paragraphs=12)
    changed = LoadedDocument(source=source, text=big.read_text(), sha256="v2")
    with pytest.raises(KeyboardInterrupt):
        ingest_documents([changed], store, dataclasses.replace(options, batch_size=3))
    assert count(store) == 0  # the old version was already deleted; nothing partial is left

    report = ingest_documents([changed], store, options)
    assert report.added == [source] and report.chunks_added == 12 == count(store)
    assert {m["sha256"] for m in store.get()["metadatas"]} == {"v2"}


def test_ingestion_keeps_a_collection_made_with_index_settings(tmp_path: Path) -> None:
    """Chroma refuses metadata naming ``hnsw:`` settings; the progress records must cope."""
    path = tmp_path / "store"
    cosine = Chroma(
        client=open_store(path, "seed", HashEmbeddings(), create=True)._client,
        collection_name="cosine",
        embedding_function=HashEmbeddings(),
        collection_metadata={"hnsw:space": "cosine"},
    )
    assert cosine._collection.metadata == {"hnsw:space": "cosine"}
    store = open_store(path, "cosine", HashEmbeddings(), create=False)
    doc = LoadedDocument(source="mem:a", text="Otters hold hands.", sha256="a")
    assert ingest_documents([doc], store, QUIET).added == ["mem:a"]
    hnsw = store._collection.configuration["hnsw"]
    assert hnsw is not None and hnsw["space"] == "cosine"
    assert count(store) == 1


KILLED_WRITER = """
import os, sys
from tests.hash_embeddings import HashEmbeddings
from crag.vectorstore.ingest import IngestOptions, ingest_paths
from crag.vectorstore.store import open_store

class Dying(HashEmbeddings):
    def embed_documents(self, texts):
        if self.calls == 2:
            os._exit(9)  # killed outright: no cleanup runs
        return super().embed_documents(texts)

store = open_store(sys.argv[1], "docs", Dying(), create=True)
ingest_paths([sys.argv[2]], store,
             IngestOptions(chunk_size=200, chunk_overlap=0, progress=False, batch_size=3))
"""


def test_killed_ingestion_is_repaired_by_the_next_one(tmp_path: Path) -> None:
    big = tmp_path / "docs" / "big.txt"
    write_big_file(big)
    killed = run_python(KILLED_WRITER, str(tmp_path / "store"), str(big))
    assert killed.returncode == 9, killed.stderr[-2000:]
    store = open_store(tmp_path / "store", "docs", HashEmbeddings(), create=False)
    assert count(store) == 6  # two batches of three chunks, and no chunk 0: incomplete

    # The next ingestion, of another file, removes them before anything else.
    other = tmp_path / "other.md"
    other.write_text("Honey bees collect nectar.")
    report = ingest_paths([other], store, QUIET)
    assert report.added == [str(other.absolute())]
    assert sources_in(store) == [str(other.absolute())] and count(store) == 1

    big.write_text("A much shorter version.")
    report = ingest_paths([big], store, QUIET)
    assert report.added == [str(big.absolute())] and report.chunks_added == 1
    assert count(store) == 2


def test_prune_and_remove(tmp_path: Path, store: Chroma) -> None:
    files = write_corpus(tmp_path / "docs")
    elsewhere = tmp_path / "elsewhere" / "keep.md"
    elsewhere.parent.mkdir()
    elsewhere.write_text("Kept: it is not under the pruned folder.")
    ingest_paths([tmp_path / "docs", elsewhere], store, QUIET)
    ingest_documents(
        [LoadedDocument(source="mem:otters", text="Otters hold hands.", sha256="o")], store, QUIET
    )
    md, jsonl = str(files["md"].absolute()), str(files["jsonl"].absolute())
    files["md"].unlink()
    files["jsonl"].unlink()
    elsewhere.unlink()

    plain = ingest_paths([tmp_path / "docs"], store, QUIET)
    assert plain.removed == [] and md in sources_in(store)
    pruned = ingest_paths([tmp_path / "docs"], store, IngestOptions(prune=True, progress=False))
    assert pruned.removed == sorted([md, f"{jsonl}#line1", f"{jsonl}#line2"])
    assert "3 removed" in pruned.summary()
    assert sources_in(store) == sorted(
        [
            str(elsewhere.absolute()),
            str(files["html"].absolute()),
            str(files["txt"].absolute()),
            "mem:otters",
        ]
    )
    # A folder that is gone entirely can be pruned too; other sources never are.
    elsewhere.parent.rmdir()
    assert prune_missing(store, [elsewhere.parent]) == [str(elsewhere.absolute())]

    removal = remove_sources(store, [str(files["html"]), "mem:otters", "mem:never-stored"])
    assert removal.removed == sorted([str(files["html"].absolute()), "mem:otters"])
    assert [item for item, _ in removal.failed] == ["mem:never-stored"]
    assert sources_in(store) == [str(files["txt"].absolute())]


def test_cli_ingest_prune_and_remove(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from crag.app.cli.commands import main

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("Alpha particles are helium nuclei.")
    (docs / "b.md").write_text("Beta particles are electrons.")
    (docs / "c.jsonl").write_text(json.dumps({"text": "Gamma rays are photons."}) + "\n")
    store = str(tmp_path / "store")
    assert main(["ingest", "--store", store, str(docs)]) == 0
    assert "3 added" in capsys.readouterr().out

    (docs / "a.md").unlink()
    assert main(["ingest", "--prune", "--store", store, str(docs)]) == 0
    captured = capsys.readouterr()
    assert "2 unchanged" in captured.out and "1 removed" in captured.out
    assert f"removed: {docs / 'a.md'}" in captured.err

    assert main(["remove", "--store", store, str(docs / "c.jsonl"), "nowhere.md"]) == 1
    captured = capsys.readouterr()
    assert f"removed: {docs / 'c.jsonl'}#line1" in captured.out
    assert "1 removed, 1 not found" in captured.out
    assert "not in the store: nowhere.md" in captured.err
    assert main(["remove", "--store", store, str(docs / "b.md")]) == 0
    assert "1 removed, 0 not found" in capsys.readouterr().out


def test_fifo_socket_and_device_are_skipped_unopened(tmp_path: Path, store: Chroma) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("Honey bees make honey.")
    fifo, named_fifo = docs / "pipe.txt", tmp_path / "named.jsonl"
    os.mkfifo(fifo)
    os.mkfifo(named_fifo)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(docs / "sock.md"))
    special = {
        str(fifo): "named pipe (FIFO)",
        str(named_fifo): "FIFO",
        str(docs / "sock.md"): "socket",
    }
    try:
        os.mknod(docs / "null.txt", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        special[str(docs / "null.txt")] = "character device"
    except OSError:
        pass  # no permission to make device nodes here: the FIFOs and socket still count

    result: dict[str, IngestReport] = {}
    worker = threading.Thread(
        target=lambda: result.update(report=ingest_paths([docs, named_fifo], store, QUIET)),
        daemon=True,
    )
    worker.start()
    worker.join(120)
    if worker.is_alive():
        for pipe in (fifo, named_fifo):  # let the blocked open() return, then fail
            os.close(os.open(pipe, os.O_RDWR))
        pytest.fail("ingesting a FIFO blocked")
    sock.close()
    report = result["report"]
    failed = dict(report.failed)
    assert set(failed) == set(special)
    for path, kind in special.items():
        assert kind in failed[path] and "not a regular file" in failed[path]
    assert report.added == [str((docs / "a.md").absolute())]


CONCURRENT_WRITER = """
import json, sys
from pathlib import Path
from tests.hash_embeddings import HashEmbeddings
from crag.vectorstore.ingest import IngestOptions, ingest_paths
from crag.vectorstore.store import open_store

store_path, folder, started, wait_for, ready = sys.argv[1:]
embedder = HashEmbeddings(delay=0.5, started=Path(started),
                          wait_for=Path(wait_for) if wait_for else None)
store = open_store(store_path, "docs", embedder, create=True)
if ready:
    Path(ready).write_text("about to ingest")
options = IngestOptions(chunk_size=200, chunk_overlap=0, progress=False, batch_size=2)
report = ingest_paths([folder], store, options)
print(json.dumps({"added": report.added, "skipped": report.skipped,
                  "chunks": report.chunks_added, "embedded": embedder.documents}))
"""


def test_concurrent_ingestions_take_turns(tmp_path: Path) -> None:
    write_corpus(tmp_path / "docs")
    store_path = tmp_path / "store"
    args = [str(store_path), str(tmp_path / "docs")]
    started, second_ready = tmp_path / "first.started", tmp_path / "second.ready"
    # The first ingestion embeds its first batch only once the second is about to start.
    first = subprocess.Popen(
        [sys.executable, "-c", CONCURRENT_WRITER, *args, str(started), str(second_ready), ""],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not started.exists():  # the first one holds the lock and is embedding
        assert first.poll() is None, first.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "the first ingestion never started embedding"
        time.sleep(0.05)
    second = run_python(CONCURRENT_WRITER, *args, str(tmp_path / "unused"), "", str(second_ready))
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, err[-2000:] + second.stderr[-2000:]

    one, two = json.loads(out), json.loads(second.stdout)
    assert len(one["added"]) == 5 and one["chunks"] == one["embedded"] == 7
    assert sorted(two["skipped"]) == sorted(one["added"])
    assert two["added"] == [] and two["chunks"] == two["embedded"] == 0
    assert "waiting for another process ingesting" in second.stderr
    store = open_store(store_path, "docs", HashEmbeddings(), create=False)
    assert count(store) == 7 and len(sources_in(store)) == 5
