"""The default strip margin in the graph: a strip far below the best kept one is dropped."""

from __future__ import annotations

import json

import pytest

from crag.app.cli.commands import main
from crag.graph.builder import CragGraph, build_graph
from crag.knowledge.selection import score_logit
from crag.settings.method import MethodConfig
from tests.fakes import FakeComponents

QUESTION = "Who painted the Mona Lisa?"


def test_by_default_a_strip_far_below_the_best_is_not_knowledge(
    fake_graph: CragGraph,
    fake_components: FakeComponents,
) -> None:
    # The fixture's evaluator: "Leonardo" 0.9, "Louvre" 0.2: 2.5 logits apart, more than 1.0.
    assert score_logit(0.9) - score_logit(0.2) > MethodConfig().strip_margin
    out = fake_graph.invoke({"question": QUESTION})
    texts = [k["text"] for k in out["knowledge"]]
    assert any("Leonardo" in t for t in texts)
    assert not any("Louvre" in t for t in texts)


def test_without_the_margin_both_strips_are_kept(fake_components: FakeComponents) -> None:
    graph = build_graph(fake_components, method=MethodConfig(strip_margin=0))
    out = graph.invoke({"question": QUESTION})
    texts = [k["text"] for k in out["knowledge"]]
    assert any("Leonardo" in t for t in texts) and any("Louvre" in t for t in texts)


def test_a_strip_within_the_margin_stays(
    fake_graph: CragGraph, fake_components: FakeComponents
) -> None:
    fake_components.scorer.keyword_scores = {"Leonardo": 0.9, "Louvre": 0.8}
    out = fake_graph.invoke({"question": QUESTION})
    texts = [k["text"] for k in out["knowledge"]]
    assert any("Louvre" in t for t in texts)


@pytest.mark.usefixtures("fake_app")
def test_the_margin_is_turned_off_from_the_command_line(
    fake_components: FakeComponents, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ask", "--json", "--set", "strip_margin=0", QUESTION]) == 0
    texts = [k["text"] for k in json.loads(capsys.readouterr().out)["knowledge"]]
    assert any("Louvre" in t for t in texts)
