"""The eval report: results.json, rows.jsonl, report.md and the PNG plots."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from crag_bench.eval_report import (
    PLOTS_SKIPPED_NOTE,
    main_table,
    render_report,
    write_report,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOT_NAMES = ("accuracy.png", "gold_removal.png", "actions.png", "latency.png")


def _experiment(
    name: str, group: str, correct: int, actions: tuple[int, int, int] = (0, 0, 0)
) -> dict[str, Any]:
    return {
        "name": name,
        "group": group,
        "graph": "crag" if "crag" in name else "rag",
        "description": f"{name} description",
        "settings": {},
        "questions": 4,
        "correct": correct,
        "accuracy": correct / 4,
        "answer_reached_generator": 0.5,
        "actions": dict(zip(("correct", "ambiguous", "incorrect"), actions, strict=True)),
        "searched_web": actions[1] + actions[2],
        "errors": 0,
        "notes": 0,
    }


def _rate(
    a: float, b: float, low: float, high: float, counts: tuple[int, int], p: float, verdict: str
) -> dict[str, Any]:
    return {
        "a": a,
        "b": b,
        "difference": a - b,
        "low": low,
        "high": high,
        "a_only": counts[0],
        "b_only": counts[1],
        "p_value": p,
        "significant": verdict != "not significant",
        "verdict": verdict,
    }


def _comparison(
    a: str, b: str, accuracy: dict[str, Any], recall: dict[str, Any], scope: str = "all"
) -> dict[str, Any]:
    return {
        "a": a,
        "b": b,
        "scope": scope,
        "questions": 4,
        "accuracy": accuracy,
        "knowledge_recall": recall,
    }


def _statistics() -> dict[str, Any]:
    same = _rate(0.5, 0.5, 0.0, 0.0, (0, 0), 1.0, "not significant")
    return {
        "method": "paired over the questions both ran.",
        "resamples": 10000,
        "confidence": 0.95,
        "seed": 7,
        "comparisons": [
            _comparison(
                "crag",
                "no-retrieval",
                _rate(0.75, 0.25, 0.25, 0.75, (2, 0), 0.0004, "better"),
                same,
            ),
            _comparison(
                "crag",
                "rag",
                _rate(0.75, 0.5, -0.25, 0.75, (1, 0), 1.0, "not significant"),
                same,
            ),
            _comparison(
                "crag",
                "crag-without-correct",
                _rate(0.75, 0.5, -0.25, 0.75, (1, 0), 1.0, "not significant"),
                same,
            ),
            _comparison(
                "crag-gold-removed",
                "rag-gold-removed",
                _rate(0.5, 0.25, 0.0, 0.5, (1, 0), 1.0, "not significant"),
                same,
            ),
            _comparison(
                "crag-gold-removed",
                "rag-gold-removed",
                _rate(1.0, 0.0, 1.0, 1.0, (2, 0), 0.5, "not significant"),
                _rate(1.0, 0.5, 0.5, 0.5, (1, 0), 0.01, "better"),
                scope="removed",
            ),
        ],
    }


def _gold_removed(name: str, correct: int, removed_correct: int) -> dict[str, Any]:
    figures = _experiment(name, "retriever", correct)
    figures["removed"] = {
        "questions": 2,
        "correct": removed_correct,
        "accuracy": removed_correct / 2,
        "answer_reached_generator": 0.25,
    }
    figures["kept"] = {
        "questions": 2,
        "correct": correct - removed_correct,
        "accuracy": (correct - removed_correct) / 2,
        "answer_reached_generator": 0.75,
    }
    return figures


def _spread(median: float | None, p95: float | None, n: int) -> dict[str, Any]:
    return {"median": median, "p95": p95, "n": n}


def _stages(**medians: float) -> dict[str, Any]:
    order = ("retrieve", "grade", "refine", "rewrite", "search", "generate")
    return {
        s: _spread(
            medians.get(s), medians[s] * 1.5 if s in medians else None, 4 if s in medians else 0
        )
        for s in order
    }


def make_results() -> dict[str, Any]:
    """A small but complete ``results`` dict, shaped like ``runner.summarise``'s."""
    return {
        "meta": {
            "questions": 4,
            "question_source": "synthetic test questions",
            "store": "a tiny test store",
            "web": "The web is simulated: a BM25 test service.",
            "generator": "fake-generator",
            "max_new_tokens": 32,
            "evaluator": "embedding",
            "upper_threshold": 0.59,
            "lower_threshold": -0.99,
            "top_k": 5,
            "seed": 7,
            "seconds": 123.456,
            "machine": {
                "platform": "Linux",
                "python": "3.11.7",
                "cpus": 2,
                "torch": "2.0",
                "torch_threads": 2,
                "cuda": False,
                "load_average_at_start": 1.25,
            },
            "match": "a gold answer appears as whole tokens",
        },
        "data": {
            "questions": 4,
            "with_gold_document": 4,
            "answer_in_gold_document": 3,
            "gold_documents_known": 4,
        },
        "experiments": [
            _experiment("no-retrieval", "main", 1),
            _experiment("rag", "main", 2),
            _experiment("crag", "main", 3, (2, 1, 1)),
            _experiment("crag-without-correct", "actions", 2, (0, 3, 1)),
            _experiment("rag-web", "web", 2),
            _gold_removed("rag-gold-removed", 1, 0),
            _gold_removed("crag-gold-removed", 2, 2),
        ],
        "statistics": _statistics(),
        "gold_removal": {
            "levels": [0, 25, 50, 75, 100],
            "questions": 4,
            "share": 50,
            "removed_questions": 2,
            "curves": {
                "rag": [0.5, 0.5, 0.25, None, 0.0],
                "crag": [0.75, 0.75, 0.5, 0.5, 0.5],
            },
        },
        "agreement": {
            "questions": 4,
            "table": {
                "correct": {"gold_in_top_k": 11, "gold_not_in_top_k": 12},
                "ambiguous": {"gold_in_top_k": 13, "gold_not_in_top_k": 14},
                "incorrect": {"gold_in_top_k": 15, "gold_not_in_top_k": 16},
            },
            "agreement": 0.3456,
            "agreement_decided_only": 0.5678,
        },
        "latency": {
            "experiments": {
                "no-retrieval": {
                    "total": _spread(2.0, 3.0, 4),
                    "without_search": _spread(2.0, 3.0, 4),
                    "stages": _stages(generate=1.9),
                },
                "rag": {
                    "total": _spread(3.0, 4.0, 4),
                    "without_search": _spread(3.0, 4.0, 4),
                    "stages": _stages(retrieve=0.1, refine=0.01, generate=2.8),
                },
                "crag": {
                    "total": _spread(3.3, 5.0, 4),
                    "without_search": _spread(3.1, 4.5, 4),
                    "stages": _stages(
                        retrieve=0.1, grade=0.3, refine=0.1, search=0.2, generate=2.6
                    ),
                },
            },
            "crag_over_rag": {
                "median_total": 1.1,
                "median_without_search": 1.0333,
                "p95_total": 1.25,
            },
        },
        "performance": {
            "cold_start": {"seconds": 12.345, "peak_rss_mb": 900.4, "error": None},
            "ingestion": {
                "documents": 10,
                "chunks": 40,
                "chunks_written": 40,
                "raw_embed_seconds": 2.0,
                "ingest_seconds": 2.5,
                "raw_embed_chunks_per_s": 20.0,
                "ingest_chunks_per_s": 16.0,
                "ingest_over_raw": 0.8,
            },
            "peak_rss_mb": 1500.0,
            "web_searches": 9,
        },
        "rows": [
            {"experiment": "crag", "id": "q1", "question": "Who?", "correct": True},
            {"experiment": "rag", "id": "q1", "question": "Who? ü", "correct": False},
        ],
    }


def test_write_report_writes_everything(tmp_path: Path) -> None:
    results = make_results()
    written = write_report(results, tmp_path)

    names = {p.name for p in written}
    assert {"results.json", "rows.jsonl", "report.md", *PLOT_NAMES} == names
    assert all(p.exists() for p in written)

    figures = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert "rows" not in figures
    assert figures["meta"]["seed"] == 7
    lines = (tmp_path / "rows.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == results["rows"]

    for name in PLOT_NAMES:
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG_MAGIC), name
        assert len(data) > 5000, name


def test_report_contents(tmp_path: Path) -> None:
    write_report(make_results(), tmp_path)
    report = (tmp_path / "report.md").read_text(encoding="utf-8")

    assert report.startswith("# CRAG evaluation: synthetic test questions\n")
    assert main_table(make_results()).splitlines()[0] in report
    assert (
        "| crag | main | 3 / 4 | 0.750 | 0.500 | reference | — | — | 2 / 1 / 1 | 2 | 0 |" in report
    )
    assert "the web was simulated" in report
    assert "The web is simulated: a BM25 test service." in report
    assert "a gold answer appears as whole tokens" in report
    assert "3 of 4" in report  # answer in the gold document
    assert "123.46 s" in report
    # Ablations: the difference to crag, signed, and whether it is significant.
    assert "| crag-without-correct |" in report
    assert "-0.250 | not significant |" in report
    # Gold removal: levels by curves, None as a dash.
    assert "| 75% | — | 0.500 |" in report
    # Agreement table and figures.
    assert "| correct | 11 | 12 |" in report
    assert "| ambiguous | 13 | 14 |" in report
    assert "| incorrect | 15 | 16 |" in report
    assert "0.346" in report
    assert "0.568" in report
    assert "Ambiguous agrees with neither" in report
    # Latency: stages (None as a dash), ratio and the paper's figures.
    assert "| rewrite | — | — | 0 |" in report
    assert "| generate | 2.60 | 3.90 | 4 |" in report
    assert "median total 1.100x" in report
    assert "1.033x" in report
    assert "0.512 s vs 0.363 s" in report
    # Performance.
    assert "12.35 s" in report
    assert "900 MB" in report
    assert "0.800x" in report
    # Plots linked relatively.
    for name in PLOT_NAMES:
        assert f"]({name})" in report
    assert "`crag-bench eval`" in report


def test_missing_sections(tmp_path: Path) -> None:
    results = make_results()
    del results["latency"]
    del results["performance"]
    del results["agreement"]
    results["gold_removal"] = {"levels": [0, 25, 50, 75, 100], "questions": 0, "curves": {}}
    results["experiments"] = []
    results["meta"]["seconds"] = None
    del results["meta"]["machine"]

    written = write_report(results, tmp_path)

    assert {p.name for p in written} == {"results.json", "rows.jsonl", "report.md"}
    assert not list(tmp_path.glob("*.png"))
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "No experiments were run." in report
    assert "No ablation experiments were run." in report
    assert "Not measured in this run" in report
    assert "No plots" in report


def test_crag_absent_and_none_figures(tmp_path: Path) -> None:
    results = make_results()
    results["experiments"] = [e for e in results["experiments"] if e["name"] != "crag"]
    results["experiments"][0]["accuracy"] = None
    results["latency"]["crag_over_rag"] = {}
    results["gold_removal"]["curves"] = {"rag": [None] * 5, "crag": [None] * 5}

    written = write_report(results, tmp_path)

    names = {p.name for p in written}
    assert "gold_removal.png" not in names
    assert "accuracy.png" in names
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "| crag (reference) |" not in report
    assert "| crag-without-correct | crag-without-correct description | 0.500 | — |" in report


def test_minimal_results(tmp_path: Path) -> None:
    written = write_report({"experiments": []}, tmp_path)
    assert {p.name for p in written} == {"results.json", "rows.jsonl", "report.md"}
    assert render_report({}).startswith("# CRAG evaluation")


def test_without_matplotlib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with caplog.at_level(logging.WARNING, logger="crag_bench.eval_report"):
        written = write_report(make_results(), tmp_path)

    assert {p.name for p in written} == {"results.json", "rows.jsonl", "report.md"}
    assert not list(tmp_path.glob("*.png"))
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert PLOTS_SKIPPED_NOTE in report
    assert "crag[eval]" in report
    assert "![" not in report
    assert "matplotlib" in caplog.text


def test_main_table_says_whether_crag_is_significantly_better() -> None:
    table = main_table(make_results())
    assert "| knowledge recall | crag - this: accuracy [95% CI] | McNemar p | crag vs this |" in (
        table
    )
    assert (
        "| no-retrieval | main | 1 / 4 | 0.250 | 0.500 | +0.500 [+0.250, +0.750] | < 0.001 "
        "| crag better |" in table
    )
    assert (
        "| rag | main | 2 / 4 | 0.500 | 0.500 | +0.250 [-0.250, +0.750] | 1.000 "
        "| not significant |" in table
    )
    # An experiment without a comparison gets dashes, not a verdict.
    assert "| rag-web | web | 2 / 4 | 0.500 | 0.500 | — | — | — |" in table


def test_statistics_section_states_every_verdict(tmp_path: Path) -> None:
    write_report(make_results(), tmp_path)
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    section = report.split("## Is CRAG better? Paired statistics", 1)[1].split("\n## ", 1)[0]
    assert "paired over the questions both ran. Bootstrap: 10000 resamples, seed 7." in section
    assert (
        "**crag vs rag** (4 questions): accuracy 0.750 vs 0.500, difference "
        "+0.250 [-0.250, +0.750] (95% CI), McNemar p 1.000: **not significant**; "
        "knowledge recall 0.500 vs 0.500" in section
    )
    assert (
        "knowledge recall 1.000 vs 0.500, difference +0.500 [+0.500, +0.500] (95% CI), "
        "McNemar p 0.010: **crag-gold-removed better**." in section
    )
    assert (
        "| crag - no-retrieval | every question both ran | 4 | +0.500 [+0.250, +0.750] "
        "| 2 / 0 | < 0.001 | crag better |" in section
    )
    assert (
        "| crag-gold-removed - rag-gold-removed | the questions whose gold was removed | 4 "
        "| +1.000 [+1.000, +1.000] | 2 / 0 | 0.500 | not significant |" in section
    )


def test_gold_removed_experiments_over_all_removed_and_kept(tmp_path: Path) -> None:
    write_report(make_results(), tmp_path)
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "for a seeded 50% of the questions with one (2 of 4)" in report
    assert (
        "| rag-gold-removed | 0.250 (4) | 0.500 | 0.000 (2) | 0.250 | 0.500 (2) | 0.750 |" in report
    )
    assert (
        "| crag-gold-removed | 0.500 (4) | 0.500 | 1.000 (2) | 0.250 | 0.000 (2) | 0.750 |"
        in report
    )


def test_no_comparisons_is_said_plainly(tmp_path: Path) -> None:
    results = make_results()
    del results["statistics"]
    write_report(results, tmp_path)
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "Not measured in this run (CRAG and another experiment are needed)." in report
    assert "| rag | main | 2 / 4 | 0.500 | 0.500 | — | — | — |" in report


def test_the_abstention_rate_per_experiment_and_its_cost() -> None:
    results = make_results()
    crag, without = (
        _experiment("crag", "main", 3),
        _experiment("crag-without-abstention", "knowledge", 3),
    )
    crag.update(abstained=1, abstention_rate=0.25)
    without.update(abstained=0, abstention_rate=0.0)
    results["experiments"] = [crag, without]
    results["abstention"] = {
        "questions": 4,
        "abstained": 1,
        "right_without_abstention": 1,
        "wrong_without_abstention": 0,
    }
    table = main_table(results)
    assert table.splitlines()[0].endswith(
        "| abstained | looping answers | knowledge words (median) |"
    )
    assert "| 0.250 |" in table.splitlines()[2]
    assert "| 0.000 |" in table.splitlines()[3]
    report = render_report(results)
    assert "## Abstention" in report
    assert "| crag | 1 / 4 | 0.250 |" in report
    assert "abstained, but answered right without abstention: **1**" in report
    # Older results (no abstention figures) show dashes and say what the cost needs.
    old = render_report(make_results())
    assert "No experiment abstained in this run." in old
    assert "needs `crag-without-abstention` and `crag` in the same run" in old
    assert main_table(make_results()).splitlines()[2].endswith("| — |")
