from crag.core.state import KnowledgeStrip, State
from crag.knowledge.combination import best_first, combine_knowledge, without_duplicates
from crag.nodes.generate import gathered_knowledge
from crag.settings.run_settings import RunSettings


def strip(text: str, score: float | None, origin: str = "internal") -> KnowledgeStrip:
    return {
        "text": text,
        "source": f"{origin}:{text}",
        "chunk": 0 if origin == "internal" else None,
        "origin": origin,  # type: ignore[typeddict-item]
        "score": score,
    }


def test_the_same_text_from_store_and_web_is_given_once_where_it_first_appears() -> None:
    internal = [strip("Mona Lisa\nIt was painted by Leonardo.", 0.2)]
    external = [
        strip("Mona Lisa\nIt  was painted by  leonardo.", 0.3, "external"),
        strip("Louvre\nIt is in Paris.", -0.5, "external"),
    ]
    combined = combine_knowledge(internal, external)
    assert [s["origin"] for s in combined] == ["internal", "external"]
    assert combined[1]["text"] == "Louvre\nIt is in Paris."
    assert without_duplicates([*external, *external]) == external


def test_pooled_keeps_the_best_of_both_in_their_order() -> None:
    internal = [strip("a", 0.1), strip("b", -0.8), strip("c", 0.5)]
    external = [strip("d", 0.4, "external"), strip("e", -0.9, "external")]
    pooled = combine_knowledge(internal, external, pooled_keep=3)
    assert [s["text"] for s in pooled] == ["a", "c", "d"]
    # one branch alone is never cut: it was selected already
    assert combine_knowledge(internal, [], pooled_keep=1) == internal


def test_best_first_orders_by_score_with_unscored_first() -> None:
    strips = [strip("a", 0.1), strip("b", None), strip("c", 0.5), strip("d", 0.1)]
    assert [s["text"] for s in best_first(strips)] == ["b", "c", "a", "d"]


def test_only_an_ambiguous_run_is_pooled() -> None:
    internal = [strip("a", 0.1), strip("b", 0.2)]
    external = [strip("c", 0.3, "external")]
    pooled = RunSettings(ambiguous_knowledge="pooled", strips_kept=2, knowledge_order="original")
    paper = RunSettings(ambiguous_knowledge="both", knowledge_order="original")
    state: State = {
        "question": "q",
        "internal_knowledge": internal,
        "external_knowledge": external,
        "action": "ambiguous",
    }
    assert [s["text"] for s in gathered_knowledge(state, pooled)] == ["b", "c"]
    assert [s["text"] for s in gathered_knowledge(state, paper)] == ["a", "b", "c"]
    # the defaults: pooled, in order
    assert [s["text"] for s in gathered_knowledge(state, RunSettings(strips_kept=2))] == ["b", "c"]
    state["action"] = "correct"  # (a state no real run has: both lists with Correct)
    assert len(gathered_knowledge(state, pooled)) == 3
    ordered = gathered_knowledge(state, RunSettings(knowledge_order="score"))
    assert [s["text"] for s in ordered] == ["c", "b", "a"]
