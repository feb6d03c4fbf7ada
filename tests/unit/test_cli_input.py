"""``crag ask`` refuses questions that are not text it can use, with one line and exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from crag.app.cli.commands import main
from tests.fakes import FakeComponents

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.usefixtures("fake_app")
def test_ask_rejects_a_question_with_lone_surrogates(
    fake_components: FakeComponents, capsys: pytest.CaptureFixture[str]
) -> None:
    # What Python makes of `crag ask "$(printf 'Who painted \xff\xfe?')"`: surrogateescape.
    question = b"Who painted \xff\xfe?".decode("utf-8", "surrogateescape")
    assert main(["ask", question]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        "crag: error: the question is not valid UTF-8 text: it contains 2 unpaired surrogates "
        "(the first at character 13), e.g. from bytes that are not UTF-8\n"
    )
    assert captured.out == ""
    assert fake_components.store.queries == []


def test_ask_with_invalid_utf8_argv_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    """The real command line, given bytes that are not UTF-8: no traceback, no model loaded."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "crag.app.cli.commands",
            "ask",
            # A missing store: should the question get through, the run fails fast, not ingests.
            "--store",
            str(tmp_path / "missing"),
            b"Who painted \xff\xfe?",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    err = done.stderr.decode("utf-8")
    assert done.returncode == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("crag: error: the question is not valid UTF-8 text")
    assert done.stdout == b""
