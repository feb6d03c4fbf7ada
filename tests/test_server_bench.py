"""The load test's arithmetic and its guards (the run itself is in tests/test_server.py)."""

from __future__ import annotations

import math

import pytest

from app.cli import main
from app.server_bench import (
    BenchError,
    BenchReport,
    RunResult,
    check_loopback,
    run_bench,
    split_settings,
)


def report(latencies: list[float], errors: int = 0) -> BenchReport:
    concurrent = [RunResult("q", t, answer="a", action="correct") for t in latencies]
    concurrent += [RunResult("q", 1.0, error="boom") for _ in range(errors)]
    sequential = {"q": RunResult("q", 2.0, answer="a", action="correct")}
    return BenchReport("http://127.0.0.1:1", concurrent, sequential, wall_seconds=10.0)


def test_percentiles_throughput_and_lines() -> None:
    result = report([float(n) for n in range(1, 21)])
    assert result.latency(0.5) == 10.0
    assert result.latency(0.95) == 19.0
    assert result.throughput == 2.0
    assert result.ok
    lines = "\n".join(result.lines())
    assert "failures: 0" in lines and "throughput: 2.000 runs/s" in lines
    assert "latency p50: 10.0 s, p95: 19.0 s" in lines
    assert "answers equal to sequential: yes" in lines


def test_failures_and_mismatches_make_it_fail() -> None:
    failed = report([1.0, 2.0], errors=1)
    assert not failed.ok and len(failed.failures) == 1
    assert failed.throughput == 0.2  # failed runs do not count
    assert "failed: 'q': boom" in "\n".join(failed.lines())
    differing = report([1.0])
    differing.mismatches.append("'q': other answer")
    assert not differing.ok
    assert "NO (1 differ)" in "\n".join(differing.lines())
    assert math.isnan(report([], errors=2).latency(0.5))


def test_only_loopback_servers() -> None:
    check_loopback("http://127.0.0.1:8123")
    check_loopback("http://localhost:8123")
    with pytest.raises(BenchError, match=r"only talks to a server on 127\.0\.0\.1"):
        check_loopback("http://10.0.0.5:8123")


def test_bad_arguments_stop_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(BenchError, match="runs must be between 1 and 500"):
        run_bench(runs=0)
    assert main(["bench-server", "--url", "http://192.0.2.1:8123"]) == 2
    assert "--allow-remote" in capsys.readouterr().err
    assert main(["bench-server", "--runs", "501"]) == 2
    assert "runs must be between" in capsys.readouterr().err


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


def test_a_running_server_keeps_its_deployment_settings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Refused before any request: the port is never contacted.
    with pytest.raises(BenchError, match="setting store_path is a deployment setting"):
        run_bench(url="http://127.0.0.1:9", extra_context={"top_k": 3, "store_path": "/x"})
    assert main(["bench-server", "--url", "http://127.0.0.1:9", "--set", "allowed_hosts=x"]) == 2
    assert "setting allowed_hosts is a deployment setting" in capsys.readouterr().err
