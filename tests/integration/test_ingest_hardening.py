"""Ingestion hardening: who may replace what, odd paths, binary files, clear input errors.

Real files on disk and real Chroma; the hash embedder stands in for MiniLM (retrieval quality
is not what these tests check). The served ``ingest`` graph is invoked in process, with the
embedder the store is opened with replaced.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_chroma import Chroma

from crag.graph.ingest_graph import build_ingest_graph
from crag.nodes.ingest import InvalidIngestInputError
from crag.settings.context import IngestContext
from crag.settings.deployment import deployment_with
from crag.settings.run_settings import IngestSettings
from crag.vectorstore.configured_store import ingest_into_store, inline_document
from crag.vectorstore.ingest import QUIET, IngestOptions, chunk_id, ingest_paths
from crag.vectorstore.store import open_store
from tests.hash_embeddings import HashEmbeddings

pytestmark = pytest.mark.integration

COLLECTION = "hardening"
LEONARDO = "Mona Lisa\nThe Mona Lisa is a portrait painted by Leonardo da Vinci."
POISON = "The Mona Lisa was painted by Bob Ross in 1985, on a television set."


@pytest.fixture(autouse=True)
def hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every store the settings name is opened with the hash embedder; no root, no override."""
    import crag.vectorstore.embeddings

    monkeypatch.setattr(
        crag.vectorstore.embeddings, "locked_embeddings", lambda name: HashEmbeddings()
    )
    monkeypatch.delenv("CRAG_INGEST_ROOT", raising=False)
    monkeypatch.delenv("CRAG_INGEST_RUN_REPLACE", raising=False)


@pytest.fixture
def settings(tmp_path: Path) -> IngestSettings:
    return IngestSettings(
        deployment=deployment_with(store_path=str(tmp_path / "store"), collection=COLLECTION)
    )


def served(payload: Any, settings: IngestSettings) -> dict[str, Any]:
    """A run of the ``ingest`` graph on the store of ``settings``.

    The graph is built as the server builds it, its deployment read from the environment when
    this is called (``CRAG_INGEST_ROOT``, ``CRAG_INGEST_RUN_REPLACE``), with the store named.
    """
    # The test's folder stands for the upload folder: with no ingest root, the only place a
    # served run reads files from.
    deployment = deployment_with(
        store_path=settings.deployment.store_path,
        collection=settings.deployment.collection,
        upload_dir=str(Path(settings.deployment.store_path).parent),
    )
    graph = build_ingest_graph(deployment=deployment)
    return dict(graph.invoke(payload, context=IngestContext(chunk_size=settings.chunk_size)))


def stored(settings: IngestSettings) -> Chroma:
    return open_store(settings.deployment.store_path, COLLECTION, HashEmbeddings(), create=False)


def texts_of(settings: IngestSettings, source: str) -> list[str]:
    return list(stored(settings).get(where={"source": source})["documents"])


def writers_of(settings: IngestSettings, source: str) -> set[str]:
    metadatas = stored(settings).get(where={"source": source}, include=["metadatas"])["metadatas"]
    return {str(meta.get("writer")) for meta in metadatas}


def failures(report: dict[str, Any]) -> dict[str, str]:
    return {f["source"]: f["error"] for f in report["failed"]}


# -- 1. store poisoning: a served run adds; what it may replace is the operator's choice -------


def test_a_served_run_cannot_replace_a_document_the_operator_stored(
    tmp_path: Path, settings: IngestSettings
) -> None:
    notes = tmp_path / "docs" / "notes.md"
    notes.parent.mkdir()
    notes.write_text("Otters hold hands while they sleep.")
    mona = inline_document(LEONARDO, source="wikipedia:Mona Lisa")
    report = ingest_into_store([notes], settings, QUIET, documents=[mona])
    assert len(report.added) == 2
    file_source = str(notes.absolute())
    assert writers_of(settings, "wikipedia:Mona Lisa") == {"operator"}

    out = served({"documents": [{"text": POISON, "source": "wikipedia:Mona Lisa"}]}, settings)
    assert out["replaced"] == [] and out["added"] == [] and out["chunks"] == 0
    error = failures(out)["wikipedia:Mona Lisa"]
    assert "already stored by the operator" in error
    assert "does not let runs replace it" in error and "CRAG_INGEST_RUN_REPLACE" in error
    assert texts_of(settings, "wikipedia:Mona Lisa") == [LEONARDO]

    # The same for a file the operator ingested: named by its path (changed), or as a source.
    notes.write_text(POISON)
    by_path = served({"paths": [str(notes)]}, settings)
    by_source = served({"documents": [{"text": POISON, "source": file_source}]}, settings)
    for out in (by_path, by_source):
        assert "already stored by the operator" in failures(out)[file_source]
        assert out["replaced"] == []
    assert texts_of(settings, file_source) == ["Otters hold hands while they sleep."]

    # Asking again for what is stored changes nothing, and is not a failure.
    notes.write_text("Otters hold hands while they sleep.")
    assert served({"paths": [str(notes)]}, settings)["skipped"] == [file_source]


def test_chunks_stored_before_writers_were_recorded_are_the_operators(
    settings: IngestSettings,
) -> None:
    store = open_store(settings.deployment.store_path, COLLECTION, HashEmbeddings(), create=True)
    legacy = {"source": "wikipedia:Mona Lisa", "sha256": "0" * 64, "chunk": 0}
    store.add_texts([LEONARDO], metadatas=[legacy], ids=[chunk_id("wikipedia:Mona Lisa", 0)])

    out = served({"documents": [{"text": POISON, "source": "wikipedia:Mona Lisa"}]}, settings)
    assert "already stored by the operator" in failures(out)["wikipedia:Mona Lisa"]
    assert texts_of(settings, "wikipedia:Mona Lisa") == [LEONARDO]


def test_by_default_a_served_run_cannot_replace_what_another_run_stored(
    settings: IngestSettings,
) -> None:
    """Caller B may not overwrite what caller A stored: the server cannot tell them apart."""
    first = served(
        {"documents": [{"text": "Otters hold hands.", "source": "notes:otters"}, {"text": "Bees"}]},
        settings,
    )
    inline = [source for source in first["added"] if source.startswith("inline:")]
    assert sorted(first["added"]) == sorted(["notes:otters", *inline]) and len(inline) == 1
    assert writers_of(settings, "notes:otters") == {"served"}

    again = served({"documents": [{"text": POISON, "source": "notes:otters"}]}, settings)
    assert again["replaced"] == [] and again["added"] == [] and again["chunks"] == 0
    error = failures(again)["notes:otters"]
    assert error == (
        "notes:otters: already stored by a run of the ingest graph; this server does not let "
        "runs replace it (setting ingest_run_replace, environment variable "
        "CRAG_INGEST_RUN_REPLACE)"
    )
    assert texts_of(settings, "notes:otters") == ["Otters hold hands."]
    # The same content again is skipped, not a failure; new sources are still added.
    same = served(
        {
            "documents": [
                {"text": "Otters hold hands.", "source": "notes:otters"},
                {"text": "Bees make honey.", "source": "notes:bees"},
            ]
        },
        settings,
    )
    assert same["skipped"] == ["notes:otters"] and same["added"] == ["notes:bees"]
    assert same["failed"] == []

    # The operator may replace anything, and the document is then the operator's.
    ingest_into_store(
        [], settings, QUIET, documents=[inline_document("Otters eat fish.", "notes:otters")]
    )
    assert writers_of(settings, "notes:otters") == {"operator"}


def test_served_lets_runs_replace_what_runs_stored_but_not_the_operators(
    settings: IngestSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    mona = inline_document(LEONARDO, source="wikipedia:Mona Lisa")
    ingest_into_store([], settings, QUIET, documents=[mona])
    monkeypatch.setenv("CRAG_INGEST_RUN_REPLACE", "served")
    served({"documents": [{"text": "Otters hold hands.", "source": "notes:otters"}]}, settings)

    out = served(
        {
            "documents": [
                {"text": "Otters sleep afloat.", "source": "notes:otters"},
                {"text": POISON, "source": "wikipedia:Mona Lisa"},
            ]
        },
        settings,
    )
    assert out["replaced"] == ["notes:otters"]
    assert texts_of(settings, "notes:otters") == ["Otters sleep afloat."]
    assert list(failures(out)) == ["wikipedia:Mona Lisa"]
    assert "already stored by the operator" in failures(out)["wikipedia:Mona Lisa"]
    assert texts_of(settings, "wikipedia:Mona Lisa") == [LEONARDO]


def test_all_lets_served_runs_replace_the_operators_documents(
    settings: IngestSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    mona = inline_document(LEONARDO, source="wikipedia:Mona Lisa")
    ingest_into_store([], settings, QUIET, documents=[mona])
    monkeypatch.setenv("CRAG_INGEST_RUN_REPLACE", "all")

    out = served({"documents": [{"text": POISON, "source": "wikipedia:Mona Lisa"}]}, settings)
    assert out["replaced"] == ["wikipedia:Mona Lisa"] and out["failed"] == []
    assert texts_of(settings, "wikipedia:Mona Lisa") == [POISON]
    assert writers_of(settings, "wikipedia:Mona Lisa") == {"served"}
    again = served({"documents": [{"text": LEONARDO, "source": "wikipedia:Mona Lisa"}]}, settings)
    assert again["replaced"] == ["wikipedia:Mona Lisa"] and again["failed"] == []


def test_a_bad_ingest_run_replace_is_refused(
    settings: IngestSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crag.settings.setting_checks import InvalidSettingError
    from crag.vectorstore.sources import served_writer

    message = "setting ingest_run_replace must be one of 'none', 'served', 'all', not 'true'"
    with pytest.raises(InvalidSettingError) as caught:
        IngestSettings(deployment=deployment_with(ingest_run_replace="true"))
    assert str(caught.value) == message
    with pytest.raises(InvalidSettingError, match="ingest_run_replace is a deployment setting"):
        IngestContext(ingest_run_replace="all")  # type: ignore[call-arg]  # not a run's to set
    monkeypatch.setenv("CRAG_INGEST_RUN_REPLACE", "true")
    with pytest.raises(InvalidSettingError, match="must be one of 'none', 'served', 'all'"):
        served({"documents": [{"text": "Otters hold hands."}]}, settings)
    # The served graph reads the environment when a run starts: the run is refused too.
    from crag.app.graphs import ingest_graph

    monkeypatch.setenv("CRAG_STORE_PATH", settings.deployment.store_path)
    with pytest.raises(InvalidSettingError, match="CRAG_INGEST_RUN_REPLACE must be one of"):
        ingest_graph.invoke({"documents": [{"text": "Otters hold hands."}]})
    with pytest.raises(ValueError, match="must be one of 'none', 'served', 'all'"):
        served_writer("true")


def test_a_document_planted_before_the_operator_ingests_it_becomes_the_operators(
    tmp_path: Path, settings: IngestSettings
) -> None:
    """A caller stores a file's exact text under its path first, to replace it later."""
    notes = tmp_path / "notes.txt"
    notes.write_text("Otters hold hands while they sleep.")
    source = str(notes.absolute())
    planted = served({"paths": [str(notes)]}, settings)
    assert planted["added"] == [source] and writers_of(settings, source) == {"served"}

    report = ingest_into_store([notes], settings, QUIET)
    assert report.skipped == [source] and report.chunks_added == 0  # nothing embedded again
    assert writers_of(settings, source) == {"operator"}
    out = served({"documents": [{"text": POISON, "source": source}]}, settings)
    assert "already stored by the operator" in failures(out)[source]


def jsonl(path: Path, *texts: str) -> None:
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))


def test_a_served_jsonl_reingest_cannot_remove_the_operators_lines(
    tmp_path: Path, settings: IngestSettings
) -> None:
    data = tmp_path / "data.jsonl"
    jsonl(data, "Otters hold hands.", "Bees make honey.")
    ingest_into_store([data], settings, QUIET)
    line2 = f"{data.absolute()}#line2"

    jsonl(data, "Otters hold hands.")
    out = served({"paths": [str(data)]}, settings)
    assert out["removed"] == [] and out["skipped"] == [f"{data.absolute()}#line1"]
    error = failures(out)[line2]
    assert f"no longer in {data.absolute()}" in error and "does not let runs remove it" in error
    assert texts_of(settings, line2) == ["Bees make honey."]

    # The operator's own re-ingest removes it, as before.
    assert ingest_into_store([data], settings, QUIET).removed == [line2]


def test_a_served_jsonl_reingest_removes_lines_served_runs_wrote_only_if_allowed(
    tmp_path: Path, settings: IngestSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data.jsonl"
    jsonl(data, "Otters hold hands.", "Bees make honey.")
    served({"paths": [str(data)]}, settings)
    jsonl(data, "Otters hold hands.")
    line2 = f"{data.absolute()}#line2"

    kept = served({"paths": [str(data)]}, settings)
    assert kept["removed"] == [] and kept["skipped"] == [f"{data.absolute()}#line1"]
    error = failures(kept)[line2]
    assert "stored by a run of the ingest graph" in error and "does not let runs remove it" in error
    assert texts_of(settings, line2) == ["Bees make honey."]

    monkeypatch.setenv("CRAG_INGEST_RUN_REPLACE", "served")
    out = served({"paths": [str(data)]}, settings)
    assert out["removed"] == [line2] and out["failed"] == []


def test_pruning_is_the_operators(tmp_path: Path) -> None:
    from crag.vectorstore.sources import served_writer

    store = open_store(tmp_path / "store", COLLECTION, HashEmbeddings(), create=True)
    with pytest.raises(ValueError, match="pruning is for the operator only"):
        ingest_paths(
            [tmp_path],
            store,
            IngestOptions(prune=True, writer=served_writer("all"), progress=False),
        )


# -- 2. crag ingest is the operator's: CRAG_INGEST_ROOT binds served runs only ----------------


def test_crag_ingest_is_not_confined_by_the_ingest_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from crag.app.cli.commands import main

    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.md").write_text("The operator's own notes.")
    (root / "link.md").symlink_to(outside / "secret.md")
    monkeypatch.setenv("CRAG_INGEST_ROOT", str(root))
    store = str(tmp_path / "store")

    assert main(["ingest", "--store", store, str(root / ".." / "outside"), str(root)]) == 0
    assert "2 added" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["ingest", "--help"])
    assert "CRAG_INGEST_ROOT confines only runs of the served ingest graph" in " ".join(
        capsys.readouterr().out.split()
    )
    # A served run under the same root is refused the way out.
    settings = IngestSettings(deployment=deployment_with(store_path=store, collection="crag"))
    with pytest.raises(InvalidIngestInputError, match="outside"):
        served({"paths": [str(root / ".." / "outside")]}, settings)


# -- 3 and 6. symbolic link loops and NUL bytes: one clear line for that path ------------------


def make_loop(folder: Path) -> Path:
    """``a.txt -> b.txt -> a.txt`` in ``folder``; returns ``a.txt``."""
    (folder / "b.txt").symlink_to("a.txt")
    (folder / "a.txt").symlink_to("b.txt")
    return folder / "a.txt"


@pytest.mark.parametrize("with_root", [False, True], ids=["no-root", "root"])
def test_a_symlink_loop_or_a_nul_byte_fails_that_path_only(
    tmp_path: Path, settings: IngestSettings, monkeypatch: pytest.MonkeyPatch, with_root: bool
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    loop = make_loop(root)
    (root / "ok.md").write_text("Otters hold hands.")
    if with_root:
        monkeypatch.setenv("CRAG_INGEST_ROOT", str(root))
    nul = str(root / "bad\0name.txt")

    out = served({"paths": [str(loop), nul, str(root / "ok.md")]}, settings)
    assert out["added"] == [str((root / "ok.md").absolute())]
    failed = failures(out)
    assert set(failed) == {str(loop), nul}
    assert failed[str(loop)] == (
        f"{loop}: symbolic link loop (following its links leads back to itself, never to a file)"
    )
    assert failed[nul].endswith("not a valid path (it contains a NUL character)")
    assert all("\n" not in error for error in failed.values())


def test_a_symlink_loop_inside_the_root_is_reported_as_a_loop(
    tmp_path: Path, settings: IngestSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    make_loop(root)
    (root / "ok.md").write_text("Otters hold hands.")
    monkeypatch.setenv("CRAG_INGEST_ROOT", str(root))

    out = served({"paths": [str(root)]}, settings)
    assert len(out["added"]) == 1
    for error in failures(out).values():
        assert "symbolic link loop" in error and "outside" not in error
    # The Python API with a root says the same.
    store = stored(settings)
    direct = ingest_paths([root], store, IngestOptions(root=root, progress=False))
    assert all("symbolic link loop" in error for _, error in direct.failed)


def test_crag_ingest_reports_a_symlink_loop_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from crag.app.cli.commands import main

    loop = make_loop(tmp_path)
    (tmp_path / "ok.md").write_text("Otters hold hands.")
    store = str(tmp_path / "store")
    assert main(["ingest", "--store", store, str(loop), str(tmp_path / "ok.md")]) == 0
    captured = capsys.readouterr()
    assert "1 added" in captured.out and "symbolic link loop" in captured.err
    assert "Traceback" not in captured.err
    assert main(["ingest", "--store", store, str(loop)]) == 1  # nothing stored: exit code 1


# -- 4. binary data is not text -----------------------------------------------------------------


def test_binary_files_and_documents_are_refused(tmp_path: Path, settings: IngestSettings) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "zeros.txt").write_bytes(b"\0" * 100_000)
    (docs / "controls.md").write_bytes(bytes(range(1, 9)) * 1000 + b"some words")
    (docs / "lines.jsonl").write_text(
        json.dumps({"text": "\0" * 50}) + "\n" + json.dumps({"text": "Bees make honey."}) + "\n"
    )
    (docs / "tabs.txt").write_text("a\tb\tc\r\nOtters\fhold hands.\n")

    out = served(
        {"paths": [str(docs)], "documents": [{"text": "x\0y\0z", "source": "notes:nul"}]}, settings
    )
    failed = failures(out)
    zeros = str(docs / "zeros.txt")
    assert failed[zeros] == f"{zeros}: binary data, not text (100,000 NUL characters)"
    assert "control characters" in failed[str(docs / "controls.md")]
    assert "NUL characters" in failed[f"{(docs / 'lines.jsonl').absolute()}#line1"]
    assert "binary data, not text" in failed["notes:nul"]
    assert sorted(out["added"]) == sorted(
        [f"{(docs / 'lines.jsonl').absolute()}#line2", str((docs / "tabs.txt").absolute())]
    )
    assert out["chunks"] == 2


# -- 5. the input error names the bad element -------------------------------------------------


@pytest.mark.parametrize(
    ("paths", "message"),
    [
        ([1, 2], "paths[0] must be a string, not int (1)"),
        (["ok.md", None], "paths[1] must be a string, not NoneType (None)"),
        ("notes.md", "paths must be a list of strings, not str: 'notes.md'"),
    ],
)
def test_bad_paths_name_the_bad_element(settings: IngestSettings, paths: Any, message: str) -> None:
    with pytest.raises(InvalidIngestInputError) as caught:
        served({"paths": paths}, settings)
    assert str(caught.value) == message
