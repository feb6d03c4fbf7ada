"""SIGTERM ends a real ``crag ask`` process while it waits on a model server that drips.

The model server is tests/model_server.py's **fake**: no real server sends its model list one
byte a second on demand. ``crag ask`` runs as its own process (SIGTERM's default handling, the
interpreter's exit) with its generator on that server (``CRAG_GENERATOR=endpoint``); the store
and the evaluator are the unit tests' fakes, so that nothing but the process itself is loaded.
The context-length probe's own deadline is raised to two minutes in that process: only the
signal can end the wait early.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.model_server import FakeModelServer, Reply
from tests.warm_support import ROOT

pytestmark = pytest.mark.integration

ASK_CLI = """
import sys
import crag.generator.endpoint as endpoint
endpoint.PROBE_SECONDS = 120.0  # only SIGTERM can end the probe early
from langchain_core.documents import Document
from crag.generator.factory import load_chat_model
from tests.fakes import MONA_LISA, FakeComponents, FixedScoreEvaluator, StaticStore, app_components
store = StaticStore([Document(page_content=MONA_LISA, metadata={"source": "d", "chunk": 0})])
components = FakeComponents(store, FixedScoreEvaluator({"Mona": 0.9}), load_chat_model("endpoint"))
from crag.app.cli.console import main
with app_components(components):
    sys.exit(main())
"""


@pytest.mark.skipif(os.name != "posix", reason="sends SIGTERM")
def test_sigterm_ends_crag_ask_while_the_model_list_drips(tmp_path: Path) -> None:
    listed = json.dumps({"data": [{"id": "fake", "max_model_len": 4096}]})
    drip = Reply(body=listed, drip=1.0)  # a minute and more for the whole list
    with FakeModelServer(models_reply=drip) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")}
        env.update(
            PYTHONPATH=str(ROOT),
            CRAG_GENERATOR="endpoint",
            CRAG_LLM_BASE_URL=server.base_url,
            CRAG_LLM_MODEL="fake",
            CRAG_LLM_TIMEOUT="120",
        )
        ask = subprocess.Popen(
            [sys.executable, "-c", ASK_CLI, "ask", "--no-server", "Who painted the Mona Lisa?"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert server.models_asked.wait(120), "crag ask never asked for the model list"
            time.sleep(0.5)  # well inside the probe, a byte or so read
            terminated_at = time.monotonic()
            ask.send_signal(signal.SIGTERM)
            _, err = ask.communicate(timeout=30)
            took = time.monotonic() - terminated_at
        finally:
            if ask.poll() is None:
                ask.kill()
                ask.wait()
    text = err.decode("utf-8", "replace")
    assert ask.returncode == 143, text[-2000:]
    assert text.strip().splitlines()[-1] == "crag: terminated"
    assert "Traceback" not in text
    assert took < 10
    assert server.requests == []  # the run never reached the chat completion
