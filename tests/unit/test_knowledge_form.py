"""The knowledge form: SmolLM2 reads the paper's strips, any other reader whole passages.

In the ``passages`` form a reader gets what standard RAG would give it (every retrieved
passage, whole) where the store has the answer, and the web's best paragraphs in place of the
store's weakest passages where it may not, never more words than the retrieved passages hold.
"""

from __future__ import annotations

from typing import Any

import pytest

from crag.core.state import KnowledgeStrip
from crag.graph.builder import build_graph
from crag.knowledge.combination import best_within_words
from crag.settings.context import Context, InvalidSettingError
from crag.settings.deployment import deployment_with
from crag.settings.method import MethodConfig
from crag.settings.run_settings import RunSettings
from crag.websearch.base import SearchResult
from tests.fakes import (
    MONA_LISA,
    PHOTOSYNTHESIS,
    FakeComponents,
    FixedScoreEvaluator,
    StaticSearch,
    dict_context,
)

QUESTION = "Who painted the Mona Lisa?"


def entry(text: str, score: float | None) -> KnowledgeStrip:
    return {"text": text, "source": text, "chunk": None, "origin": "external", "score": score}


def texts(strips: list[KnowledgeStrip]) -> list[str]:
    return [s["text"] for s in strips]


def test_the_best_entries_that_fit_the_words_are_kept_in_their_order() -> None:
    strips = [
        entry("one two three", 0.1),  # 3 words
        entry("a b c d e f", 0.9),  # 6 words, the best
        entry("x y", -0.5),  # 2 words
        entry("p q r s", 0.2),  # 4 words: does not fit after the best two
    ]
    # best first: 6 (0.9), then 4 (0.2) would make 10 > 9: skipped, 3 (0.1) fits, 2 does not
    assert texts(best_within_words(strips, 9)) == ["one two three", "a b c d e f"]
    assert texts(best_within_words(strips, 15)) == texts(strips)
    # the best is kept even when it alone is over the budget; nothing else then fits
    assert texts(best_within_words(strips, 4)) == ["a b c d e f"]
    # unscored entries rank first
    assert texts(best_within_words([entry("u v", None), entry("w", 0.99)], 2)) == ["u v"]


@pytest.mark.parametrize(
    ("generator", "knowledge_form", "expected"),
    [
        ("smollm2", None, "strips"),
        ("", None, "strips"),
        ("endpoint", None, "passages"),
        ("gguf:/models/qwen.gguf", None, "passages"),
        ("openai:gpt-4o-mini", None, "passages"),
        ("endpoint", "strips", "strips"),
        ("smollm2", "passages", "passages"),
    ],
)
def test_an_unset_form_follows_the_reader(
    generator: str, knowledge_form: str | None, expected: str
) -> None:
    method = MethodConfig(knowledge_form=knowledge_form)  # type: ignore[arg-type]
    settings = RunSettings.combine(Context(), method, deployment_with(generator=generator))
    assert settings.reader_knowledge_form() == expected


def test_a_form_that_does_not_exist_is_refused_by_name() -> None:
    with pytest.raises(InvalidSettingError, match="knowledge_form"):
        MethodConfig(knowledge_form="sentences")  # type: ignore[arg-type]


def knowledge_texts(out: dict[str, Any]) -> list[str]:
    return [k["text"] for k in out["knowledge"]]


def test_a_correct_run_gives_another_reader_every_retrieved_passage_whole(
    fake_components: FakeComponents,
) -> None:
    # Correct (the Mona Lisa passage scores 0.9): the reader reads what RAG would give it,
    # the passage that does not answer included; the web is not searched
    graph = build_graph(fake_components, deployment=deployment_with(generator="endpoint"))
    out = graph.invoke({"question": QUESTION}, context=dict_context(top_k=2))
    assert out["action"] == "correct"
    assert knowledge_texts(out) == [MONA_LISA, PHOTOSYNTHESIS]
    assert [k["score"] for k in out["knowledge"]] == [0.9, -1.0]
    assert fake_components.web.queries == []
    prompt = fake_components.chat.prompts[-1][-1].text
    assert MONA_LISA in prompt and PHOTOSYNTHESIS in prompt
    # SmolLM2 on the same question reads the best strips of the passage that answers
    smollm2 = build_graph(fake_components).invoke(
        {"question": QUESTION}, context=dict_context(top_k=2)
    )
    assert all(k["text"] in MONA_LISA for k in smollm2["knowledge"])
    assert len(" ".join(knowledge_texts(smollm2))) < len(MONA_LISA)


def test_an_ambiguous_run_swaps_the_weakest_passage_for_the_best_web_paragraph(
    fake_components: FakeComponents,
) -> None:
    answer = "Leonardo da Vinci painted it between 1503 and 1519."
    long_weak = " ".join(["Unrelated words about painting in general."] * 5)
    fake_components.web = StaticSearch(
        [
            SearchResult("Painting", "https://example.org/painting", long_weak),
            SearchResult("Mona Lisa", "https://en.wikipedia.org/wiki/Mona_Lisa", answer),
        ]
    )
    fake_components.scorer = FixedScoreEvaluator(
        {"between 1503": 0.8, "half-length": -0.5, "in general": -0.9}, default=-0.95
    )
    graph = build_graph(
        fake_components,
        method=MethodConfig(fetch_pages=False),
        deployment=deployment_with(generator="endpoint"),
    )
    updates = list(
        graph.stream({"question": QUESTION}, context=dict_context(top_k=2), stream_mode="updates")
    )
    out = graph.invoke({"question": QUESTION}, context=dict_context(top_k=2))
    assert out["action"] == "ambiguous"
    budget = len(MONA_LISA.split()) + len(PHOTOSYNTHESIS.split())
    kept = knowledge_texts(out)
    # the store's passage that may answer, then the web's best paragraph; the store's weakest
    # passage and the long weak paragraph did not fit in the retrieved passages' words
    assert kept[0] == MONA_LISA and answer in kept[1] and len(kept) == 2
    assert sum(len(text.split()) for text in kept) <= budget
    assert all(long_weak not in text and text != PHOTOSYNTHESIS for text in kept)
    # both web results were kept by the web branch (no margin, up to top_k): the budget chose
    web = next(u["web_search"] for u in updates if "web_search" in u)
    assert sorted(k["score"] for k in web["external_knowledge"]) == [-0.9, 0.8]
