"""Scoped search: tags, folders and file types on every chunk, and runs that search part of it.

Real Chroma stores on disk with the real MiniLM embedder: documents are ingested with tags
from two folders, and searches filtered by :func:`crag.vectorstore.scope.scope_filter` find only
what their scope names. Also: ingesting again relabels without embedding, the settings are
checked, and a run may read only the collections the operator allows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_chroma import Chroma
from langchain_huggingface import HuggingFaceEmbeddings

from crag.app.cli.settings import parse_settings
from crag.app.wiring import DefaultComponents
from crag.documents.loaders import LoadedDocument
from crag.graph.ingest_graph import build_ingest_graph
from crag.nodes.ingest import InvalidIngestInputError
from crag.settings.context import Context, IngestContext, InvalidSettingError
from crag.settings.deployment import deployment_with
from crag.settings.run_context import RunContext
from crag.settings.run_settings import RunSettings
from crag.settings.scope_settings import MAX_TAG_CHARS, check_tags, normal_file_types, normal_folder
from crag.vectorstore.configured_store import inline_document
from crag.vectorstore.embeddings import load_embeddings
from crag.vectorstore.ingest import QUIET, IngestOptions, chunk_id, ingest_documents, ingest_paths
from crag.vectorstore.scope import describe_scope, scope_filter, scope_metadata
from crag.vectorstore.sources import served_writer
from crag.vectorstore.store import StoreError, open_store
from tests.fakes import CountingEmbeddings, FakeComponents, FixedScoreEvaluator, scripted_chat

pytestmark = pytest.mark.integration

HANDBOOK = {
    "leave.md": "Employees get twenty-five days of paid leave per year, booked in the HR portal.",
    "expenses.txt": "Travel expenses are refunded within thirty days when receipts are attached.",
}
NEWS = {
    "launch.md": "The company launched its new rocket engine test site in the desert last week.",
    "office.txt": "A new office opened in Lisbon, with room for two hundred engineers.",
}
QUESTION = "How many days of paid leave do employees get?"


def write_files(root: Path, files: dict[str, str]) -> list[str]:
    """Write ``files`` under ``root``; their absolute paths."""
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text + "\n")
    return sorted(str((root / name).absolute()) for name in files)


@pytest.fixture
def tagged(tmp_path: Path, store: Chroma) -> dict[str, list[str]]:
    """The handbook (tag ``handbook``) and the news (tags ``news``, ``public``) ingested."""
    handbook = write_files(tmp_path / "docs" / "handbook", HANDBOOK)
    news = write_files(tmp_path / "docs" / "news", NEWS)
    ingest_paths(
        [tmp_path / "docs" / "handbook"], store, IngestOptions(progress=False, tags=["handbook"])
    )
    ingest_paths(
        [tmp_path / "docs" / "news"], store, IngestOptions(progress=False, tags=["news", "public"])
    )
    return {"handbook": handbook, "news": news}


def found(store: Chroma, settings: RunSettings, query: str = QUESTION, k: int = 10) -> list[str]:
    """The sources a search in the run's scope finds, sorted."""
    where = scope_filter(settings)
    docs = (
        store.similarity_search(query, k=k, filter=where)
        if where
        else store.similarity_search(query, k=k)
    )
    return sorted({str(d.metadata["source"]) for d in docs})


def metadata_of(store: Chroma, source: str, index: int = 0) -> dict[str, Any]:
    return dict(store.get(ids=[chunk_id(source, index)])["metadatas"][0])


# -- the labels and the filter ------------------------------------------------------------------


def test_scope_metadata_of_files_lines_the_corpus_and_inline_text() -> None:
    md = LoadedDocument(source="/srv/docs/team/Guide.MD", text="x", sha256="0")
    assert scope_metadata(md, ["a"], files=True) == {
        "file_type": "md",
        "folders": ["/srv/docs/team", "/srv/docs", "/srv", "/"],
        "tags": ["a"],
    }
    line = LoadedDocument(source="/srv/q.jsonl#line3", text="x", sha256="0", file="/srv/q.jsonl")
    assert scope_metadata(line, files=True) == {"file_type": "jsonl", "folders": ["/srv", "/"]}
    wiki = LoadedDocument(source="wikipedia:Mona Lisa", text="x", sha256="0")
    assert scope_metadata(wiki) == {"file_type": "wikipedia"}
    assert scope_metadata(inline_document("Otters hold hands."), ["b"]) == {
        "file_type": "inline",
        "tags": ["b"],
    }


def test_the_filter_of_each_scope_and_their_combination() -> None:
    assert scope_filter(RunSettings()) is None
    assert describe_scope(RunSettings()) == ""
    assert scope_filter(RunSettings(scope_tags=["a"])) == {"tags": {"$contains": "a"}}
    assert scope_filter(RunSettings.from_mapping({"scope_tags": "a, b"})) == {
        "$or": [{"tags": {"$contains": "a"}}, {"tags": {"$contains": "b"}}]
    }
    assert scope_filter(RunSettings(scope_folder="/srv/docs/")) == {
        "folders": {"$contains": "/srv/docs"}
    }
    assert scope_filter(RunSettings.from_mapping({"scope_file_types": ".PDF"})) == {
        "file_type": {"$eq": "pdf"}
    }
    both = RunSettings(scope_tags=["a"], scope_file_types=["pdf", "docx"])
    assert scope_filter(both) == {
        "$and": [{"tags": {"$contains": "a"}}, {"file_type": {"$in": ["pdf", "docx"]}}]
    }
    assert describe_scope(both) == "tags a; file types pdf, docx"


# -- searching a scope in a real store ----------------------------------------------------------


def test_each_scope_finds_only_its_documents(
    tmp_path: Path, store: Chroma, tagged: dict[str, list[str]]
) -> None:
    everything = sorted(tagged["handbook"] + tagged["news"])
    assert found(store, RunSettings()) == everything
    assert found(store, RunSettings(scope_tags=["handbook"])) == tagged["handbook"]
    assert found(store, RunSettings(scope_tags=["public"])) == tagged["news"]
    assert found(store, RunSettings(scope_tags=["news", "handbook"])) == everything
    assert found(store, RunSettings(scope_tags=["Handbook"])) == [], "tags are case-sensitive"
    news_folder = str(tmp_path / "docs" / "news")
    assert found(store, RunSettings(scope_folder=news_folder + "/")) == tagged["news"]
    assert found(store, RunSettings(scope_folder=str(tmp_path / "docs"))) == everything
    assert found(store, RunSettings(scope_folder=str(tmp_path / "doc"))) == [], (
        "a folder, not a prefix"
    )
    md = [s for s in everything if s.endswith(".md")]
    assert found(store, RunSettings(scope_file_types=["md"])) == md
    assert found(store, RunSettings(scope_file_types=["md"], scope_tags=["news"])) == [
        s for s in md if s in tagged["news"]
    ]
    assert found(store, RunSettings(scope_file_types=["pdf"])) == []


@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
def test_every_retrieval_mode_keeps_to_the_scope(
    store: Chroma, tagged: dict[str, list[str]], mode: str
) -> None:
    from crag.vectorstore.hybrid import search
    from crag.vectorstore.vector_memo import VectorMemo

    where = scope_filter(RunSettings(scope_tags=["news"]))
    # words of both sets: unscoped, every mode finds the handbook too
    hits = search(store, "new days of leave", 10, mode=mode, memo=VectorMemo(), where=where)
    assert hits, mode
    assert {str(d.metadata["source"]) for d in hits} <= set(tagged["news"]), mode


def test_ingesting_again_with_other_tags_relabels_without_embedding(
    tmp_path: Path, store: Chroma, counting: CountingEmbeddings, tagged: dict[str, list[str]]
) -> None:
    embedded = counting.documents
    report = ingest_paths(
        [tmp_path / "docs" / "handbook"], store, IngestOptions(progress=False, tags=["policies"])
    )
    assert counting.documents == embedded, "nothing embedded again"
    assert sorted(report.skipped) == sorted(report.relabelled) == tagged["handbook"]
    assert "2 relabelled" in report.summary()
    assert found(store, RunSettings(scope_tags=["handbook"])) == []
    assert found(store, RunSettings(scope_tags=["policies"])) == tagged["handbook"]
    # The same tags again: nothing to do. No tags: the tags are gone.
    assert (
        ingest_paths(
            [tmp_path / "docs" / "handbook"],
            store,
            IngestOptions(progress=False, tags=["policies"]),
        ).relabelled
        == []
    )
    ingest_paths([tmp_path / "docs" / "handbook"], store, QUIET)
    assert "tags" not in metadata_of(store, tagged["handbook"][0])
    assert counting.documents == embedded


def test_chunks_stored_before_scope_labels_get_them_when_ingested_again(
    tmp_path: Path, store: Chroma, counting: CountingEmbeddings, tagged: dict[str, list[str]]
) -> None:
    # As written before scope labels existed: no file_type, folders nor tags.
    got = store.get(include=["metadatas"])
    unlabelled = [{"file_type": None, "folders": None, "tags": None} for _ in got["ids"]]
    store._collection.update(ids=got["ids"], metadatas=unlabelled)  # type: ignore[arg-type]
    assert found(store, RunSettings(scope_tags=["handbook"])) == []
    assert len(found(store, RunSettings())) == 4, "an unscoped search still finds them"
    embedded = counting.documents
    report = ingest_paths(
        [tmp_path / "docs"], store, IngestOptions(progress=False, tags=["handbook"])
    )
    assert counting.documents == embedded
    assert len(report.relabelled) == 4
    meta = metadata_of(store, tagged["news"][0])
    assert (meta["file_type"], meta["tags"]) == (Path(tagged["news"][0]).suffix[1:], ["handbook"])
    assert str(tmp_path / "docs" / "news") in meta["folders"]


def test_a_changed_document_is_written_with_the_new_tags(
    tmp_path: Path, store: Chroma, tagged: dict[str, list[str]]
) -> None:
    leave = Path(tagged["handbook"][1])
    leave.write_text("Employees get thirty days of paid leave per year.\n")
    report = ingest_paths([leave], store, IngestOptions(progress=False, tags=["hr"]))
    assert report.replaced == [str(leave)]
    assert metadata_of(store, str(leave))["tags"] == ["hr"]


def test_a_served_run_may_not_retag_what_it_may_not_replace(store: Chroma) -> None:
    doc = inline_document("Otters hold hands while they sleep.", source="notes:otters")
    ingest_documents([doc], store, IngestOptions(progress=False, tags=["animals"]))
    report = ingest_documents(
        [doc], store, IngestOptions(progress=False, tags=["spoofed"], writer=served_writer("none"))
    )
    assert report.skipped == [] and report.relabelled == []
    assert report.failed[0][0] == "notes:otters"
    assert "stored with other tags" in report.failed[0][1]
    assert metadata_of(store, "notes:otters")["tags"] == ["animals"]
    # The same tags: unchanged, as before.
    same = ingest_documents(
        [doc], store, IngestOptions(progress=False, tags=["animals"], writer=served_writer("none"))
    )
    assert same.skipped == ["notes:otters"] and same.ok


# -- checks -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        ([""], "a tag may not be empty"),
        (["a" * (MAX_TAG_CHARS + 1)], f"the limit is {MAX_TAG_CHARS}"),
        (["a,b"], "no comma"),
        (["bell\x07"], "printable characters only"),
        ([f"t{i}" for i in range(33)], "33 tags given; the limit is 32"),
    ],
)
def test_bad_tags_are_refused_before_anything_is_written(
    tmp_path: Path, store: Chroma, tags: list[str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        check_tags(tags)
    with pytest.raises(ValueError, match=message):
        ingest_paths([tmp_path], store, IngestOptions(progress=False, tags=tags))
    if any(tag.strip() for tag in tags):  # a run's blank tags are dropped, as blanks in "a,,b"
        with pytest.raises(InvalidSettingError, match=f"setting scope_tags: .*{message}"):
            RunContext(scope_tags=tags)
    assert store.get()["ids"] == []


def test_tags_are_stripped_and_deduplicated() -> None:
    assert check_tags([" a ", "b", "a"]) == ["a", "b"]
    assert normal_file_types([".PDF", "pdf", " Md"]) == ["pdf", "md"]
    assert normal_folder("") == ""
    assert normal_folder("/srv/docs/../notes/") == "/srv/notes"
    assert normal_folder("~") == str(Path.home())


def test_scope_settings_from_the_command_line_and_a_run() -> None:
    parsed = parse_settings(["scope_tags=a, b", "scope_file_types=pdf,DOCX", "scope_folder=/srv/"])
    run_settings = parsed.context
    assert (run_settings.scope_tags, run_settings.scope_file_types, run_settings.scope_folder) == (
        ["a", "b"],
        ["pdf", "docx"],
        "/srv",
    )
    run = RunContext(scope_tags=["a"], scope_file_types=["md"])
    assert (run.scope_tags, run.scope_file_types) == (["a"], ["md"])
    with pytest.raises(InvalidSettingError, match="scope_tags must be a list of strings"):
        RunContext.from_mapping({"scope_tags": [1]})
    with pytest.raises(InvalidSettingError, match="scope_file_types: 'p d' is not a file type"):
        RunContext(scope_file_types=["p d"])
    with pytest.raises(InvalidSettingError, match="may not hold a NUL"):
        RunContext(scope_folder="/srv\0")


def test_the_ingest_graph_tags_what_it_adds(tmp_path: Path) -> None:
    graph = build_ingest_graph(deployment=deployment_with(store_path=str(tmp_path / "store")))
    context = IngestContext(chunk_size=500, chunk_overlap=50)
    otters = [{"text": "Otters hold hands.", "source": "notes:otters"}]

    def ingest(tags: Any) -> Any:
        payload: Any = {"documents": otters, "tags": tags}
        return graph.invoke(payload, context=context)

    assert ingest(["a"])["added"] == ["notes:otters"]
    with pytest.raises(InvalidIngestInputError, match="tags must be a list of strings"):
        ingest("a")
    with pytest.raises(InvalidIngestInputError, match="a tag may not be empty"):
        ingest([" "])
    store = open_store(tmp_path / "store", "crag", load_embeddings(), create=False)
    assert metadata_of(store, "notes:otters")["tags"] == ["a"]


def test_cli_ingest_takes_tags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from crag.app.cli.commands import main

    docs = tmp_path / "docs"
    write_files(docs, HANDBOOK)
    (docs / "q.jsonl").write_text(json.dumps({"text": "Lunch is served at noon."}) + "\n")
    store_dir = str(tmp_path / "store")
    assert main(["ingest", "--store", store_dir, "--tag", "hr", "--tag", "2024", str(docs)]) == 0
    assert "3 added" in capsys.readouterr().out
    assert main(["ingest", "--store", store_dir, "--tag", "hr", str(docs)]) == 0
    assert "3 relabelled" in capsys.readouterr().out
    assert main(["ingest", "--store", store_dir, "--tag", "", str(docs)]) == 2
    assert "a tag may not be empty" in capsys.readouterr().err
    store = open_store(store_dir, "crag", load_embeddings(), create=False)
    line = metadata_of(store, f"{docs / 'q.jsonl'}#line1")
    assert (line["file_type"], line["tags"]) == ("jsonl", ["hr"])


# -- which collections a run may read -----------------------------------------------------------


class NoWork:
    """Components that fail the test if a run asks for any of them."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the run did work ({name}) before its settings were checked")


def test_a_run_reads_only_the_collections_the_operator_allows() -> None:
    assert RunSettings().searched_collection() == "crag"
    allowed = RunSettings(
        search_collection="public",
        deployment=deployment_with(readable_collections="archive, public"),
    )
    assert allowed.searched_collection() == "public"
    assert RunSettings(search_collection="crag").searched_collection() == "crag"
    # A run names any collection; it is checked when the run meets the deployment.
    secret = RunContext(search_collection="secret")
    refused = (
        "setting search_collection: collection 'secret' is not readable on this server; "
        "readable: crag"
    )
    with pytest.raises(InvalidSettingError) as info:
        RunSettings.combine(secret)
    assert str(info.value) == refused
    with pytest.raises(InvalidSettingError) as info:
        RunSettings(search_collection="secret")
    assert str(info.value) == refused
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CRAG_READABLE_COLLECTIONS", "archive,public")
        archive = RunSettings.combine(RunContext(search_collection="archive"))
        assert archive.searched_collection() == "archive"
        with pytest.raises(InvalidSettingError, match="readable: crag, archive, public"):
            RunSettings.combine(secret)
        with pytest.raises(InvalidSettingError, match="readable_collections is a deployment"):
            RunContext.from_mapping({"readable_collections": "secret"})


@pytest.mark.parametrize("graph", ["crag", "rag"])
def test_a_run_of_a_collection_not_allowed_is_refused_before_any_work(graph: str) -> None:
    from crag.graph.baselines import build_rag_graph
    from crag.graph.builder import build_graph

    components: Any = NoWork()
    deployment = deployment_with(readable_collections="archive")
    built = (
        build_graph(components, deployment=deployment)
        if graph == "crag"
        else build_rag_graph(components, deployment=deployment)
    )
    with pytest.raises(InvalidSettingError) as info:
        built.invoke({"question": QUESTION}, context=Context(search_collection="secret"))
    assert str(info.value) == (
        "setting search_collection: collection 'secret' is not readable on this server; "
        "readable: crag, archive"
    )


def test_the_components_open_the_collection_the_run_searches(
    tmp_path: Path, embeddings: HuggingFaceEmbeddings
) -> None:
    path = tmp_path / "store"
    for name, text in (("crag", "Bees make honey."), ("archive", "Old minutes of 1999.")):
        store = open_store(path, name, embeddings, create=True)
        ingest_documents([inline_document(text, source=f"notes:{name}")], store, QUIET)
    base: dict[str, Any] = {
        "store_path": str(path),
        "default_corpus": False,
        "readable_collections": "archive",
    }
    components = DefaultComponents()
    own = components.vectorstore(RunSettings(deployment=deployment_with(**base)))
    archive = components.vectorstore(
        RunSettings(deployment=deployment_with(**base), search_collection="archive")
    )
    assert [d.metadata["source"] for d in own.similarity_search("x", k=5)] == ["notes:crag"]
    assert [d.metadata["source"] for d in archive.similarity_search("x", k=5)] == ["notes:archive"]
    # A readable collection is never created (nor filled with the bundled corpus).
    with pytest.raises(StoreError, match="no collection 'missing'"):
        components.vectorstore(
            RunSettings(
                deployment=deployment_with(**{**base, "readable_collections": "missing"}),
                search_collection="missing",
            )
        )


def test_a_scope_that_matches_nothing_says_so(
    tmp_path: Path, store: Chroma, tagged: dict[str, list[str]]
) -> None:
    from crag.graph.baselines import build_rag_graph

    components = FakeComponents(
        store=store, scorer=FixedScoreEvaluator({"leave": 0.9}), chat=scripted_chat()
    )
    own_documents_only = build_rag_graph(
        components, deployment=deployment_with(default_corpus=False)
    )
    out = own_documents_only.invoke({"question": QUESTION}, context=Context(scope_tags=["nothing"]))
    assert out["documents"] == []
    assert "no stored passage matches the scope (tags nothing)" in out["notes"]
    scoped = build_rag_graph(components).invoke(
        {"question": QUESTION}, context=Context(scope_tags=["handbook"])
    )
    assert {d["source"] for d in scoped["documents"]} <= set(tagged["handbook"])
    assert scoped["documents"]
