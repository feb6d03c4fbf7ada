"""The load test's arithmetic, its table and its guards, with fakes (no server started).

The run against a real server is in tests/test_server.py.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from crag_bench.cli import main
from crag_bench.server_bench import (
    BENCH_GENERATOR_BATCH_SIZE,
    DEFAULT_LEVELS,
    BenchError,
    BenchReport,
    LevelReport,
    RunResult,
    bench_environment,
    check_loopback,
    compare_answers,
    cycled,
    level_table,
    measure,
    parse_levels,
    resolve_levels,
    run_bench,
    split_settings,
    started_setup,
)

SEQUENTIAL = {"q": RunResult("q", 2.0, answer="a", action="correct")}


def level(n: int, latencies: list[float], errors: int = 0, wall: float = 10.0) -> LevelReport:
    runs = [RunResult("q", t, answer="a", action="correct") for t in latencies]
    runs += [RunResult("q", 1.0, error="boom") for _ in range(errors)]
    return LevelReport(n, runs, wall, compare_answers(runs, SEQUENTIAL))


def report(*levels: LevelReport) -> BenchReport:
    return BenchReport("http://127.0.0.1:1", dict(SEQUENTIAL), list(levels))


def test_a_levels_percentiles_and_throughput() -> None:
    twenty = level(20, [float(n) for n in range(1, 21)])
    assert twenty.latency(0.5) == 10.0
    assert twenty.latency(0.95) == 19.0
    assert twenty.throughput == 2.0
    assert twenty.ok
    failed = level(3, [1.0, 2.0], errors=1)
    assert not failed.ok and len(failed.failures) == 1
    assert failed.throughput == 0.2  # failed runs do not count
    assert math.isnan(level(2, [], errors=2).latency(0.5))


def test_one_row_per_level_with_throughput_relative_to_level_1() -> None:
    result = report(
        level(1, [2.0], wall=2.0),
        level(4, [2.0, 3.0, 3.0, 4.0], wall=4.0),
        level(16, [float(n) for n in range(1, 17)], wall=8.0),
    )
    assert result.single_run_latency == 2.0
    assert result.ok
    lines = result.lines()
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("level"))
    assert lines[header].split() == [
        "level", "runs/s", "x", "L1", "wall", "s", "p50", "s", "p95", "s", "p95/1-run",
        "failed", "equal",
    ]  # fmt: skip
    rows = [line.split() for line in lines[header + 1 : header + 4]]
    assert rows == [
        ["1", "0.500", "1.00x", "2.0", "2.0", "2.0", "1.00x", "0", "yes"],
        ["4", "1.000", "2.00x", "4.0", "3.0", "4.0", "2.00x", "0", "yes"],
        ["16", "2.000", "4.00x", "8.0", "8.0", "16.0", "8.00x", "0", "yes"],
    ]
    text = "\n".join(lines)
    assert "single-run latency (median of those): 2.0 s" in text
    assert "failures: 0" in text and "answers equal to sequential: yes" in text
    # the aggregate over every level (what tests/test_server.py reads)
    assert len(result.concurrent) == 21 and result.wall_seconds == 14.0
    assert result.throughput == 21 / 14.0


def test_without_level_1_the_lowest_level_is_the_reference() -> None:
    table = level_table([level(8, [1.0] * 8, wall=4.0), level(4, [1.0] * 4, wall=4.0)], 1.0)
    assert "x L4" in table[0]
    assert table[1].split()[:3] == ["8", "2.000", "2.00x"]
    assert table[2].split()[:3] == ["4", "1.000", "1.00x"]
    assert level_table([], 1.0) == []


def test_failures_and_mismatches_make_it_fail_and_are_listed_by_level() -> None:
    failed = report(level(1, [1.0]), level(3, [1.0, 2.0], errors=1))
    assert not failed.ok and len(failed.failures) == 1
    text = "\n".join(failed.lines())
    assert "failed (level 3): 'q': boom" in text
    assert "failures: 1" in text
    differing = level(2, [1.0])
    differing.runs.append(RunResult("q", 1.0, answer="other", action="correct"))
    differing.mismatches = compare_answers(differing.runs, SEQUENTIAL)
    assert differing.mismatches == ["'q': correct/'other' concurrently, correct/'a' alone"]
    result = report(level(1, [1.0]), differing)
    assert not result.ok
    text = "\n".join(result.lines())
    assert "NO (1 differ)" in text and "differs (level 2): 'q'" in text
    assert [row.split()[-2:] for row in level_table(result.levels, 2.0)[1:]] == [
        ["0", "yes"],
        ["NO", "(1)"],
    ]
    # a failed sequential run fails the bench, and its answers cannot be compared
    alone = BenchReport("u", {"q": RunResult("q", 1.0, error="down")}, [level(1, [1.0])])
    assert not alone.ok and "failed (sequential): 'q': down" in "\n".join(alone.lines())
    assert math.isnan(alone.single_run_latency)
    assert "single-run latency (median of those): - s" in alone.lines()
    assert alone.levels[0].mismatches == []


def test_levels_runs_and_their_limits() -> None:
    assert parse_levels("1,4,16,32") == (1, 4, 16, 32) == DEFAULT_LEVELS
    assert parse_levels(" 8 ") == (8,)
    assert resolve_levels(None, None) == DEFAULT_LEVELS
    assert resolve_levels(20, None) == (20,)  # --runs N is --levels N
    assert resolve_levels(None, [2, 6]) == (2, 6)
    with pytest.raises(BenchError, match="not both"):
        resolve_levels(20, [1, 4])
    with pytest.raises(BenchError, match="comma-separated numbers"):
        parse_levels("1,four")
    with pytest.raises(BenchError, match="runs must be between 1 and 500, not 0"):
        parse_levels("1,0")
    with pytest.raises(BenchError, match="repeated"):
        parse_levels("4,4")
    with pytest.raises(BenchError, match="no concurrency levels"):
        resolve_levels(None, [])
    with pytest.raises(BenchError, match="at most 10 concurrency levels"):
        parse_levels(",".join(str(n) for n in range(1, 12)))
    assert cycled(["a", "b", "c"], 7) == ["a", "b", "c", "a", "b", "c", "a"]


class FakeClient:
    """``langgraph_sdk``'s async client, as far as the bench uses it: answers after a pause."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.in_flight = 0
        self.most = 0
        self.asked: list[str] = []
        self.threads = SimpleNamespace(create=self._create)
        self.runs = SimpleNamespace(wait=self._wait)

    async def _create(self) -> dict[str, str]:
        return {"thread_id": f"t{len(self.asked)}"}

    async def _wait(self, thread_id: str, graph_id: str, **kwargs: Any) -> Any:
        assert graph_id == "crag" and kwargs["raise_error"] is False
        question = kwargs["input"]["question"]
        self.asked.append(question)
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(0.01)  # every run of a level is sent before any ends
            return await self.answer(question, self.most, kwargs["context"])
        finally:
            self.in_flight -= 1


def test_each_level_sends_its_runs_at_once_and_compares_them() -> None:
    async def answer(question: str, most: int, context: dict[str, Any]) -> Any:
        assert context == {"top_k": 3}
        if question == "b" and most > 1:
            return {"answer": "B, batched", "action": "correct"}
        return {"answer": question.upper(), "action": "correct"}

    client = FakeClient(answer)
    result = asyncio.run(measure(client, (1, 4), ["a", "b", "a", "c"], {"top_k": 3}, 5.0))
    assert list(result.sequential) == ["a", "b", "c"]  # distinct questions, once each
    assert client.asked == ["a", "b", "c", "a", "a", "b", "c", "a"]
    assert [lv.level for lv in result.levels] == [1, 4]
    assert [len(lv.runs) for lv in result.levels] == [1, 4]
    assert client.most == 4
    assert result.levels[0].ok
    assert result.levels[1].mismatches == [
        "'b': correct/'B, batched' concurrently, correct/'B' alone"
    ]
    assert not result.ok


def test_runs_that_fail_or_never_end_are_counted_not_raised() -> None:
    async def answer(question: str, most: int, context: dict[str, Any]) -> Any:
        if question == "slow" and most > 1:
            await asyncio.sleep(30)
        if question == "bad":
            return {"__error__": {"error": "InvalidQuestionError", "message": "no"}}
        return {"answer": "x", "action": "correct"}

    result = asyncio.run(measure(FakeClient(answer), (2,), ["ok", "slow", "bad"], {}, 0.5))
    errors = {r.question: r.error for r in result.failures}
    assert errors == {"bad": "InvalidQuestionError: no", "slow": "did not finish in time"}
    assert result.levels[0].throughput > 0
    assert not result.ok


def test_only_loopback_servers() -> None:
    check_loopback("http://127.0.0.1:8123")
    check_loopback("http://localhost:8123")
    with pytest.raises(BenchError, match=r"only talks to a server on 127\.0\.0\.1"):
        check_loopback("http://10.0.0.5:8123")


def test_bad_arguments_stop_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(BenchError, match="runs must be between 1 and 500"):
        run_bench(runs=0)
    with pytest.raises(BenchError, match="runs must be between 1 and 500"):
        run_bench(levels=[1, 501])
    assert main(["server", "--url", "http://192.0.2.1:8123"]) == 2
    assert "--allow-remote" in capsys.readouterr().err
    assert main(["server", "--runs", "501"]) == 2
    assert "runs must be between" in capsys.readouterr().err
    assert main(["server", "--levels", "1,x"]) == 2
    assert "comma-separated numbers" in capsys.readouterr().err
    assert main(["server", "--levels", "1,4", "--runs", "4"]) == 2
    assert "not both" in capsys.readouterr().err


def test_deployment_settings_go_to_the_started_server_not_to_the_runs() -> None:
    context, env = split_settings(
        {"top_k": 5, "generator": "smollm2", "default_corpus": False, "search_timeout": 2.5}
    )
    assert context == {"top_k": 5}
    assert env == {
        "CRAG_GENERATOR": "smollm2",
        "CRAG_DEFAULT_CORPUS": "false",
        "CRAG_SEARCH_TIMEOUT": "2.5",
    }


def test_parameters_of_the_method_go_to_the_started_server_not_to_the_runs() -> None:
    # The served graphs run the operator's method (CRAG_<NAME>); a run may not set it.
    context, env = split_settings(
        {"web_search": False, "strips_kept": 3, "fetch_pages": False, "upper_threshold": None}
    )
    assert context == {"web_search": False}
    assert env == {
        "CRAG_STRIPS_KEPT": "3",
        "CRAG_FETCH_PAGES": "false",
        "CRAG_UPPER_THRESHOLD": "",
    }


def test_the_started_server_decodes_alone_unless_told_to_batch(tmp_path: Path) -> None:
    env = bench_environment(tmp_path, 9)
    assert env["CRAG_GENERATOR_BATCH_SIZE"] == str(BENCH_GENERATOR_BATCH_SIZE) == "1"
    context, extra = split_settings({"generator_batch_size": 8, "top_k": 3})
    assert (context, extra) == ({"top_k": 3}, {"CRAG_GENERATOR_BATCH_SIZE": "8"})
    assert {**env, **extra}["CRAG_GENERATOR_BATCH_SIZE"] == "8"  # as run_bench merges them
    assert started_setup(10, {**env, **extra}) == (
        "setup: langgraph dev started here, 10 runs at once (--n-jobs-per-worker), "
        "generator smollm2, generator_batch_size 8"
    )


def test_a_running_server_keeps_its_deployment_settings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Refused before any request: the port is never contacted.
    with pytest.raises(BenchError, match="setting store_path is a deployment setting"):
        run_bench(url="http://127.0.0.1:9", extra_context={"top_k": 3, "store_path": "/x"})
    assert main(["server", "--url", "http://127.0.0.1:9", "--set", "allowed_hosts=x"]) == 2
    assert "setting allowed_hosts is a deployment setting" in capsys.readouterr().err


def test_a_running_server_keeps_its_method(capsys: pytest.CaptureFixture[str]) -> None:
    # Refused client-side, by name, before any request: a served run carries per-run settings.
    with pytest.raises(BenchError, match="setting force_action is a parameter of the method"):
        run_bench(url="http://127.0.0.1:9", extra_context={"top_k": 3, "force_action": "correct"})
    args = ["server", "--url", "http://127.0.0.1:9", "--set", "strips_kept=2", "--set", "top_k=3"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "setting strips_kept is a parameter of the method" in err
    assert "CRAG_STRIPS_KEPT" in err
    both = {"strips_kept": 2, "generator": "smollm2"}
    with pytest.raises(BenchError, match="setting generator is a deployment setting"):
        run_bench(url="http://127.0.0.1:9", extra_context=both)
