"""The admins' quality view (:mod:`crag.app.web.quality_routes`) behind the real gate.

The feedback is real feedback on real runs of the CRAG graph (the fakes' store, evaluator and
chat: :func:`tests.fakes.mona_lisa_app_components`), kept in a SQLite threads file that also
holds the team's accounts; the evaluation is ``crag eval`` run on ``crag feedback export``'s
file, written where the server looks (the setting ``eval_dir``). An admin's API key gets the
counts, the thresholds, the evaluation's table and picture and the export; a member's gets 403.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.testclient import TestClient

from crag.app.api import persistent_graph, record_feedback, thread_config
from crag.app.cli.commands import main
from crag.app.feedback_store import FeedbackStore
from crag.app.web.accounts import Accounts
from crag.app.web.gate import Gate, GateConfig
from crag.app.web.quality_routes import quality_routes
from crag.settings.deployment import DeploymentSettings, deployment_with
from crag.settings.method import operator_method
from tests.fakes import mona_lisa_app_components

TOKEN = "q" * 40
PASSWORD = "correct horse battery"
BASE = "http://127.0.0.1:8123"
MONA = "Who painted the Mona Lisa?"
NITROGEN = "What is the boiling point of liquid nitrogen?"
SVG_POLICY = "default-src 'none'; style-src 'unsafe-inline'"


@dataclass
class Team:
    """The threads file, the test's folder, the accounts' keys, the settings, the gated app."""

    db: Path
    dir: Path
    keys: dict[str, str]
    settings: DeploymentSettings
    client: TestClient


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Team:
    """A threads file with three votes on real runs, an admin's and a member's API keys."""
    mona_lisa_app_components(monkeypatch)
    db = tmp_path / "threads.sqlite"
    with persistent_graph(db) as graph:
        graph.invoke({"question": MONA}, thread_config("t1"))
        record_feedback(graph, "t1", "good", expected="Leonardo da Vinci", target=db)
        graph.invoke({"question": NITROGEN}, thread_config("t2"))
        record_feedback(graph, "t2", "bad", better="rag", target=db)
        graph.invoke({"question": MONA}, thread_config("t3"))
        record_feedback(graph, "t3", "bad", better="same", target=db)
    accounts = Accounts(db)
    keys = {"ada": accounts.add("ada", PASSWORD, "admin"), "bob": accounts.add("bob", PASSWORD)}
    settings = deployment_with(eval_dir=str(tmp_path / "eval"))
    app = Starlette(
        routes=quality_routes(FeedbackStore(accounts.database), deployment=settings),
        middleware=[Middleware(Gate, config=GateConfig(token=TOKEN, accounts=accounts))],
    )
    return Team(db, tmp_path, keys, settings, TestClient(app, base_url=BASE))


def _get(team: Team, path: str, who: str) -> Any:
    return team.client.get(path, headers={"x-api-key": team.keys[who]})


def _evaluate(team: Team, name: str) -> Path:
    """``crag feedback export``, then ``crag eval`` of it into ``eval_dir/name``."""
    export = team.dir / "feedback.jsonl"
    assert main(["feedback", "export", "--threads-db", str(team.db), "-o", str(export)]) == 0
    out = team.dir / "eval" / name
    assert main(["eval", str(export), "--output", str(out)]) == 0
    return out


def test_an_admin_sees_the_counts_the_thresholds_and_that_there_is_no_evaluation_yet(
    team: Team,
) -> None:
    answer = _get(team, "/crag/quality", "ada")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["feedback"] == {
        "records": 3,
        "actions": {
            "correct": {"good": 1, "bad": 1},
            "ambiguous": {"good": 0, "bad": 0},
            "incorrect": {"good": 0, "bad": 1},
            "other": {"good": 0, "bad": 0},
        },
        "comparisons": {"crag": 0, "rag": 1, "same": 1},
    }
    settings = team.settings
    upper, lower = operator_method().thresholds_for(settings.evaluator, settings.evaluator_model)
    assert body["thresholds"] == {
        "upper_threshold": upper,
        "lower_threshold": lower,
        "evaluator": settings.evaluator,
    }
    assert body["evaluation"] is None
    assert body["note"].startswith("No evaluation yet: run crag eval ")
    assert f"(it writes in {team.dir / 'eval'}, the setting eval_dir;" in body["note"]
    picture = _get(team, "/crag/quality/report.svg", "ada")
    assert picture.status_code == 404 and picture.json()["detail"].startswith("No evaluation yet")


def test_the_newest_evaluation_is_shown_with_its_table_and_its_picture_as_an_image(
    team: Team,
) -> None:
    older = _evaluate(team, "first")
    os.utime(older / "results.json", (1_000_000_000, 1_000_000_000))
    newest = _evaluate(team, "second")
    evaluation = _get(team, "/crag/quality", "ada").json()["evaluation"]
    assert evaluation["run"] == "second" and evaluation["folder"] == str(newest)
    assert evaluation["questions"] == 3 and evaluation["picture"] is True
    results = json.loads((newest / "results.json").read_text())
    assert evaluation["thresholds"] == {
        "upper_threshold": results["settings"]["upper_threshold"],
        "lower_threshold": results["settings"]["lower_threshold"],
    }
    assert evaluation["table"][0].startswith("questions: 3 from ")
    assert any(line.startswith("crag ") for line in evaluation["table"])
    picture = _get(team, "/crag/quality/report.svg", "ada")
    assert picture.status_code == 200
    assert picture.headers["content-type"] == "image/svg+xml"
    assert picture.headers["content-security-policy"] == SVG_POLICY
    assert picture.headers["x-content-type-options"] == "nosniff"
    assert picture.content == (newest / "report.svg").read_bytes()


def test_an_unreadable_evaluation_is_a_sentence_not_an_error(team: Team) -> None:
    broken = team.dir / "eval" / "broken"
    broken.mkdir(parents=True)
    (broken / "results.json").write_text('{"questions": 1}')
    answer = _get(team, "/crag/quality", "ada")
    assert answer.status_code == 200 and answer.json()["evaluation"] is None
    assert answer.json()["note"] == (
        f"The last evaluation, in {broken}, cannot be shown: results.json is not what crag "
        "eval writes (KeyError)."
    )


def test_the_download_is_the_file_crag_feedback_export_writes(team: Team) -> None:
    download = _get(team, "/crag/quality/export", "ada")
    assert download.status_code == 200
    assert download.headers["content-disposition"] == 'attachment; filename="crag-feedback.jsonl"'
    written = team.dir / "written.jsonl"
    assert main(["feedback", "export", "--threads-db", str(team.db), "-o", str(written)]) == 0
    assert download.content == written.read_bytes()
    assert len(download.content.splitlines()) == 3


ROUTES = ["/crag/quality", "/crag/quality/report.svg", "/crag/quality/export"]


@pytest.mark.parametrize("path", ROUTES)
def test_a_member_is_refused_and_a_stranger_too(team: Team, path: str) -> None:
    _evaluate(team, "only")
    refused = _get(team, path, "bob")
    assert refused.status_code == 403
    assert refused.json() == {
        "detail": "only an admin may see the quality view: ask one of your admins"
    }
    assert "Mona" not in refused.text
    assert team.client.get(path).status_code == 401
    assert team.client.post(path, headers={"x-api-key": team.keys["ada"]}).status_code == 405
