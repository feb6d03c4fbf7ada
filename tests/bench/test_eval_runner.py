"""crag-bench eval's machinery: node timing, store views, caches, figures, the experiment loop."""

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from crag.app.cli.settings import CommandSettings
from crag.settings.context import Context
from crag.settings.deployment import deployment_settings
from crag.settings.method import MethodConfig
from crag.settings.run_settings import RunSettings
from crag.settings.setting_checks import InvalidSettingError
from crag.vectorstore.embeddings import load_embeddings
from crag.vectorstore.store import open_store
from crag_bench.eval_components import (
    CachingEvaluator,
    EvalComponents,
    SourceFilter,
    SourceFilteringStore,
)
from crag_bench.experiments import EXPERIMENTS, Experiment
from crag_bench.questions import EvalQuestion
from crag_bench.runner import (
    EvalOptions,
    Row,
    _alone_and_together,
    abstention_figures,
    agreement_figures,
    base_settings,
    batch_generation,
    experiment_figures,
    experiment_graphs,
    gold_removal_figures,
    llm_cache,
    plan_runs,
    removal_order,
    removed_count,
    removed_share,
    run_experiments,
    statistics_figures,
    summarise,
)
from crag_bench.timing import StageTimer
from tests.fakes import FakeComponents, FixedScoreEvaluator, ScriptedChatModel, StaticStore
from tests.fakes import corpus_documents as fake_corpus
from tests.integration_support import build_small_store


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
    removed: dict[str, SourceFilter] = {}
    view = SourceFilteringStore(small_store, removed)
    full = [d.metadata["source"] for d in view.similarity_search(question, k=5)]
    assert full[0] == "wikipedia:Mona Lisa"
    removed[question] = SourceFilter.hide(("wikipedia:Mona Lisa",))
    hidden = [d.metadata["source"] for d in view.similarity_search(question, k=5)]
    assert "wikipedia:Mona Lisa" not in hidden
    assert len(hidden) == 5
    assert hidden[:4] == [s for s in full if s != "wikipedia:Mona Lisa"][:4]
    other = [d.metadata["source"] for d in view.similarity_search("Where is the Louvre?", k=3)]
    assert "wikipedia:Louvre" in other, "another question lost its gold"


def test_source_filtering_store_hides_several_sources(small_store: Any) -> None:
    question = "Who painted the Mona Lisa?"
    gold = ("wikipedia:Mona Lisa", "wikipedia:Leonardo da Vinci")
    view = SourceFilteringStore(small_store, {question: SourceFilter.hide(gold)})
    hidden = [d.metadata["source"] for d in view.similarity_search(question, k=8)]
    assert len(hidden) == 8
    assert not set(gold) & set(hidden)


def test_oracle_view_searches_only_the_gold_sources(small_store: Any) -> None:
    question = "Where is the Louvre?"
    gold = ("wikipedia:Mona Lisa", "wikipedia:Raphael")
    filters = {question: SourceFilter.restrict(gold)}
    view = SourceFilteringStore(small_store, filters)
    only = view.similarity_search(question, k=10)
    assert only, "the gold documents' passages were not found"
    assert {d.metadata["source"] for d in only} == set(gold)
    # Exactly the gold documents' passages of the full store, in the same order.
    everything = small_store.similarity_search(question, k=200)
    expected = [d.page_content for d in everything if d.metadata["source"] in gold][:10]
    assert [d.page_content for d in only] == expected
    single = SourceFilteringStore(
        small_store, {question: SourceFilter.restrict(("wikipedia:Paris",))}
    )
    assert {d.metadata["source"] for d in single.similarity_search(question, k=3)} == {
        "wikipedia:Paris"
    }
    unfiltered = [d.metadata["source"] for d in view.similarity_search("Who was Raphael?", k=4)]
    assert len(set(unfiltered)) > 1, "another question was restricted"


def test_caching_evaluator_scores_each_pair_once() -> None:
    inner = FixedScoreEvaluator({"a": 0.5})
    cached = CachingEvaluator(inner)
    assert cached.score("q", ["a", "b", "a"]) == [0.5, -1.0, 0.5]
    assert cached.score("q", ["b", "c"]) == [-1.0, -1.0]
    assert inner.calls == [("q", ["a", "b"]), ("q", ["c"])]
    assert cached.score("other", ["a"]) == [0.5]
    assert len(inner.calls) == 3


def test_caching_evaluator_keeps_strip_scores_apart_from_passage_scores() -> None:
    class StripScorer(FixedScoreEvaluator):
        def score_strips(self, question: str, strips: Any) -> list[float]:
            self.calls.append(("strips:" + question, list(strips)))
            return [0.25 for _ in strips]

    inner = StripScorer({"a": 0.5})
    cached = CachingEvaluator(inner)
    assert cached.score("q", ["a"]) == [0.5]
    assert cached.score_strips("q", ["a", "a"]) == [0.25, 0.25]
    assert cached.score_strips("q", ["a"]) == [0.25]
    assert cached.score("q", ["a"]) == [0.5]
    assert inner.calls == [("q", ["a"]), ("strips:q", ["a"])]


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


def test_removed_share_is_seeded_and_nested() -> None:
    questions = [*_questions(10), EvalQuestion("nogold", "?", ("x",))]
    half = removed_share(questions, 50, seed=0)
    assert len(half) == 5
    assert half == removed_share(questions, 50, seed=0)
    assert half != removed_share(questions, 50, seed=1)
    assert "nogold" not in half
    quarter = removed_share(questions, 25, seed=0)
    assert len(quarter) == 3  # 2.5 questions: halves round up
    assert half[:3] == quarter
    assert set(half) <= set(removed_share(questions, 75, seed=0))
    assert removed_share(questions, 0, seed=0) == []
    assert sorted(removed_share(questions, 100, seed=0)) == sorted(q.id for q in questions[:10])
    with pytest.raises(ValueError, match="0 to 100"):
        removed_share(questions, 101, seed=0)


def test_removed_count_rounds_halves_up() -> None:
    assert [removed_count(5, p) for p in (0, 25, 50, 75, 100)] == [0, 1, 3, 4, 5]
    assert [removed_count(4, p) for p in (0, 25, 50, 75, 100)] == [0, 1, 2, 3, 4]


def test_plan_hides_gold_for_the_share_and_restricts_the_oracle() -> None:
    questions = [*_questions(4), EvalQuestion("nogold", "no gold?", ("x",))]
    chosen = {e.name: e for e in EXPERIMENTS}
    options = EvalOptions(
        questions=questions,
        question_source="test",
        store_path="unused",
        experiments=[chosen[n] for n in ("rag", "oracle", "rag-gold-removed")],
        gold_removed_share=50,
    )
    plan = plan_runs(options)
    removed = set(removed_share(questions, 50, seed=0))
    assert len(removed) == 2
    rag = [r for r in plan if r.experiment.name == "rag"]
    assert [r.question.id for r in rag] == [q.id for q in questions]
    assert all(r.view is None and r.counted for r in rag)
    oracle = [r for r in plan if r.experiment.name == "oracle"]
    assert [r.question.id for r in oracle] == [q.id for q in questions[:4]]
    assert all(r.view == SourceFilter.restrict(r.question.gold_sources) for r in oracle)
    gold_removed = [r for r in plan if r.experiment.name == "rag-gold-removed"]
    hidden = [r for r in gold_removed if r.view is not None]
    assert [r.question.id for r in hidden] == [q.id for q in questions[:4]]
    assert all(r.view == SourceFilter.hide(r.question.gold_sources) for r in hidden)
    assert {r.question.id for r in hidden if r.counted} == removed
    kept = [r for r in gold_removed if r.view is None]
    assert {r.question.id for r in kept} == {q.id for q in questions[:4]} - removed
    assert all(r.counted for r in kept)
    counted = [r.question.id for r in gold_removed if r.counted]
    assert sorted(counted) == sorted(q.id for q in questions[:4]), "one counted run each"


def test_without_the_curve_only_the_removed_share_runs_without_its_gold() -> None:
    questions = _questions(4)
    chosen = {e.name: e for e in EXPERIMENTS}
    options = EvalOptions(
        questions=questions,
        question_source="test",
        store_path="unused",
        experiments=[chosen["rag-gold-removed"]],
        gold_removed_share=50,
        gold_removal_curve=False,
    )
    plan = plan_runs(options)
    removed = set(removed_share(questions, 50, seed=0))
    assert {r.question.id for r in plan if r.view is not None} == removed
    assert all(r.counted for r in plan)
    assert sorted(r.question.id for r in plan) == sorted(q.id for q in questions)


def test_workers_run_the_latency_sample_alone_and_each_question_in_one_unit() -> None:
    questions = _questions(4)
    chosen = {e.name: e for e in EXPERIMENTS}
    options = EvalOptions(
        questions=questions,
        question_source="test",
        store_path="unused",
        experiments=[chosen[n] for n in ("rag", "crag", "oracle", "rag-gold-removed")],
        workers=4,
        latency_questions=2,
    )
    plan = plan_runs(options)
    alone, units = _alone_and_together(plan, options)
    assert [(r.question.id, r.experiment.name) for r in alone] == [
        (q.id, name) for q in questions[:2] for name in ("rag", "crag")
    ]
    assert len(units) == 4
    for unit in units:
        assert len({r.question.question for r in unit}) == 1
    assert sorted(map(id, alone + [r for u in units for r in u])) == sorted(map(id, plan))
    sequential = dataclasses.replace(options, workers=1)
    assert _alone_and_together(plan, sequential) == (plan, [])


def test_gold_removed_figures_cover_all_removed_and_kept() -> None:
    experiment = next(e for e in EXPERIMENTS if e.name == "crag-gold-removed")
    rows = [
        _row("crag-gold-removed", "q0", False, gold_removed=True),
        _row("crag-gold-removed", "q1", True, gold_removed=True, answer_in_knowledge=True),
        _row("crag-gold-removed", "q2", False, gold_removed=True, counted=False),
        _row("crag-gold-removed", "q2", True),
        _row("crag-gold-removed", "q3", True, gold_removed=True, counted=False),
        _row("crag-gold-removed", "q3", True, answer_in_knowledge=True),
    ]
    figures = experiment_figures(experiment, rows)
    assert (figures["questions"], figures["correct"]) == (4, 3)
    assert figures["answer_reached_generator"] == 0.5
    assert figures["removed"] == {
        "questions": 2,
        "correct": 1,
        "accuracy": 0.5,
        "answer_reached_generator": 0.5,
    }
    assert (figures["kept"]["questions"], figures["kept"]["accuracy"]) == (2, 1.0)


def test_statistics_compare_crag_with_every_experiment_and_gold_removed_pairs() -> None:
    chosen = {e.name: e for e in EXPERIMENTS}
    experiments = [
        chosen[n] for n in ("rag", "crag", "oracle", "rag-gold-removed", "crag-gold-removed")
    ]
    ids = [f"q{i}" for i in range(20)]
    rows = [_row("crag", q, i < 12, answer_in_knowledge=i < 15) for i, q in enumerate(ids)]
    rows += [_row("rag", q, i < 10, answer_in_knowledge=i < 15) for i, q in enumerate(ids)]
    rows += [_row("oracle", q, i < 16) for i, q in enumerate(ids[:10])]
    for name, right in (("crag-gold-removed", 8), ("rag-gold-removed", 2)):
        for i, q in enumerate(ids):
            removed = i < 10
            rows.append(_row(name, q, i < right or i >= 18, gold_removed=removed))
            if not removed:
                rows.append(_row(name, q, False, gold_removed=True, counted=False))
    figures = statistics_figures(experiments, rows, seed=0, resamples=2000)
    pairs = [(c["a"], c["b"], c["scope"]) for c in figures["comparisons"]]
    assert pairs == [
        ("crag", "rag", "all"),
        ("crag", "oracle", "all"),
        ("crag", "rag-gold-removed", "all"),
        ("crag", "crag-gold-removed", "all"),
        ("crag-gold-removed", "rag-gold-removed", "all"),
        ("crag-gold-removed", "rag-gold-removed", "removed"),
    ]
    by_pair = {(c["a"], c["b"], c["scope"]): c for c in figures["comparisons"]}
    crag_rag = by_pair[("crag", "rag", "all")]
    assert crag_rag["questions"] == 20
    assert crag_rag["accuracy"]["difference"] == pytest.approx(0.1)
    assert (crag_rag["accuracy"]["a_only"], crag_rag["accuracy"]["b_only"]) == (2, 0)
    assert crag_rag["accuracy"]["p_value"] == pytest.approx(0.5)
    assert crag_rag["accuracy"]["verdict"] == "not significant"
    assert crag_rag["knowledge_recall"]["difference"] == 0.0
    oracle = by_pair[("crag", "oracle", "all")]
    assert oracle["questions"] == 10  # only the questions both ran
    assert oracle["accuracy"]["difference"] == 0.0
    removed_only = by_pair[("crag-gold-removed", "rag-gold-removed", "removed")]
    assert removed_only["questions"] == 10
    assert removed_only["accuracy"]["difference"] == pytest.approx(0.6)
    assert removed_only["accuracy"]["p_value"] == pytest.approx(2 / 2**6)
    assert removed_only["accuracy"]["verdict"] == "better"
    assert by_pair[("crag-gold-removed", "rag-gold-removed", "all")]["questions"] == 20
    assert figures["resamples"] == 2000 and figures["seed"] == 0
    assert statistics_figures(experiments, rows, seed=0, resamples=2000) == figures
    rag_rows = [r for r in rows if r.experiment == "rag"]
    assert statistics_figures(experiments[:1], rag_rows, 0, 10)["comparisons"] == []


def test_gold_removal_curve_mixes_removed_and_full_runs() -> None:
    questions = _questions(4)
    rows = [_row("rag", q.id, True) for q in questions]
    rows += [_row("rag-gold-removed", q.id, False, gold_removed=True) for q in questions]
    rows += [_row("crag", q.id, True) for q in questions]
    rows += [_row("crag-gold-removed", q.id, True, gold_removed=True) for q in questions]
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
def eval_components(fake_components: FakeComponents) -> EvalComponents:
    return EvalComponents(fake_components)


def _base(context: Context | None = None, **method: Any) -> CommandSettings:
    """Base settings of an eval: ``context`` per run, the method with ``method``."""
    return CommandSettings(context or Context(), MethodConfig(**method), deployment_settings())


class _FilteringStore(StaticStore):
    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Any]:
        self.queries.append((query, k))
        where = kwargs.get("filter")
        docs = self.documents
        if where:
            condition = where["source"]
            if "$ne" in condition:
                docs = [d for d in docs if d.metadata["source"] != condition["$ne"]]
            if "$nin" in condition:
                docs = [d for d in docs if d.metadata["source"] not in condition["$nin"]]
            if "$in" in condition:
                docs = [d for d in docs if d.metadata["source"] in condition["$in"]]
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
        chosen[name] for name in ("rag", "crag", "crag-without-incorrect", "rag-gold-removed")
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
    base = _base(fetch_pages=False)
    with llm_cache():
        rows = run_experiments(options, base, eval_components)
    by_name = {r.experiment: r for r in rows}
    assert by_name["rag"].correct and by_name["crag"].correct
    assert by_name["crag"].action == "correct"
    assert by_name["crag"].gold_in_top_k is True
    assert by_name["rag-gold-removed"].gold_in_top_k is False
    assert not by_name["rag-gold-removed"].correct
    assert "generate" in by_name["crag"].stages and "grade" in by_name["crag"].stages
    # "crag-without-incorrect" asks the very prompt "crag" asked: answered from the cache.
    assert by_name["crag-without-incorrect"].answer == by_name["crag"].answer
    assert len(calls) == 3
    assert eval_components.filters == {}

    results = summarise(options, base.run_settings(), rows, seconds=1.0)
    assert [e["name"] for e in results["experiments"]] == [e.name for e in experiments]
    assert results["experiments"][1]["accuracy"] == 1.0
    assert results["data"]["answer_in_gold_document"] == 1
    assert results["latency"]["crag_over_rag"]["median_total"] is not None
    assert results["agreement"]["table"]["correct"]["gold_in_top_k"] == 1
    assert len(results["rows"]) == 4


def test_questions_run_in_threads_give_the_rows_of_a_sequential_run(
    eval_components: EvalComponents, fake_components: FakeComponents
) -> None:
    fake_components.store = _FilteringStore(fake_corpus())
    fake_components.chat = ScriptedChatModel(
        respond=lambda m: "Leonardo da Vinci." if "Leonardo" in m[-1].text else "No idea.",
        prompts=[],
    )
    questions = [
        EvalQuestion(
            f"q{i}", f"Who painted the Mona Lisa, {i}?", ("Leonardo",), ("wikipedia:Mona Lisa",)
        )
        for i in range(6)
    ]
    chosen = {e.name: e for e in EXPERIMENTS}
    options = EvalOptions(
        questions=questions,
        question_source="test",
        store_path="unused",
        experiments=[chosen[n] for n in ("rag", "crag", "oracle", "rag-gold-removed")],
        progress=False,
        performance=False,
        latency_questions=2,
    )
    base = _base(fetch_pages=False)

    def outcome(rows: list[Any]) -> list[tuple[Any, ...]]:
        return [(r.experiment, r.id, r.answer, r.correct, r.gold_removed, r.counted) for r in rows]

    with llm_cache():
        sequential = run_experiments(options, base, eval_components)
    with llm_cache():
        threaded = run_experiments(dataclasses.replace(options, workers=4), base, eval_components)
    assert outcome(threaded) == outcome(sequential)
    assert any(not r.gold_in_top_k for r in threaded if r.gold_removed)
    assert all(r.timed for r in sequential if r.experiment in ("rag", "crag"))
    timed = {(r.experiment, r.id) for r in threaded if r.timed}
    assert timed == {(e, q.id) for e in ("rag", "crag") for q in questions[:2]}
    assert eval_components.filters == {}
    results = summarise(options, base.run_settings(), threaded, seconds=1.0)
    assert results["latency"]["experiments"]["rag"]["total"]["n"] == 2


def test_oracle_answers_from_the_gold_passages_only(
    eval_components: EvalComponents, fake_components: FakeComponents
) -> None:
    store = _FilteringStore(list(reversed(fake_corpus())))  # the gold passage ranks second
    fake_components.store = store
    fake_components.chat = ScriptedChatModel(
        respond=lambda m: "Leonardo." if "Leonardo" in m[-1].text else "I do not know.",
        prompts=[],
    )
    questions = [
        EvalQuestion("m", "Who painted the Mona Lisa?", ("Leonardo",), ("wikipedia:Mona Lisa",)),
        EvalQuestion("x", "Who knows?", ("nobody",)),
    ]
    chosen = {e.name: e for e in EXPERIMENTS}
    options = EvalOptions(
        questions=questions,
        question_source="test",
        store_path="unused",
        experiments=[chosen["oracle"]],
        progress=False,
        performance=False,
    )
    rows = run_experiments(options, _base(Context(top_k=1)), eval_components)
    assert [(r.experiment, r.id) for r in rows] == [("oracle", "m")], "no gold: skipped"
    assert rows[0].passages == 1 and rows[0].gold_in_top_k is True
    assert rows[0].correct and rows[0].answer_in_knowledge
    assert not rows[0].gold_removed and rows[0].counted
    assert eval_components.filters == {}


def test_each_experiment_graph_runs_its_method_over_the_base_settings(
    eval_components: EvalComponents,
) -> None:
    options = EvalOptions(
        questions=[],
        question_source="test",
        store_path="/eval/store",
        collection="eval",
        default_corpus=False,
        settings={"strips_kept": 7, "top_k": 4, "evaluator_batch_size": 3},
    )
    base = base_settings(options, "http://127.0.0.1:9", "127.0.0.1")
    assert (base.context.top_k, base.method.strips_kept) == (4, 7)
    assert (base.deployment.store_path, base.deployment.search_url) == (
        "/eval/store",
        "http://127.0.0.1:9",
    )
    graphs = experiment_graphs(EXPERIMENTS, base, eval_components)
    assert list(graphs) == [e.name for e in EXPERIMENTS]
    for experiment in EXPERIMENTS:
        method = base.method.replaced(**experiment.settings)
        expected = RunSettings.combine(base.context, method, base.deployment)
        assert graphs[experiment.name].settings == expected, experiment.name
    assert graphs["crag"].settings.strips_kept == 7  # --set
    assert graphs["crag-strips-wide"].settings.strips_kept == 10  # the experiment's own
    wide = graphs["crag-strips-wide"].settings
    assert (wide.top_k, wide.deployment.collection, wide.deployment.evaluator_batch_size) == (
        4,
        "eval",
        3,
    )
    assert wide.deployment.search_provider == "searxng" and not wide.deployment.default_corpus


def test_base_settings_refuse_an_unknown_setting_and_experiments_a_misfit(
    eval_components: EvalComponents,
) -> None:
    options = EvalOptions(questions=[], question_source="t", store_path="x", settings={"k": 1})
    with pytest.raises(InvalidSettingError, match="unknown setting 'k'"):
        base_settings(options, "http://127.0.0.1:9", "127.0.0.1")
    per_run = Experiment("x", "crag", "g", "a per-run setting", {"top_k": 3})
    with pytest.raises(InvalidSettingError, match="unknown setting 'top_k'"):
        experiment_graphs([per_run], _base(), eval_components)
    # Below the embedding evaluator's lower threshold: refused before any run.
    misfit = Experiment("x", "crag", "g", "upper below lower", {"upper_threshold": -0.95})
    with pytest.raises(InvalidSettingError, match="must not be above upper_threshold"):
        experiment_graphs([misfit], _base(), eval_components)


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
    rows = run_experiments(options, _base(), eval_components)
    assert rows[0].error is not None and "disk on fire" in rows[0].error
    assert rows[0].correct is False


def test_eval_options_have_no_questions_error(tmp_path: Path) -> None:
    from crag_bench.runner import run_eval

    with pytest.raises(ValueError, match="no questions"):
        run_eval(EvalOptions(questions=[], question_source="t", store_path=str(tmp_path)))


def test_batch_generation_turns_batching_on_where_the_model_has_it() -> None:
    class Batchable:
        def __init__(self) -> None:
            self.sizes: list[int] = []

        def enable_batching(self, size: int) -> None:
            self.sizes.append(size)

    model = Batchable()
    batch_generation(model, 8)
    assert model.sizes == [8]
    batch_generation(object(), 8)  # a model without batching is left alone


def test_batch_generation_leaves_a_model_on_onnxruntime_unbatched() -> None:
    class OnOnnxruntime:
        decodes_on_onnxruntime = True

        def __init__(self) -> None:
            self.sizes: list[int] = []

        def enable_batching(self, size: int) -> None:
            self.sizes.append(size)

    model = OnOnnxruntime()
    batch_generation(model, 8)
    assert model.sizes == []


def test_rows_say_whether_the_run_abstained_and_figures_count_it(
    eval_components: EvalComponents, fake_components: FakeComponents
) -> None:
    fake_components.scorer = FixedScoreEvaluator({}, default=-1.0)  # nothing relevant, web off
    chosen = {e.name: e for e in EXPERIMENTS}
    options = EvalOptions(
        questions=_questions(1),
        question_source="test",
        store_path="unused",
        experiments=[chosen["crag"], chosen["crag-without-abstention"]],
        progress=False,
        performance=False,
    )
    rows = run_experiments(options, _base(fetch_pages=False), eval_components)
    by_name = {r.experiment: r for r in rows}
    assert by_name["crag"].abstained is True and by_name["crag"].correct is False
    assert by_name["crag-without-abstention"].abstained is False
    assert by_name["crag-without-abstention"].answer  # the generator answered
    figures = experiment_figures(chosen["crag"], [by_name["crag"]])
    assert (figures["abstained"], figures["abstention_rate"]) == (1, 1.0)


def test_abstention_figures_pair_crag_with_crag_without_abstention() -> None:
    rows = [
        _row("crag", "q0", False, abstained=True),
        _row("crag", "q1", False, abstained=True),
        _row("crag", "q2", True),
        _row("crag", "q3", False, abstained=True),
        _row("crag-without-abstention", "q0", True),
        _row("crag-without-abstention", "q1", False),
        _row("crag-without-abstention", "q2", True),
    ]
    figures = abstention_figures(rows)
    assert figures == {
        "questions": 3,
        "abstained": 2,
        "right_without_abstention": 1,
        "wrong_without_abstention": 1,
    }
    assert abstention_figures([r for r in rows if r.experiment == "crag"]) is None
    crag = next(e for e in EXPERIMENTS if e.name == "crag")
    assert experiment_figures(crag, rows[:4])["abstention_rate"] == 0.75
    without = next(e for e in EXPERIMENTS if e.name == "crag-without-abstention")
    assert without.group == "knowledge"
    assert without.settings == {"abstain_without_knowledge": False}
