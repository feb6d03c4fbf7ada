import pytest

from crag.core.state import KnowledgeStrip, RetrievedPassage
from crag.knowledge.selection import best_passage_whole, select_top
from crag.knowledge.strips import decompose, split_sentences
from crag.knowledge.words import content_tokens, heading_named, heading_of
from crag.nodes.generate import render_strip
from crag.prompts.rewrite import rewrite_turns
from crag.websearch.keywords import clean_query, fallback_keywords


def test_split_sentences_keeps_abbreviations_and_initials() -> None:
    text = "J. R. R. Tolkien wrote it. Dr. Smith agreed, e.g. in 1950. It sold well!"
    assert split_sentences(text) == [
        "J. R. R. Tolkien wrote it.",
        "Dr. Smith agreed, e.g. in 1950.",
        "It sold well!",
    ]


@pytest.mark.parametrize(
    ("mode", "size", "expected"),
    [
        ("sentences", 1, ["A one.", "B two.", "C three."]),
        ("sentences", 2, ["A one. B two.", "C three."]),
        ("words", 3, ["A one. B", "two. C three."]),
        ("passage", 1, ["A one. B two. C three."]),
    ],
)
def test_decompose_modes(mode: str, size: int, expected: list[str]) -> None:
    assert decompose("A one. B two. C three.", mode, size) == expected  # type: ignore[arg-type]


def test_short_passage_is_one_strip_and_empty_is_none() -> None:
    assert decompose("Only one. And two.", "sentences", 1) == ["Only one. And two."]
    assert decompose("   ", "sentences", 1) == []


def test_select_top_keeps_best_above_threshold_in_original_order() -> None:
    items = ["a", "b", "c", "d", "e", "f", "g"]
    scores = [0.1, 0.9, -0.6, 0.5, 0.8, -0.5, 0.7]
    # -0.6 and -0.5 are not above -0.5; of the rest the best 3 are b(0.9), e(0.8), g(0.7)
    assert select_top(items, scores, keep=3, threshold=-0.5) == ["b", "e", "g"]
    assert select_top(items, scores, keep=0, threshold=-0.5) == []
    with pytest.raises(ValueError):
        select_top(items, scores[:2], keep=1, threshold=0)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Henry Feilden, occupation", "Henry Feilden, occupation"),
        ("query: Mona Lisa, painter\nquestion: next", "Mona Lisa, painter"),
        ('"Mona Lisa, painter, Louvre, Paris"', "Mona Lisa, painter, Louvre"),
        ("   \n\n", None),
        ("...", None),
        ("word " * 40, None),
    ],
)
def test_clean_query(raw: str, expected: str | None) -> None:
    assert clean_query(raw) == expected


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Who painted the Mona Lisa?", "Mona Lisa, painted"),
        ("What is the religion of John Gwynn?", "John Gwynn, religion"),
        ("In what city was Billy Carlson born?", "Billy Carlson, city, born"),
    ],
)
def test_fallback_keywords_is_deterministic(question: str, expected: str) -> None:
    assert fallback_keywords(question) == expected
    assert fallback_keywords(question) == fallback_keywords(question)


def test_rewrite_turns_are_the_papers_few_shot_prompt() -> None:
    turns = rewrite_turns("Who painted the Mona Lisa?")
    assert turns[0][1].startswith("Extract at most three keywords separated by comma")
    assert turns[1:3] == [
        ("human", "question: What is Henry Feilden's occupation?"),
        ("ai", "query: Henry Feilden, occupation"),
    ]


def test_strips_carry_the_passage_heading() -> None:
    text = "Mona Lisa\nThe Mona Lisa is a portrait. It was painted by Leonardo. It hangs in Paris."
    strips = decompose(text, "sentences", 1)
    assert strips == [
        "Mona Lisa\nThe Mona Lisa is a portrait.",
        "Mona Lisa\nIt was painted by Leonardo.",
        "Mona Lisa\nIt hangs in Paris.",
    ]
    assert render_strip(strips[1]) == "Mona Lisa: It was painted by Leonardo."
    assert render_strip("No heading here. Just text.") == "No heading here. Just text."


@pytest.mark.parametrize(
    ("passage", "heading"),
    [
        ("Mona Lisa\nThe Mona Lisa is a painting.", "Mona Lisa"),
        ("# Alpha\nAlpha particles.", "Alpha"),
        ("A full sentence first.\nThen more.", None),
        ("Single line only", None),
        ("This first line is far too long to be a heading of any reasonable document\nx", None),
    ],
)
def test_heading_of(passage: str, heading: str | None) -> None:
    assert heading_of(passage) == heading


@pytest.mark.parametrize(
    ("question", "passage", "named"),
    [
        ("Who painted the Mona Lisa?", "Mona Lisa\nThe Mona Lisa is a painting.", 1.0),
        ("Who painted the Mona Lisa?", "Raphael\nRaphael was a painter.", 0.0),
        ("Who painted the Mona Lisa?", "The Mona Lisa is a painting.", 0.0),
        ("What did Leonardo paint?", "Leonardo da Vinci\nLeonardo was a polymath.", 0.0),
    ],
)
def test_heading_named(question: str, passage: str, named: float) -> None:
    assert heading_named(question, passage) == named


def test_content_tokens_stem_and_drop_stopwords() -> None:
    assert content_tokens("Who painted the paintings?") == {"paint"}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Mona Lisa, painter", "Mona Lisa, painter"),
        ("John Gwynn, religion", None),
        ("The answer to the question is: John Gwynn", None),
    ],
)
def test_clean_query_requires_words_from_the_question(raw: str, expected: str | None) -> None:
    assert clean_query(raw, question="Who painted the Mona Lisa?") == expected


def test_rewrite_turns_give_examples_as_chat_turns() -> None:
    turns = rewrite_turns("Who painted the Mona Lisa?")
    assert turns[0][0] == "system" and len(turns) == 1 + 2 * 4 + 1
    assert turns[-1] == ("human", "question: Who painted the Mona Lisa?")


def _strip(text: str, source: str, chunk: int, score: float | None) -> KnowledgeStrip:
    return {"text": text, "source": source, "chunk": chunk, "origin": "internal", "score": score}


def _passage(text: str, source: str, chunk: int) -> RetrievedPassage:
    return {"text": text, "source": source, "chunk": chunk, "score": 0.5}


def test_best_passage_whole_replaces_the_best_strips_passage_and_keeps_the_rest() -> None:
    kept = [
        _strip("A1.", "a", 0, -0.5),
        _strip("B1.", "b", 0, 0.3),
        _strip("A2.", "a", 0, 0.1),
        _strip("A1.", "a", 1, 0.2),
    ]
    passages = [_passage("A1. A2. A3.", "a", 0), _passage("A1. Other.", "a", 1)]
    # the best strip (B1.) has no passage given: nothing changes
    assert best_passage_whole(kept, passages) == kept
    passages.append(_passage("B0. B1. B2.", "b", 0))
    assert best_passage_whole(kept, passages) == [
        kept[0],
        {"text": "B0. B1. B2.", "source": "b", "chunk": 0, "origin": "internal", "score": 0.3},
        kept[2],
        kept[3],
    ]
    # chunk 0 of "a" is the best now: its two strips become one passage, where the first was
    kept[2]["score"] = 0.9
    assert [s["text"] for s in best_passage_whole(kept, passages)] == ["A1. A2. A3.", "B1.", "A1."]


def test_best_passage_whole_leaves_unscored_or_empty_knowledge_alone() -> None:
    unscored = [_strip("A1.", "a", 0, None)]
    assert best_passage_whole(unscored, [_passage("A1. A2.", "a", 0)]) == unscored
    assert best_passage_whole([], []) == []


def test_select_top_margin_drops_strips_far_below_the_best() -> None:
    from crag.knowledge.selection import score_logit, select_top

    items = ["answer", "close", "distractor", "weak"]
    scores = [0.0, -0.4, -0.9, -0.95]  # logits 0, -0.85, -2.94, -3.66
    assert select_top(items, scores, 5, -0.99) == items
    assert select_top(items, scores, 5, -0.99, margin=2.0) == ["answer", "close"]
    assert select_top(items, scores, 1, -0.99, margin=2.0) == ["answer"]
    assert select_top(items, scores, 5, 0.5, margin=2.0) == []  # nothing above the threshold
    assert score_logit(1.0) < 30 and score_logit(0.0) == 0.0
