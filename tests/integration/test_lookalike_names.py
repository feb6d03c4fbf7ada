r"""Two files whose names differ only in Unicode form are two documents.

On Linux ``café.md`` with a composed ``é`` (NFC) and ``cafe\u0301.md`` (NFD) are two files. Each
is its own source: ``crag remove`` of one removes that one alone, a name that matches only the
other one's look-alike removes nothing and says so, and the decomposed name prints as
``cafe\u0301.md`` wherever a source is shown. Names with no file behind them (``wikipedia:Pelé``)
are still one name in every Unicode form. Real ``crag`` processes with the shipped models, real
Chroma on disk; the web search (asked only if no passage is judged right) goes to a search server
on 127.0.0.1 that finds nothing.
"""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from crag.app.cli.commands import main
from crag.app.cli.terminal_text import terminal_text
from crag.graph.ingest_graph import build_ingest_graph
from crag.settings.context import IngestContext
from crag.settings.deployment import deployment_with
from crag.vectorstore.sources import lookalike_key, normalise_path, normalise_source
from crag.vectorstore.store import open_store
from tests.hash_embeddings import HashEmbeddings
from tests.warm_support import crag
from tests.websearch_server import LOOPBACK_HOSTS, WebsearchServer

pytestmark = pytest.mark.integration

COMPOSED = unicodedata.normalize("NFC", "café.md")
DECOMPOSED = unicodedata.normalize("NFD", "café.md")
OSPREY = "The Osprey 11 bar is on the quay, by the ferry."
HERON = "The Heron 99 bar is on the hill, above the town."


def lookalike_folder(root: Path) -> Path:
    """``root/look`` holding ``café.md`` composed (the Osprey bar) and decomposed (the Heron)."""
    folder = root / "look"
    folder.mkdir()
    (folder / COMPOSED).write_text(OSPREY, encoding="utf-8")
    (folder / DECOMPOSED).write_text(HERON, encoding="utf-8")
    if len(list(folder.iterdir())) != 2:
        pytest.skip("this file system gives both spellings of café.md one file")
    return folder


def stored_sources(store: Path, collection: str) -> set[str]:
    opened = open_store(store, collection, HashEmbeddings(), create=False)
    return {str(meta["source"]) for meta in opened.get(include=["metadatas"])["metadatas"] or []}


def test_names_with_a_file_keep_their_characters_names_without_one_do_not() -> None:
    path = f"/srv/look/{DECOMPOSED}"
    assert normalise_source(path) == path != unicodedata.normalize("NFC", path)
    assert normalise_source("/srv/my  docs/./a.txt") == "/srv/my  docs/a.txt"
    assert normalise_source(unicodedata.normalize("NFD", "wikipedia:Pelé")) == "wikipedia:Pelé"
    assert lookalike_key(path) == lookalike_key(f"/srv/look/{COMPOSED}")
    assert terminal_text(path) == "/srv/look/cafe\\u0301.md"
    assert terminal_text(f"/srv/look/{COMPOSED}") == f"/srv/look/{COMPOSED}"


def test_crag_remove_of_one_lookalike_file_keeps_the_other_which_still_answers(
    tmp_path: Path,
) -> None:
    folder = lookalike_folder(tmp_path)
    composed, decomposed = str(folder / COMPOSED), str(folder / DECOMPOSED)
    env = {name: value for name, value in os.environ.items() if not name.startswith("CRAG_")}
    store = ["--store", str(tmp_path / "store")]

    ingested = crag("ingest", "--no-server", *store, "look", env=env, cwd=tmp_path)
    assert ingested.returncode == 0, ingested.stderr[-2000:]
    assert "2 added" in ingested.stdout
    assert stored_sources(tmp_path / "store", "crag") == {composed, decomposed}

    removed = crag("remove", *store, f"look/{COMPOSED}", env=env, cwd=tmp_path)
    assert removed.returncode == 0, removed.stderr[-2000:]
    assert removed.stdout.splitlines() == [f"removed: {composed}", "1 removed, 0 not found"]
    assert stored_sources(tmp_path / "store", "crag") == {decomposed}

    again = crag("remove", *store, f"look/{COMPOSED}", env=env, cwd=tmp_path)
    assert again.returncode == 1 and "0 removed, 1 not found" in again.stdout
    assert "look-alike" in again.stderr and "look/cafe\\u0301.md (nothing removed" in again.stderr
    assert stored_sources(tmp_path / "store", "crag") == {decomposed}

    with WebsearchServer() as web:
        web_settings = ["--set", "search_provider=searxng", "--set", f"search_url={web.url}"]
        web_settings += ["--set", f"allowed_hosts={LOOPBACK_HOSTS}"]
        asked = crag(
            "ask", "--no-server", "-q", *store, *web_settings, "Which bar is on the hill?",
            env=env, cwd=tmp_path,
        )  # fmt: skip
    assert asked.returncode == 0, asked.stderr[-2000:]
    answer, sources = asked.stdout.split("Sources:\n")
    assert "Heron" in answer and "Osprey" not in asked.stdout, asked.stdout
    assert f"{folder}/cafe\\u0301.md" in sources and DECOMPOSED not in asked.stdout, sources


@pytest.fixture
def hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    import crag.vectorstore.embeddings

    monkeypatch.setattr(
        crag.vectorstore.embeddings, "locked_embeddings", lambda name: HashEmbeddings()
    )
    for name in ("CRAG_INGEST_ROOT", "CRAG_INGEST_RUN_REPLACE", "CRAG_SERVE_SOCKET"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("hash_embedder")
def test_removing_the_decomposed_name_removes_that_file_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = lookalike_folder(tmp_path)
    store = ["--store", str(tmp_path / "store"), "--collection", "look"]
    assert main(["ingest", "--no-server", *store, str(folder)]) == 0
    assert main(["remove", *store, str(folder / DECOMPOSED)]) == 0
    out = capsys.readouterr().out
    assert f"removed: {folder}/cafe\\u0301.md\n1 removed, 0 not found" in out, out
    assert stored_sources(tmp_path / "store", "look") == {str(folder / COMPOSED)}


@pytest.mark.usefixtures("hash_embedder")
def test_a_served_run_naming_the_operators_decomposed_file_exactly_is_refused(
    tmp_path: Path,
) -> None:
    folder = lookalike_folder(tmp_path)
    (folder / COMPOSED).unlink()
    store = ["--store", str(tmp_path / "store"), "--collection", "look"]
    assert main(["ingest", "--no-server", *store, str(folder)]) == 0
    operators = normalise_path(folder / DECOMPOSED)
    deployment = deployment_with(
        store_path=str(tmp_path / "store"), collection="look", upload_dir=str(tmp_path)
    )
    payload: Any = {"documents": [{"text": "planted", "source": operators}]}
    out = build_ingest_graph(deployment=deployment).invoke(payload, context=IngestContext())
    assert out["added"] == [] and [f["source"] for f in out["failed"]] == [operators]
    assert "already stored by the operator" in out["failed"][0]["error"]
    assert stored_sources(tmp_path / "store", "look") == {operators}
