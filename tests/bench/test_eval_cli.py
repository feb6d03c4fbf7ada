"""`crag-bench eval` from the command line: a real --limit 2 run, a PopQA file over a user corpus,
determinism and bad input."""

import json
from pathlib import Path
from typing import Any

import pytest

from crag_bench.cli import main
from crag_bench.experiments import EXPERIMENTS
from crag_bench.runner import removed_count

pytestmark = pytest.mark.integration

EXPECTED_PLOTS = ("accuracy.png", "gold_removal.png", "actions.png", "latency.png")
LIMIT = 2
"""Dev questions of the CI run: enough for every experiment and both sides of the gold removal
(one question hidden, one kept). Three made the run a third longer and checked nothing more."""
REMOVED = removed_count(LIMIT, 50)
"""Questions whose gold documents the default 50% removal hides."""
INGESTION_DOCUMENTS = 20
"""Summaries the ingestion measurement ingests: its figures hold on 20 as on the default 200,
which cost 10 to 20 s more of embedding (twice 200 chunks)."""
QUICK = ["--limit", str(LIMIT), "--corpus-size", "40", "--max-new-tokens", "24"]
"""The CI run's questions, store and answers: 24 tokens, not the default 48 (no assertion reads
an answer's length; the looping answers decoded to 48 made a seventh of the run's time)."""


def _results(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "results.json").read_text(encoding="utf-8"))
    return data


def _rows(out: Path) -> list[dict[str, Any]]:
    lines = (out / "rows.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CI run: two dev questions, every experiment, performance measured."""
    out = tmp_path_factory.mktemp("eval") / "quick"
    args = ["eval", *QUICK, "--out", str(out), "--ingestion-documents", str(INGESTION_DOCUMENTS)]
    assert main(args) == 0
    return out


def test_quick_run_writes_every_figure(quick_run: Path) -> None:
    results = _results(quick_run)
    assert results["meta"]["questions"] == LIMIT
    assert "simulated" in results["meta"]["web"]
    names = [e["name"] for e in results["experiments"]]
    assert names == [e.name for e in EXPERIMENTS]
    for experiment in results["experiments"]:
        assert experiment["questions"] == LIMIT, experiment["name"]
        assert 0.0 <= experiment["accuracy"] <= 1.0
        assert experiment["errors"] == 0, experiment["name"]
    crag = next(e for e in results["experiments"] if e["name"] == "crag")
    assert sum(crag["actions"].values()) == LIMIT
    only = next(e for e in results["experiments"] if e["name"] == "crag-only-incorrect")
    assert only["actions"]["incorrect"] == LIMIT and only["searched_web"] == LIMIT
    assert results["gold_removal"]["questions"] == LIMIT
    assert results["gold_removal"]["share"] == 50
    assert 0 < REMOVED < LIMIT
    assert results["gold_removal"]["removed_questions"] == REMOVED
    removed = next(e for e in results["experiments"] if e["name"] == "rag-gold-removed")
    assert (removed["removed"]["questions"], removed["kept"]["questions"]) == (
        REMOVED,
        LIMIT - REMOVED,
    )
    comparisons = results["statistics"]["comparisons"]
    assert {(c["a"], c["b"], c["scope"]) for c in comparisons} >= {
        ("crag", "rag", "all"),
        ("crag", "oracle", "all"),
        ("crag", "no-retrieval", "all"),
        ("crag-gold-removed", "rag-gold-removed", "all"),
        ("crag-gold-removed", "rag-gold-removed", "removed"),
    }
    assert len(comparisons) == len(EXPERIMENTS) - 1 + 2
    for comparison in comparisons:
        for measure in ("accuracy", "knowledge_recall"):
            figures = comparison[measure]
            assert figures["low"] <= figures["difference"] <= figures["high"], comparison
            assert 0 <= figures["p_value"] <= 1
    assert all(v is not None for curve in results["gold_removal"]["curves"].values() for v in curve)
    latency = results["latency"]["experiments"]
    assert set(latency) == {"no-retrieval", "rag", "crag"}
    assert latency["crag"]["stages"]["grade"]["n"] == LIMIT
    assert results["latency"]["crag_over_rag"]["median_total"] > 0
    performance = results["performance"]
    assert performance["cold_start"]["error"] is None
    assert performance["cold_start"]["seconds"] > 0
    assert performance["cold_start"]["peak_rss_mb"] > 100
    assert performance["ingestion"]["documents"] == INGESTION_DOCUMENTS
    assert performance["ingestion"]["chunks_written"] == performance["ingestion"]["chunks"]
    assert performance["ingestion"]["ingest_over_raw"] > 0
    assert performance["web_searches"] > 0


def test_quick_run_rows_show_what_each_run_did(quick_run: Path) -> None:
    rows = _rows(quick_run)
    counted = [r for r in rows if r["counted"]]
    assert len(counted) == LIMIT * len(EXPERIMENTS)
    # The questions outside the removed share run once more per gold-removed experiment.
    assert len(rows) == len(counted) + (LIMIT - REMOVED) * sum(e.gold_removed for e in EXPERIMENTS)
    removed = [r for r in rows if r["experiment"] == "rag-gold-removed" and r["gold_removed"]]
    assert len(removed) == LIMIT and all(r["gold_in_top_k"] is False for r in removed)
    oracle = [r for r in rows if r["experiment"] == "oracle"]
    assert all(r["gold_in_top_k"] is True and 0 < r["passages"] <= 10 for r in oracle)
    no_retrieval = [r for r in rows if r["experiment"] == "no-retrieval"]
    assert all(r["passages"] == 0 and r["gold_in_top_k"] is None for r in no_retrieval)
    rag = [r for r in rows if r["experiment"] == "rag"]
    assert all(r["passages"] == 10 and r["internal"] == 10 for r in rag)
    assert all(r["answer"] for r in rows)


def test_quick_run_writes_its_report_and_plots(quick_run: Path) -> None:
    report = (quick_run / "report.md").read_text(encoding="utf-8")
    assert "simulated" in report
    assert "| crag |" in report
    assert "## Is CRAG better? Paired statistics" in report
    assert f"**crag vs rag** ({LIMIT} questions)" in report
    for plot in EXPECTED_PLOTS:
        data = (quick_run / plot).read_bytes()
        assert data.startswith(b"\x89PNG"), plot
        assert f"]({plot})" in report


def test_same_questions_give_the_same_answers(quick_run: Path, tmp_path: Path) -> None:
    """A second, independent run (its own store, an empty answer cache) answers alike.

    CRAG and CRAG with the gold removed cover the retriever, evaluator, refinement, web and
    generator, with the full store and a hidden-gold view; RAG's ten-passage prompts and the
    curve-only runs would triple the run's time and prove nothing more about determinism.
    """
    again = tmp_path / "again"
    args = ["eval", *QUICK, "--out", str(again)]
    extra = ["--experiments", "crag,crag-gold-removed", "--no-gold-removal-curve"]
    assert main([*args, *extra, "--no-performance"]) == 0
    first = {(r["experiment"], r["id"], r["gold_removed"]): r["answer"] for r in _rows(quick_run)}
    second = {(r["experiment"], r["id"], r["gold_removed"]): r["answer"] for r in _rows(again)}
    assert {e for e, _, _ in second} == {"crag", "crag-gold-removed"}
    assert len(second) == 2 * LIMIT and sum(removed for _, _, removed in second) == REMOVED
    assert second == {key: first[key] for key in second}


def test_popqa_questions_over_a_users_corpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "mona.txt").write_text(
        "The Mona Lisa is a portrait painted by Leonardo da Vinci. It hangs in the Louvre.",
        encoding="utf-8",
    )
    (corpus / "leaves.txt").write_text(
        "Photosynthesis turns light into chemical energy in the leaves of plants.",
        encoding="utf-8",
    )
    questions = tmp_path / "popqa.tsv"
    questions.write_text(
        "id\tquestion\tpossible_answers\n"
        '1\tWho painted the Mona Lisa?\t["Leonardo da Vinci", "Leonardo"]\n'
        '2\tWhere does photosynthesis happen?\t["leaves"]\n',
        encoding="utf-8",
    )
    out = tmp_path / "out"
    args = ["eval", "--questions", str(questions), "--corpus", str(corpus), "--out", str(out)]
    assert main([*args, "--experiments", "rag,crag", "--no-performance"]) == 0
    results = _results(out)
    assert [e["name"] for e in results["experiments"]] == ["rag", "crag"]
    assert results["meta"]["questions"] == 2
    assert results["data"]["with_gold_document"] == 0
    assert "your documents" in results["meta"]["store"]
    rows = _rows(out)
    assert {r["id"] for r in rows} == {"1", "2"}
    assert all(r["passages"] == 2 for r in rows if r["experiment"] == "rag")
    assert "| crag |" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--experiments", "crag,teleport"], "unknown experiment(s) teleport"),
        (["--gold-removed-share", "120"], "--gold-removed-share must be a percent"),
        (["--corpus", "docs"], "--corpus needs --questions"),
        (["--limit", "-1"], "--limit must be"),
        (["--corpus-size", "-3"], "--corpus-size must be"),
        (["--ingestion-documents", "0"], "--ingestion-documents must be positive"),
        (["--set", "top_k=ten"], "top_k"),
    ],
)
def test_bad_options_are_one_line_errors(
    extra: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "--out", str(tmp_path / "out"), *extra]) == 2
    assert message in capsys.readouterr().err


def test_bad_question_files_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"question": "Who?"}\n', encoding="utf-8")
    assert main(["eval", "--questions", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "possible_answers" in capsys.readouterr().err
    ids = tmp_path / "ids.json"
    ids.write_text('["not-an-id"]', encoding="utf-8")
    assert main(["eval", "--ids", str(ids), "--out", str(tmp_path / "o")]) == 2
    assert "not FanOutQA dev question ids" in capsys.readouterr().err
