"""Unit tests per node, with fixed-score evaluators, scripted chat models and static stores."""

from typing import Any, Literal

import pytest
from langgraph.runtime import Runtime
from langgraph.types import Overwrite

from crag.core.state import RetrievedPassage, StateUpdate
from crag.core.validation import InvalidQuestionError
from crag.nodes.decide_action import decide_action
from crag.nodes.generate import generate
from crag.nodes.grade import grade
from crag.nodes.refine import refine
from crag.nodes.retrieve import retrieve
from crag.nodes.rewrite_query import rewrite_query
from crag.nodes.web_search import web_search
from crag.settings.run_settings import RunSettings
from crag.websearch.base import SearchResult
from tests.fakes import MONA_LISA, FakeComponents, ScriptedChatModel, StaticSearch


def first_note(update: StateUpdate) -> str:
    """The first note of a node's update (a plain list here, never an ``Overwrite``)."""
    notes = update["notes"]
    assert isinstance(notes, list)
    return notes[0]


def node_runtime(settings: RunSettings | None = None) -> Runtime[RunSettings]:
    """A runtime as a graph hands it to a node: the run's joined settings, no stream."""
    return Runtime(context=settings or RunSettings())


RT = node_runtime()

KEYWORDS_RT = node_runtime(RunSettings(rewrite_for_search=True))
"""The paper's keyword rewrite (not the default: the question itself is searched)."""


def passage(
    text: str, score: float | None, source: str = "doc", chunk: int = 0
) -> RetrievedPassage:
    return {"text": text, "source": source, "chunk": chunk, "score": score}


def test_retrieve_resets_run_fields_and_returns_top_k(fake_components: FakeComponents) -> None:
    update = retrieve(
        {"question": "  Who painted the Mona Lisa? "},
        node_runtime(RunSettings(top_k=1)),
        fake_components,
    )
    assert update["question"] == "Who painted the Mona Lisa?"
    assert [d["source"] for d in update["documents"]] == ["wikipedia:Mona Lisa"]
    assert update["documents"][0]["score"] is None
    assert isinstance(update["notes"], Overwrite) and update["notes"].value == []
    assert update["internal_knowledge"] == [] and update["external_knowledge"] == []
    assert fake_components.store.queries == [("Who painted the Mona Lisa?", 1)]


@pytest.mark.parametrize(
    ("question", "message"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        (None, "no question"),
        (42, "must be a string"),
        ("x" * 100_000, "100,000 characters"),
        ("Who painted \udcff\udcfe?", "not valid UTF-8 text: it contains 2 unpaired surrogates"),
        ("\ud83d\ude00 smile?", "not valid UTF-8 text"),
    ],
)
def test_retrieve_rejects_bad_questions(
    fake_components: FakeComponents, question: Any, message: str
) -> None:
    with pytest.raises(InvalidQuestionError, match=message):
        retrieve({"question": question}, RT, fake_components)
    assert fake_components.store.queries == []


def test_grade_scores_every_passage_in_one_call(fake_components: FakeComponents) -> None:
    docs = [passage(MONA_LISA, None), passage("Nothing here.", None)]
    update = grade({"question": "q", "documents": docs}, RT, fake_components)
    assert [d["score"] for d in update["documents"]] == [0.9, -1.0]
    assert len(fake_components.scorer.calls) == 1


def test_grade_with_no_documents_does_not_call_the_evaluator(
    fake_components: FakeComponents,
) -> None:
    assert grade({"question": "q", "documents": []}, RT, fake_components) == {"documents": []}
    assert fake_components.scorer.calls == []


@pytest.mark.parametrize(
    ("scores", "action"),
    [([0.9, -1.0], "correct"), ([-0.7, -1.0], "ambiguous"), ([-1.0, -1.0], "incorrect")],
)
def test_decide_action_node(scores: list[float], action: str) -> None:
    docs = [passage("t", s) for s in scores]
    update = decide_action({"question": "q", "documents": docs}, RT)
    assert update["action"] == action
    assert update["decision"]["action"] == action


def test_decide_action_uses_context_thresholds() -> None:
    docs = [passage("t", 0.3)]
    state: Any = {"question": "q", "documents": docs}
    assert (
        decide_action(state, node_runtime(RunSettings(upper_threshold=0.2)))["action"] == "correct"
    )


def test_refine_keeps_relevant_strips_in_original_order(fake_components: FakeComponents) -> None:
    docs = [passage(MONA_LISA, 0.9, "wikipedia:Mona Lisa"), passage("Irrelevant. Text.", -0.995)]
    # The fake scores are not calibrated: no margin, or the 0.2 strip would go as far below 0.9.
    update = refine(
        {"question": "q", "documents": docs},
        node_runtime(RunSettings(strip_margin=0)),
        fake_components,
    )
    texts = [s["text"] for s in update["internal_knowledge"]]
    # Sentence 1 mentions Leonardo (0.9); sentence 3 mentions the Louvre (0.2); sentence 2
    # scores -1 and is dropped. The passage below the lower threshold is not decomposed.
    assert texts == [
        "The Mona Lisa is a half-length portrait painting by the Italian artist Leonardo da Vinci.",
        "The painting is held at the Louvre in Paris.",
    ]
    assert all(
        s["origin"] == "internal" and s["source"] == "wikipedia:Mona Lisa"
        for s in update["internal_knowledge"]
    )
    scored = fake_components.scorer.calls[-1][1]
    assert "Irrelevant." not in " ".join(scored)


def test_refine_respects_strips_kept(fake_components: FakeComponents) -> None:
    docs = [passage(MONA_LISA, 0.9)]
    update = refine(
        {"question": "q", "documents": docs},
        node_runtime(RunSettings(strips_kept=1)),
        fake_components,
    )
    assert [s["score"] for s in update["internal_knowledge"]] == [0.9]


def test_refine_keeps_the_best_strips_passage_whole_when_asked(
    fake_components: FakeComponents,
) -> None:
    photosynthesis = "Photosynthesis feeds plants. It needs light. The Louvre has none."
    docs = [
        passage(photosynthesis, 0.1, "other", 3),
        passage(MONA_LISA, 0.9, "wikipedia:Mona Lisa"),
    ]
    context = RunSettings(best_passage_whole=True, strips_kept=3, strip_margin=0)
    update = refine({"question": "q", "documents": docs}, node_runtime(context), fake_components)
    knowledge = update["internal_knowledge"]
    # Kept strips: "The Louvre has none." (0.2, passage 1), Leonardo's sentence (0.9) and the
    # Louvre sentence (0.2) of the Mona Lisa; the best strip's passage replaces both of its
    # strips, whole, with the best strip's score, in recomposed (passage) order.
    assert [(k["text"], k["source"], k["chunk"], k["score"]) for k in knowledge] == [
        ("The Louvre has none.", "other", 3, 0.2),
        (MONA_LISA, "wikipedia:Mona Lisa", 0, 0.9),
    ]
    plain_context = RunSettings(strips_kept=3, strip_margin=0)
    plain = refine(
        {"question": "q", "documents": docs}, node_runtime(plain_context), fake_components
    )
    assert [k["text"] for k in plain["internal_knowledge"]] == [
        "The Louvre has none.",
        "The Mona Lisa is a half-length portrait painting by the Italian artist Leonardo da Vinci.",
        "The painting is held at the Louvre in Paris.",
    ]


def test_refine_notes_when_nothing_survives(fake_components: FakeComponents) -> None:
    docs = [passage("Nothing relevant. At all. Really.", 0.0)]
    update = refine({"question": "q", "documents": docs}, RT, fake_components)
    assert update["internal_knowledge"] == []
    assert "kept no strip" in first_note(update)


def test_rewrite_query_uses_model_keywords(fake_components: FakeComponents) -> None:
    update = rewrite_query({"question": "Who painted the Mona Lisa?"}, KEYWORDS_RT, fake_components)
    assert update == {"search_query": "Mona Lisa, painter"}
    messages = fake_components.chat.prompts[-1]
    assert messages[0].type == "system" and messages[0].text.startswith("Extract at most three")
    assert [m.type for m in messages[1:3]] == ["human", "ai"]
    assert messages[-1].text == "question: Who painted the Mona Lisa?"


def test_rewrite_query_rejects_keywords_copied_from_the_examples(
    fake_components: FakeComponents,
) -> None:
    fake_components.chat = ScriptedChatModel(respond=lambda m: "query: John Gwynn", prompts=[])
    update = rewrite_query({"question": "Who painted the Mona Lisa?"}, KEYWORDS_RT, fake_components)
    assert update["search_query"] == "Mona Lisa, painted"


@pytest.mark.parametrize("reply", ["", "   ", "!!!"])
def test_rewrite_query_falls_back_when_output_unusable(
    fake_components: FakeComponents, reply: str
) -> None:
    fake_components.chat = ScriptedChatModel(respond=lambda m: reply, prompts=[])
    update = rewrite_query({"question": "Who painted the Mona Lisa?"}, KEYWORDS_RT, fake_components)
    assert update["search_query"] == "Mona Lisa, painted"
    assert "no usable keywords" in first_note(update)


def test_rewrite_query_falls_back_when_model_fails(fake_components: FakeComponents) -> None:
    def boom(messages: Any) -> str:
        raise ConnectionError("provider down")

    fake_components.chat = ScriptedChatModel(respond=boom, prompts=[])
    update = rewrite_query({"question": "Who painted the Mona Lisa?"}, KEYWORDS_RT, fake_components)
    assert update["search_query"] == "Mona Lisa, painted"


def test_web_search_selects_relevant_snippets_wikipedia_first(
    fake_components: FakeComponents,
) -> None:
    fake_components.web = StaticSearch(
        [
            SearchResult("Blog", "https://blog.example/x", "Unrelated chatter."),
            SearchResult(
                "Mona Lisa - Wikipedia",
                "https://en.wikipedia.org/wiki/Mona_Lisa",
                "Painted by Leonardo da Vinci.",
            ),
            SearchResult("Empty", "https://empty.example", "   "),
        ]
    )
    snippets_only = node_runtime(RunSettings(fetch_pages=False))  # hermetic: no page is read
    update = web_search(
        {"question": "q", "search_query": "Mona Lisa, painter"}, snippets_only, fake_components
    )
    strips = update["external_knowledge"]
    assert [s["source"] for s in strips] == ["https://en.wikipedia.org/wiki/Mona_Lisa"]
    assert strips[0]["origin"] == "external" and strips[0]["chunk"] is None
    assert "wikipedia" in fake_components.web.queries[0].lower()


def test_web_search_unavailable_is_a_note_not_a_crash(fake_components: FakeComponents) -> None:
    fake_components.web = StaticSearch(error="DuckDuckGo could not be reached")
    update = web_search({"question": "q", "search_query": "x"}, RT, fake_components)
    assert update["external_knowledge"] == []
    assert update["notes"] == [
        "web search unavailable: DuckDuckGo could not be reached; answered without web knowledge"
    ]
    assert update["web_reason"] == "web search unavailable: DuckDuckGo could not be reached"


def test_web_search_no_results_is_noted(fake_components: FakeComponents) -> None:
    fake_components.web = StaticSearch([])
    update = web_search(
        {"question": "q", "search_query": "x"},
        node_runtime(RunSettings(prefer_wikipedia=False)),
        fake_components,
    )
    assert fake_components.web.queries == ["x"]
    assert "found nothing" in first_note(update)
    assert update["web_reason"] == first_note(update)


def test_generate_combines_knowledge_and_delimits_it(fake_components: FakeComponents) -> None:
    internal = {
        "text": "Internal fact.",
        "source": "d",
        "chunk": 0,
        "origin": "internal",
        "score": 0.9,
    }
    external = {
        "text": "Web fact.",
        "source": "https://w",
        "chunk": None,
        "origin": "external",
        "score": 0.5,
    }
    state: Any = {
        "question": "Who?",
        "internal_knowledge": [internal],
        "external_knowledge": [external],
    }
    update = generate(state, RT, fake_components)
    assert update["answer"] == "Leonardo da Vinci."
    assert update["knowledge"] == [internal, external]
    system, human = fake_components.chat.prompts[-1]
    assert "untrusted data" in system.text
    assert "<knowledge>\nInternal fact.\nWeb fact.\n</knowledge>" in human.text
    assert human.text.endswith("Question: Who?")
    assert "notes" not in update


def test_generate_without_knowledge_notes_it(fake_components: FakeComponents) -> None:
    update = generate({"question": "Who?"}, RT, fake_components)
    assert update["knowledge"] == []
    assert "no knowledge" in first_note(update)
    assert "(no knowledge was found)" in fake_components.chat.prompts[-1][1].text


class StripAwareEvaluator:
    """Passages score 0.5; strips, through ``score_strips``, by whether they name the Louvre."""

    name = "strip-aware"

    def __init__(self) -> None:
        self.methods: list[str] = []

    def score(self, question: str, passages: Any) -> list[float]:
        self.methods.append("score")
        return [0.5 for _ in passages]

    def score_strips(self, question: str, strips: Any) -> list[float]:
        self.methods.append("score_strips")
        return [0.9 if "Louvre" in s else -0.995 for s in strips]


@pytest.mark.parametrize(
    ("scoring", "method", "kept"),
    [
        ("strip-map", "score_strips", ["The painting is held at the Louvre in Paris."]),
        ("passage-map", "score", None),
    ],
)
def test_refine_scores_strips_with_the_strip_calibration_unless_told_otherwise(
    fake_components: FakeComponents,
    scoring: Literal["strip-map", "passage-map"],
    method: str,
    kept: list[str] | None,
) -> None:
    evaluator = StripAwareEvaluator()
    fake_components.scorer = evaluator
    docs = [passage(MONA_LISA, 0.9, "wikipedia:Mona Lisa")]
    runtime = node_runtime(RunSettings(strip_scoring=scoring))
    update = refine({"question": "q", "documents": docs}, runtime, fake_components)
    assert evaluator.methods == [method]
    texts = [s["text"] for s in update["internal_knowledge"]]
    if kept is not None:
        assert texts == kept
    else:  # every strip scores 0.5 with the passage map: all three kept, in order
        assert len(texts) == 3 and "Louvre" in texts[-1]


@pytest.mark.parametrize("refine_web", [True, False, None])
def test_web_paragraphs_are_kept_whole_or_refined_into_strips(
    fake_components: FakeComponents, refine_web: bool | None
) -> None:
    """Whole paragraphs by default (None: the setting left alone); strips with the setting."""
    evaluator = StripAwareEvaluator()
    fake_components.scorer = evaluator
    paragraph = (
        "The Mona Lisa is a portrait. It was painted by Leonardo da Vinci. "
        "The painting is held at the Louvre in Paris."
    )
    fake_components.web = StaticSearch(
        [
            SearchResult(
                "Mona Lisa - Wikipedia", "https://en.wikipedia.org/wiki/Mona_Lisa", paragraph
            )
        ]
    )
    context = RunSettings(fetch_pages=False)
    if refine_web is not None:
        context = context.replaced(refine_web_knowledge=refine_web)
    runtime = node_runtime(context)
    update = web_search({"question": "q", "search_query": "Mona Lisa"}, runtime, fake_components)
    texts = [s["text"] for s in update["external_knowledge"]]
    if refine_web:
        assert evaluator.methods == ["score_strips"]
        assert len(texts) == 1 and texts[0].endswith("The painting is held at the Louvre in Paris.")
        assert "portrait" not in texts[0]
    else:
        assert evaluator.methods == ["score"]
        assert len(texts) == 1 and "portrait" in texts[0] and "Louvre" in texts[0]
