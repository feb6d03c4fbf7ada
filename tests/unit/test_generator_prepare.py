"""The generator's models made beside the run on first use, and made once by many processes.

A tiny causal LM (:mod:`tests.tiny_causal_lm`) stands for SmolLM2: onnxruntime-genai's builder
really builds it, in the child that :meth:`crag.generator.prepare.Preparation.run`
starts, into the cache the test names.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from crag.generator.onnx_build import MODEL_FILE, onnx_folder
from crag.generator.prepare import Preparation, is_prepared
from tests.tiny_causal_lm import build_tiny_causal_lm

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("CRAG_CACHE_DIR", str(folder))
    return folder


def test_a_local_model_is_built_by_the_child_and_then_found_prepared(
    cache: Path, tmp_path: Path
) -> None:
    tiny = build_tiny_causal_lm(tmp_path / "tiny", for_onnx=True)
    spec = f"local:{tiny}"
    assert is_prepared(spec) is False
    assert Preparation(spec).run()
    assert is_prepared(spec) is True
    model = onnx_folder(tiny) / MODEL_FILE
    assert model.is_file() and cache in model.parents  # in the run's cache, not the default


def test_a_stopped_preparation_leaves_no_half_made_model_and_the_next_one_makes_it(
    cache: Path, tmp_path: Path
) -> None:
    tiny = build_tiny_causal_lm(tmp_path / "tiny", for_onnx=True)
    spec = f"local:{tiny}"
    preparation = Preparation(spec)
    made: list[bool] = []
    thread = threading.Thread(target=lambda: made.append(preparation.run()))
    thread.start()
    builds = cache / "models" / "onnx"
    deadline = time.monotonic() + 120
    while not list(builds.glob("*.partial-*")) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert list(builds.glob("*.partial-*")), "the build never started"
    preparation.stop()  # the builder is still at work: it takes seconds
    thread.join(timeout=60)
    assert made == [False]
    assert not list(builds.glob("*.partial-*"))  # deleted on the way out, the builder killed
    assert is_prepared(spec) is False
    stopped_first = Preparation(spec)
    stopped_first.stop()
    assert not stopped_first.run()  # a stopped preparation never starts
    assert Preparation(spec).run()  # the lock was let go
    assert is_prepared(spec) is True


def test_what_is_not_a_local_model_is_not_prepared(cache: Path, tmp_path: Path) -> None:
    assert is_prepared("openai:gpt-4o-mini") is None
    missing = f"local:{tmp_path / 'no-such-model'}"
    assert is_prepared(missing) is False
    assert not Preparation(missing).run()  # the child says why and exits 1
    done = subprocess.run(
        [sys.executable, "-m", "crag.generator.prepare", "openai:gpt-4o-mini"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 1
    assert "is not a local model: there is nothing to prepare" in done.stderr


MAKER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from crag.settings.model_cache import made_once

    target, log = Path(sys.argv[1]), Path(sys.argv[2])

    def make(folder):
        with log.open("a") as out:
            out.write(f"{os.getpid()}\\n")
        time.sleep(1.0)  # long enough for the other process to arrive while this one makes
        (folder / "done").write_text("made")

    print(made_once(target, "done", make))
    """
)


def test_processes_wanting_one_model_at_once_make_it_once(tmp_path: Path) -> None:
    target, log = tmp_path / "cache" / "model", tmp_path / "makers.log"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", MAKER, str(target), str(log)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = [process.communicate(timeout=120) for process in processes]
    for process, (out, err) in zip(processes, results, strict=True):
        assert process.returncode == 0, err[-2000:]
        assert out.strip() == str(target)
    assert len(log.read_text().split()) == 1  # one maker; the others waited and found it
    assert (target / "done").read_text() == "made"
    leftovers = sorted(path.name for path in target.parent.iterdir())
    assert leftovers == ["model", "model.lock"]  # no partial copy
