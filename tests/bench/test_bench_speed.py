"""bench/scripts/bench_speed.py: its parsing, timing, medians and table, and BEFORE's imports.

The whole script (two versions, cold and warm runs) takes about three minutes with ``--runs 1
--skip-server`` on two busy cores, too long for the suite: its parts are tested here, each on
real code (``crag-bench server``'s own report lines, a real child process's streamed output, a
real ``git archive`` export imported through ``PYTHONPATH``).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from crag_bench.server_bench import BenchReport, LevelReport, RunResult, compare_answers

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_speed", ROOT / "bench" / "scripts" / "bench_speed.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_speed"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


bench_speed = _load()


def _report() -> BenchReport:
    """A report as crag-bench server makes it: level 4 has one answer that differs."""
    sequential = {
        "q1": RunResult("q1", 2.0, "Leonardo", "correct"),
        "q2": RunResult("q2", 3.0, "Shakespeare", "correct"),
    }
    one = [RunResult("q1", 2.1, "Leonardo", "correct")]
    four = [
        RunResult("q1", 5.0, "Leonardo", "correct"),
        RunResult("q2", 6.0, "Marlowe", "correct"),
        RunResult("q1", 5.5, "Leonardo", "correct"),
        RunResult("q2", 7.0, None, None, "timed out"),
    ]
    levels = [
        LevelReport(1, one, 2.1, compare_answers(one, sequential)),
        LevelReport(4, four, 7.2, compare_answers(four, sequential)),
    ]
    return BenchReport(url="http://127.0.0.1:1", sequential=sequential, levels=levels)


def test_parse_server_bench_reads_crag_bench_servers_own_report() -> None:
    parsed = bench_speed.parse_server_bench("\n".join(_report().lines()) + "\n")

    assert parsed["single_run_s"] == 2.5
    one, four = parsed["levels"]
    assert (one["level"], one["failed"], one["differ"], one["equal_share"]) == (1, 0, 0, 1.0)
    assert (four["level"], four["failed"], four["differ"]) == (4, 1, 1)
    assert four["equal_share"] == 0.5  # 2 of 4: one differs, one failed
    assert four["runs_per_s"] == pytest.approx(3 / 7.2, abs=0.001)
    assert four["p50_s"] == 5.5 and four["p95_s"] == 6.0


def test_server_rounds_reverse_the_order_and_combine_to_medians(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    order: list[str] = []
    rates = iter([1.0, 2.0, 4.0, 3.0, 5.0, 6.0])

    def bench(version: SimpleNamespace, levels: object, batch: int) -> dict[str, object]:
        order.append(version.name)
        share = 0.5 if len(order) == 3 else 1.0
        level = {"level": 16, "runs_per_s": next(rates), "wall_s": 1.0, "p50_s": 2.0}
        return {
            "single_run_s": 1.0,
            "levels": [level | {"p95_s": None, "equal_share": share}],
            "load": [float(len(order)), 0.0, 0.0],
        }

    monkeypatch.setattr(bench_speed, "server_bench", bench)
    versions = [SimpleNamespace(name=n) for n in ("before", "after")]
    rounds = bench_speed.server_rounds(versions, 3, (16,), 1)
    assert order == ["before", "after", "after", "before", "before", "after"]
    after = bench_speed.combined_rounds(rounds["after"])
    (level,) = after["levels"]
    assert level["rounds"] == [2.0, 4.0, 6.0] and level["runs_per_s"] == 4.0
    assert level["equal_share"] == 0.5  # the lowest of the rounds
    assert level["p95_s"] is None  # no round knew it
    assert after["load"] == [pytest.approx((2 + 3 + 6) / 3)]


def test_answer_text_drops_the_sources_and_the_citation_markers() -> None:
    stdout = "Leonardo da Vinci painted it. [1] [2]\nSources:\n  [1] Mona Lisa — wiki\n"

    assert bench_speed.answer_part(stdout) == "Leonardo da Vinci painted it. [1] [2]\n"
    assert bench_speed.answer_text(stdout) == "Leonardo da Vinci painted it."


def test_median_of_ignores_unknown_values() -> None:
    assert bench_speed.median_of([3.0, None, 1.0, 2.0]) == 2.0
    assert bench_speed.median_of([4.0, 1.0]) == 2.5
    assert bench_speed.median_of([None]) is None


def test_levels_option_refuses_what_crag_bench_server_would() -> None:
    import argparse

    assert bench_speed.parse_levels("1,4,16") == (1, 4, 16)
    for bad in ("0", "1,x", "", "501"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench_speed.parse_levels(bad)


def test_markdown_table_has_the_ratio_and_both_loads() -> None:
    rows = [
        bench_speed.Row("cold ask: wall (median)", 10.0, 8.0, "s", 1.5, 1.25),
        bench_speed.Row("server, 4 at once: answers equal", 1.0, 0.75, "share", 2.0, 2.0),
        bench_speed.Row("warm: start", None, 3.0, "s", None, None),
    ]
    lines = bench_speed.markdown_table(rows).splitlines()

    assert lines[0] == "| what | before | after | ratio | load (before / after) |"
    assert lines[2] == "| cold ask: wall (median) | 10.00 s | 8.00 s | 0.80x | 1.50 / 1.25 |"
    assert lines[3] == "| server, 4 at once: answers equal | 100% | 75% | 0.75x | 2.00 / 2.00 |"
    assert lines[4] == "| warm: start | - | 3.00 s | - | - / - |"


CHILD = r"""
import sys, time
sys.stderr.write("[retrieve] 4 passages\n"); sys.stderr.flush()
time.sleep(0.3)
sys.stderr.write("[generate] answering from 2 internal and 0 external strips\n"); sys.stderr.flush()
time.sleep(0.4)
for word in ("Leonardo ", "da ", "Vinci."):
    sys.stdout.write(word); sys.stdout.flush(); time.sleep(0.2)
sys.stdout.write(" [1]\n"); sys.stdout.flush()
sys.stderr.write("[generate] done\n"); sys.stderr.flush()
time.sleep(0.3)
sys.stdout.write("Sources:\n  [1] Mona Lisa\n")
x = bytearray(64 * 1024 * 1024)
"""


def test_timed_run_times_a_real_childs_streamed_answer(tmp_path: Path) -> None:
    version = bench_speed.Version("after", tmp_path, tmp_path, env={"PATH": "/usr/bin:/bin"})

    record = bench_speed.timed_run([sys.executable, "-c", CHILD], version)

    assert record.returncode == 0
    assert bench_speed.answer_text(record.stdout) == "Leonardo da Vinci."
    assert record.generate_at is not None and record.generate_at >= 0.3
    assert record.first_answer_at is not None and record.last_answer_at is not None
    assert record.first_answer_at - record.generate_at >= 0.35
    assert 0.35 <= record.last_answer_at - record.first_answer_at < record.wall - 0.3
    assert record.max_rss_kib > 64 * 1024  # the child's own peak, from os.wait4
    assert 0 < record.cpu < record.wall
    figures = bench_speed.generation_figures(record, bench_speed.TokenCounter(None))
    assert figures["tokens"] == 4  # 3 words x 1.3, rounded: no tokenizer given
    spent = record.last_answer_at - record.generate_at
    assert figures["tokens_per_s"] == pytest.approx(4 / spent)


def test_before_version_imports_crag_from_its_export(tmp_path: Path) -> None:
    store = tmp_path / "store"
    version = bench_speed.before_version("HEAD", tmp_path, store)

    files = bench_speed.check_imports(version)

    export = (tmp_path / "before-src").resolve()
    assert len(files) == 4
    assert all(Path(f).is_relative_to(export) for f in files), files
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert version.revision == head
    assert version.env["CRAG_SERVE_AUTOSTART"] == "0"
    assert version.env["CRAG_CACHE_DIR"] == str(tmp_path / "before" / "cache")
    assert version.env["CRAG_STORE_PATH"] == str(store)


def test_check_imports_stops_when_the_version_imports_other_code(tmp_path: Path) -> None:
    version = bench_speed.make_version("before", tmp_path / "elsewhere", tmp_path, tmp_path, None)
    (tmp_path / "elsewhere").mkdir()

    with pytest.raises(SystemExit, match="crag imports from outside"):
        bench_speed.check_imports(version)
