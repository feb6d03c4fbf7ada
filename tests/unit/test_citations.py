"""Citations: numbered knowledge in the prompt, checked or attributed numbers in the output."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_core.messages import BaseMessage

from crag.app.cli.commands import main
from crag.graph.builder import CragGraph, build_graph
from crag.prompts.generate import NO_ANSWER
from crag.settings.method import MethodConfig
from crag.websearch.base import SearchResult
from tests.fakes import FakeComponents, ScriptedChatModel, StaticSearch, StaticStore, scripted_chat

QUESTION = "Who painted the Mona Lisa?"
LEONARDO = (
    "The Mona Lisa is a half-length portrait painting by the Italian artist Leonardo da Vinci."
)
LOUVRE = "The painting is held at the Louvre in Paris."
BOTH_KEPT = MethodConfig(strip_margin=0)
"""Both strips reach the prompt: the fake scores (0.9 and 0.2) are not calibrated, and the
default strip margin would drop the Louvre strip as far below the best one."""


@pytest.fixture
def kept_graph(fake_components: FakeComponents) -> CragGraph:
    """The CRAG graph built with the fakes and :data:`BOTH_KEPT`."""
    return build_graph(fake_components, method=BOTH_KEPT)


def two_passages(components: FakeComponents) -> None:
    """The Leonardo and Louvre sentences as two stored passages (chunks 0 and 1): two entries.

    (Strips of one passage are one entry: :mod:`crag.knowledge.passages`.)
    """
    components.store = StaticStore(
        [
            Document(page_content=text, metadata={"source": "wikipedia:Mona Lisa", "chunk": n})
            for n, text in enumerate((LEONARDO, LOUVRE))
        ]
    )


def answering(answer: str) -> ScriptedChatModel:
    """A chat model that answers every prompt with ``answer``."""
    return ScriptedChatModel(respond=lambda _: answer, prompts=[])


def test_by_default_the_prompt_does_not_number_the_knowledge(
    kept_graph: CragGraph,
    fake_components: FakeComponents,
) -> None:
    two_passages(fake_components)
    fake_components.chat = answering("It is held at the Louvre.")
    out = kept_graph.invoke({"question": QUESTION})
    prompt: list[BaseMessage] = fake_components.chat.prompts[-1]
    assert f"<knowledge>\n{LEONARDO}\n{LOUVRE}\n</knowledge>" in prompt[-1].text
    assert out["citations"] == [2]  # attributed by overlap: "Louvre"


def test_numbered_knowledge_lets_the_models_citation_stand(
    fake_components: FakeComponents,
) -> None:
    two_passages(fake_components)
    fake_components.chat = answering("It is held at the Louvre [2].")
    method = MethodConfig(number_knowledge=True, strip_margin=0)
    out = build_graph(fake_components, method=method).invoke({"question": QUESTION})
    assert [k["text"] for k in out["knowledge"]] == [LEONARDO, LOUVRE]
    prompt: list[BaseMessage] = fake_components.chat.prompts[-1]
    assert f"<knowledge>\n[1] {LEONARDO}\n[2] {LOUVRE}\n</knowledge>" in prompt[-1].text
    assert out["answer"] == "It is held at the Louvre."
    assert out["citations"] == [2]
    ai = out["messages"][-1]
    assert ai.additional_kwargs["answer"] == out["answer"]
    # What a chat front-end shows: the answer, its marker, the cited source by its number.
    assert ai.text == (
        "It is held at the Louvre. [2]\n\n**Sources**\n\n- [2] wikipedia:Mona Lisa#1"
    )
    assert ai.additional_kwargs["citations"] == [
        {"number": 2, "title": "wikipedia:Mona Lisa", "source": "wikipedia:Mona Lisa", "chunk": 1}
    ]


@pytest.mark.parametrize(
    ("answer", "citations"),
    [
        ("Leonardo da Vinci [5].", [1]),  # out of range: dropped, then attributed by overlap
        ("Leonardo da Vinci.", [1]),  # no marker: attributed by overlap
        ("In Paris.", [2]),
        ("Nobody knows.", []),  # no word in common: nothing cited
        (NO_ANSWER, []),  # a refusal cites nothing
    ],
)
def test_numbers_are_checked_and_missing_ones_attributed(
    kept_graph: CragGraph, fake_components: FakeComponents, answer: str, citations: list[int]
) -> None:
    two_passages(fake_components)
    fake_components.chat = answering(answer)
    out = kept_graph.invoke({"question": QUESTION})
    assert out["citations"] == citations
    assert "[5]" not in out["answer"]
    assert [c["number"] for c in out["messages"][-1].additional_kwargs["citations"]] == citations


@pytest.mark.usefixtures("fake_app")
def test_crag_ask_prints_the_numbered_sources_under_the_answer(
    fake_components: FakeComponents, capsys: pytest.CaptureFixture[str]
) -> None:
    # A titled passage (its heading line) and, by the Ambiguous branch, a web result.
    titled = f"Mona Lisa\n{LEONARDO} {LOUVRE} It is the best known painting."
    fake_components.store = StaticStore(
        [Document(page_content=titled, metadata={"source": "docs/mona.md", "chunk": 3})]
    )
    # below the upper threshold (-0.4): Ambiguous
    fake_components.scorer.keyword_scores = {"Leonardo": -0.6, "Louvre": -0.62, "Salai": -0.65}
    fake_components.web = StaticSearch(
        [SearchResult("Salai - Wikipedia", "https://en.wikipedia.org/wiki/Salai", "Salai sat.")]
    )
    fake_components.chat = scripted_chat(answer="Leonardo da Vinci.")
    assert main(["ask", "-q", "--set", "fetch_pages=false", QUESTION]) == 0
    out = capsys.readouterr().out
    # the two strips kept of the one passage are one source (not [1] and [2], both #3)
    assert out == (
        "Leonardo da Vinci. [1]\n"
        "Sources:\n"
        "  [1] Mona Lisa — docs/mona.md#3\n"
        "  [2] Salai — https://en.wikipedia.org/wiki/Salai\n"  # the page title, cleaned
    )


@pytest.mark.usefixtures("fake_app")
def test_crag_ask_json_has_the_citations(
    fake_components: FakeComponents, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    assert main(["ask", "--json", QUESTION]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["citations"] == [1] and out["abstained"] is False
    assert "[1]" not in out["answer"]
