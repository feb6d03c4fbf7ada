"""crag eval's machinery: node timing, gold removal, caches, figures, the experiment loop."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from evaluation.eval_components import CachingEvaluator, EvalComponents, GoldRemovingStore
from evaluation.experiments import EXPERIMENTS, Experiment
from evaluation.questions import EvalQuestion
from evaluation.runner import (
    EvalOptions,
    Row,
    agreement_figures,
    gold_removal_figures,
    llm_cache,
    removal_order,
    run_experiments,
    summarise,
)
from evaluation.timing import StageTimer
from graph.components import use_components
from graph.context import Context
from tests.fakes import FakeComponents, FixedScoreEvaluator, ScriptedChatModel, StaticStore
from tests.fakes import corpus_documents as fake_corpus
from tests.integration_support import build_small_store
from vectorstore.embeddings import load_embeddings
from vectorstore.store import open_store


class _S(TypedDict, total=False):
    x: int


def test_stage_timer_records_each_node_under_its_stage() -> None:
    builder: StateGraph[_S, None, _S, _S] = StateGraph(_S)
    builder.add_node("retrieve", lambda s: {"x": 1})
    builder.add_node("decide_action", lambda s: {"x": 2})
    builder.add_node("rewrite_query", lambda s: {"x": 3})
    builder.add_node("mystery", lambda s: {"x": 4})
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", "decide_action")
    builder.add_edge("decide_action", "rewrite_query")
    builder.add_edge("rewrite_query", "mystery")
    builder.add_edge("mystery", END)
    timer = StageTimer()
    builder.compile().invoke({"x": 0}, config={"callbacks": [timer]})
    assert set(timer.node_seconds) == {"retrieve", "decide_action", "rewrite_query", "mystery"}
    assert set(timer.stage_seconds()) == {"retrieve", "grade", "rewrite", "other"}
    assert all(s >= 0 for s in timer.stage_seconds().values())
    timer.reset()
    assert timer.stage_seconds() == {}


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = build_small_store(tmp_path_factory.mktemp("store") / "chroma", others=10)
    return open_store(path, "crag", load_embeddings(), create=False)


def test_gold_removing_store_hides_only_the_removed_source(small_store: Any) -> None:
    question = "Who painted the Mona Lisa?"
    removed: dict[str, tuple[str, ...]] = {}
    view = GoldRemovingStore(small_store, removed)
    full = [d.metadata["source"] for d in view.similarity_search(question, k=5)]
    assert full[0] == "wikipedia:Mona Lisa"
    removed[question] = ("wikipedia:Mona Lisa",)
    hidden = [d.metadata["source"] for d in view.similarity_search(question, k=5)]
    assert "wikipedia:Mona Lisa" not in hidden
    assert len(hidden) == 5
    assert hidden[:4] == [s for s in full if s != "wikipedia:Mona Lisa"][:4]
    other = [d.metadata["source"] for d in view.similarity_search("Where is the Louvre?", k=3)]
    assert "wikipedia:Louvre" in other, "another question lost its gold"


def test_caching_evaluator_scores_each_pair_once() -> None:
    inner = FixedScoreEvaluator({"a": 0.5})
    cached = CachingEvaluator(inner)
    assert cached.score("q", ["a", "b", "a"]) == [0.5, -1.0, 0.5]
    assert cached.score("q", ["b", "c"]) == [-1.0, -1.0]
    assert inner.calls == [("q", ["a", "b"]), ("q", ["c"])]
    assert cached.score("other", ["a"]) == [0.5]
    assert len(inner.calls) == 3


def _row(experiment: str, qid: str, correct: bool, **extra: Any) -> Row:
    values: dict[str, Any] = {
        "experiment": experiment,
        "id": qid,
        "question": qid,
        "answers": ["x"],
        "answer": "x" if correct else "",
        "correct": correct,
        "action": None,
        "gold_in_top_k": None,
        "answer_in_knowledge": False,
        "passages": 0,
        "internal": 0,
        "external": 0,
        "seconds": 1.0,
        "stages": {},
        "notes": [],
    }
    values.update(extra)
    return Row(**values)


def _questions(n: int) -> list[EvalQuestion]:
    return [EvalQuestion(f"q{i}", f"question {i}?", ("x",), (f"wikipedia:T{i}",)) for i in range(n)]


def test_removal_order_is_seeded_and_covers_questions_with_gold() -> None:
    questions = [*_questions(8), EvalQuestion("nogold", "?", ("x",))]
    order = removal_order(questions, seed=0)
    assert sorted(order) == sorted(q.id for q in questions[:8])
    assert order == removal_order(questions, seed=0)
    assert order != removal_order(questions, seed=1)


def test_gold_removal_curve_mixes_removed_and_full_runs() -> None:
    questions = _questions(4)
    rows = [_row("rag", q.id, True) for q in questions]
    rows += [_row("rag, gold removed", q.id, False) for q in questions]
    rows += [_row("crag", q.id, True) for q in questions]
    rows += [_row("crag, gold removed", q.id, True) for q in questions]
    figures = gold_removal_figures(rows, questions, seed=0)
    assert figures["levels"] == [0, 25, 50, 75, 100]
    assert figures["curves"]["rag"] == [1.0, 0.75, 0.5, 0.25, 0.0]
    assert figures["curves"]["crag"] == [1.0] * 5


def test_gold_removal_curve_is_none_when_runs_are_missing() -> None:
    questions = _questions(2)
    rows = [_row("rag", q.id, True) for q in questions]
    figures = gold_removal_figures(rows, questions, seed=0)
    assert figures["curves"]["rag"][0] == 1.0
    assert figures["curves"]["rag"][-1] is None
    assert figures["curves"]["crag"] == [None] * 5


def test_agreement_counts_the_papers_way() -> None:
    rows = [
        _row("crag", "a", True, action="correct", gold_in_top_k=True),
        _row("crag", "b", True, action="correct", gold_in_top_k=False),
        _row("crag", "c", True, action="incorrect", gold_in_top_k=False),
        _row("crag", "d", True, action="ambiguous", gold_in_top_k=True),
        _row("crag", "e", True, action="ambiguous", gold_in_top_k=None),
    ]
    figures = agreement_figures(rows)
    assert figures["questions"] == 4
    assert figures["table"]["correct"] == {"gold_in_top_k": 1, "gold_not_in_top_k": 1}
    assert figures["agreement"] == pytest.approx(2 / 4)
    assert figures["agreement_decided_only"] == pytest.approx(2 / 3)


@pytest.fixture
def eval_components(fake_components: FakeComponents) -> Iterator[EvalComponents]:
    components = EvalComponents(fake_components)
    with use_components(components):
        yield components


class _FilteringStore(StaticStore):
    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Any]:
        self.queries.append((query, k))
        where = kwargs.get("filter")
        docs = self.documents
        if where:
            docs = [d for d in docs if d.metadata["source"] != where["source"]["$ne"]]
        return docs[:k]


def test_experiments_run_every_question_and_share_generator_answers(
    eval_components: EvalComponents, fake_components: FakeComponents
) -> None:
    fake_components.store = _FilteringStore(fake_corpus())
    calls: list[str] = []

    def respond(messages: list[BaseMessage]) -> str:
        calls.append(messages[-1].text)
        return "Leonardo da Vinci." if "Leonardo" in messages[-1].text else "I do not know."

    fake_components.chat = ScriptedChatModel(respond=respond, prompts=[])
    question = EvalQuestion(
        "m", "Who painted the Mona Lisa?", ("Leonardo",), ("wikipedia:Mona Lisa",)
    )
    chosen = {e.name: e for e in EXPERIMENTS}
    experiments: list[Experiment] = [
        chosen[name] for name in ("rag", "crag", "crag without incorrect", "rag, gold removed")
    ]
    options = EvalOptions(
        questions=[question],
        question_source="test",
        store_path="unused",
        experiments=experiments,
        progress=False,
        performance=False,
        gold_texts={"wikipedia:Mona Lisa": "Leonardo painted it."},
    )
    context = Context(fetch_pages=False)
    with llm_cache():
        rows = run_experiments(options, context, eval_components)
    by_name = {r.experiment: r for r in rows}
    assert by_name["rag"].correct and by_name["crag"].correct
    assert by_name["crag"].action == "correct"
    assert by_name["crag"].gold_in_top_k is True
    assert by_name["rag, gold removed"].gold_in_top_k is False
    assert not by_name["rag, gold removed"].correct
    assert "generate" in by_name["crag"].stages and "grade" in by_name["crag"].stages
    # "crag without incorrect" asks the very prompt "crag" asked: answered from the cache.
    assert by_name["crag without incorrect"].answer == by_name["crag"].answer
    assert len(calls) == 3
    assert eval_components.removed == {}

    results = summarise(options, context, rows, seconds=1.0)
    assert [e["name"] for e in results["experiments"]] == [e.name for e in experiments]
    assert results["experiments"][1]["accuracy"] == 1.0
    assert results["data"]["answer_in_gold_document"] == 1
    assert results["latency"]["crag_over_rag"]["median_total"] is not None
    assert results["agreement"]["table"]["correct"]["gold_in_top_k"] == 1
    assert len(results["rows"]) == 4


def test_a_failing_run_becomes_a_row_with_its_error(
    eval_components: EvalComponents, fake_components: FakeComponents
) -> None:
    class Broken:
        def similarity_search(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("disk on fire")

    fake_components.store = Broken()
    options = EvalOptions(
        questions=_questions(1),
        question_source="test",
        store_path="unused",
        experiments=[e for e in EXPERIMENTS if e.name == "rag"],
        progress=False,
        performance=False,
    )
    rows = run_experiments(options, Context(), eval_components)
    assert rows[0].error is not None and "disk on fire" in rows[0].error
    assert rows[0].correct is False


def test_eval_options_have_no_questions_error(tmp_path: Path) -> None:
    from evaluation.runner import run_eval

    with pytest.raises(ValueError, match="no questions"):
        run_eval(EvalOptions(questions=[], question_source="t", store_path=str(tmp_path)))
