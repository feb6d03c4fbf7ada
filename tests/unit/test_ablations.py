"""The paper's ablations as settings: forced or removed actions, no refinement, rewriting or
selection."""

from typing import Any

import pytest

from crag.graph.builder import CragGraph, build_graph
from crag.knowledge.action_trigger import trigger_action
from crag.settings.context import Context, InvalidSettingError
from crag.settings.method import MethodConfig
from crag.settings.setting_kinds import METHOD_NAMES
from crag.websearch.base import SearchResult
from tests.fakes import FakeComponents, StaticSearch

UPPER, LOWER = 0.59, -0.99


@pytest.mark.parametrize(
    ("scores", "disable", "expected"),
    [
        ([0.9, -1.0], "correct", "ambiguous"),
        ([0.9, -1.0], "incorrect", "correct"),
        ([0.9, -1.0], "ambiguous", "correct"),
        ([-0.995], "incorrect", "ambiguous"),
        ([-0.995], "correct", "incorrect"),
        ([-0.995], "ambiguous", "incorrect"),
        ([0.0], "ambiguous", "correct"),  # one cut halfway: (0.59 - 0.99) / 2 = -0.2
        ([-0.3], "ambiguous", "incorrect"),
        ([0.0], "correct", "ambiguous"),
        ([], "incorrect", "ambiguous"),
        ([], "ambiguous", "incorrect"),
    ],
)
def test_disabling_an_action_follows_table_2(
    scores: list[float], disable: Any, expected: str
) -> None:
    decision = trigger_action(scores, UPPER, LOWER, disable=disable)
    assert decision["action"] == expected
    if disable and trigger_action(scores, UPPER, LOWER)["action"] == disable:
        assert "disabled" in decision["reason"]


@pytest.mark.parametrize("force", ["correct", "incorrect", "ambiguous"])
@pytest.mark.parametrize("scores", [[0.9], [-1.0], [0.0], []])
def test_forcing_an_action_ignores_scores(force: Any, scores: list[float]) -> None:
    decision = trigger_action(scores, UPPER, LOWER, force=force)
    assert decision["action"] == force
    assert decision["max_score"] == (max(scores) if scores else None)


def test_unknown_ablation_values_are_refused() -> None:
    with pytest.raises(InvalidSettingError, match="force_action"):
        MethodConfig(force_action="sometimes")  # type: ignore[arg-type]
    with pytest.raises(InvalidSettingError, match="refine_knowledge"):
        MethodConfig(refine_knowledge="no")  # type: ignore[arg-type]


def test_a_run_may_not_ablate() -> None:
    with pytest.raises(InvalidSettingError, match="force_action is a parameter of the method"):
        Context(force_action="incorrect")  # type: ignore[call-arg]


def _run(components: FakeComponents, **settings: Any) -> dict[str, Any]:
    """One run of a graph built with the method parameters among ``settings``; the per-run
    ones are the run's context."""
    method = {k: v for k, v in settings.items() if k in METHOD_NAMES}
    run = {k: v for k, v in settings.items() if k not in METHOD_NAMES}
    graph: CragGraph = build_graph(components, method=MethodConfig(fetch_pages=False, **method))
    return graph.invoke({"question": "Who painted the Mona Lisa?"}, context=Context(**run))


def test_forced_incorrect_searches_the_web_even_for_a_good_passage(
    fake_components: FakeComponents,
) -> None:
    out = _run(fake_components, force_action="incorrect")
    assert out["action"] == "incorrect"
    assert all(k["origin"] == "external" for k in out["knowledge"])
    assert fake_components.web.queries, "the web was not searched"


def test_without_correct_a_correct_case_becomes_ambiguous(
    fake_components: FakeComponents,
) -> None:
    out = _run(fake_components, disable_action="correct")
    assert out["action"] == "ambiguous"
    assert fake_components.web.queries


def test_without_refinement_passages_go_whole_and_unrefined(
    fake_components: FakeComponents,
) -> None:
    refined = _run(fake_components)
    whole = _run(fake_components, refine_knowledge=False)
    assert len(refined["knowledge"]) >= 1
    texts = [k["text"] for k in whole["knowledge"]]
    assert texts == [d["text"] for d in whole["documents"] if d["score"] >= LOWER]
    assert any("Louvre in Paris" in t and "Leonardo" in t for t in texts), "passage was split"
    assert [k["score"] for k in whole["knowledge"]] == [
        d["score"] for d in whole["documents"] if d["score"] >= LOWER
    ]


def test_without_rewriting_the_question_itself_is_searched(
    fake_components: FakeComponents,
) -> None:
    fake_components.web = StaticSearch(
        [SearchResult("Mona Lisa - Wikipedia", "https://en.wikipedia.org/wiki/Mona_Lisa", "x")]
    )
    chat_calls_before = len(fake_components.chat.prompts)
    out = _run(
        fake_components, force_action="incorrect", rewrite_for_search=False, prefer_wikipedia=False
    )
    assert fake_components.web.queries == ["Who painted the Mona Lisa?"]
    rewrite_prompts = [
        p for p in fake_components.chat.prompts[chat_calls_before:] if p[-1].text.startswith("q")
    ]
    assert not rewrite_prompts, "the generator was asked to rewrite"
    assert out["answer"]


def test_by_default_the_question_itself_is_searched_and_rewriting_is_opt_in(
    fake_components: FakeComponents,
) -> None:
    fake_components.web = StaticSearch(
        [SearchResult("Mona Lisa - Wikipedia", "https://en.wikipedia.org/wiki/Mona_Lisa", "x")]
    )
    _run(fake_components, force_action="incorrect", prefer_wikipedia=False)
    _run(fake_components, force_action="incorrect", prefer_wikipedia=False, rewrite_for_search=True)
    # the default searches the question; the paper's rewrite searches the model's keywords
    assert fake_components.web.queries == ["Who painted the Mona Lisa?", "Mona Lisa, painter"]


def test_without_selection_web_results_are_kept_in_order_unscored(
    fake_components: FakeComponents,
) -> None:
    results = [
        SearchResult(f"Page {i} - Wikipedia", f"https://en.wikipedia.org/wiki/P{i}", f"text {i}")
        for i in range(8)
    ]
    fake_components.web = StaticSearch(results)
    out = _run(
        fake_components,
        force_action="incorrect",
        select_web_knowledge=False,
        web_results=8,
        strips_kept=3,
    )
    external = [k for k in out["knowledge"] if k["origin"] == "external"]
    assert [k["text"] for k in external] == ["Page 0\ntext 0", "Page 1\ntext 1", "Page 2\ntext 2"]
    assert all(k["score"] is None for k in external)
    scored = _run(fake_components, force_action="incorrect", web_results=8, strips_kept=3)
    # With selection the evaluator (-1 for these pages) drops every one of them.
    assert not [k for k in scored["knowledge"] if k["origin"] == "external"]
