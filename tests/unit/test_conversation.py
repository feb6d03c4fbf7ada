"""The AI message a run appends: what a chat front-end that knows nothing of crag shows.

Agent Chat UI and assistant-ui show a message's text blocks as Markdown and nothing of its
``additional_kwargs``: the text names the cited sources by number and title, says when a web
search corrected the answer or crag abstained, and the follow-up's history reads the plain
answer only.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from crag.core.state import KnowledgeStrip
from crag.knowledge.conversation import (
    NOTE_LINES,
    answer_message,
    earlier_turns,
    markdown_literal,
    plain_answer,
    strip_message_text,
)

MONA = "Who painted the Mona Lisa?"
PAINTER = KnowledgeStrip(
    text="Mona Lisa\nThe Mona Lisa was painted by Leonardo da Vinci.",
    source="wikipedia:Mona Lisa",
    chunk=0,
    origin="internal",
    score=0.9,
)
REPORT = KnowledgeStrip(
    text="The turbine produces 4.2 megawatts.",
    source="/docs/report.pdf",
    chunk=2,
    origin="internal",
    location="p. 1",
    writer="served",
    score=0.8,
)
PAGE_URL = "https://en.wikipedia.org/wiki/Liquid_nitrogen"
NITROGEN = KnowledgeStrip(
    text="Liquid nitrogen\nLiquid nitrogen boils at 77 K.",
    source=PAGE_URL,
    chunk=None,
    origin="external",
    score=0.5,
)


def message(answer: str, knowledge: list[KnowledgeStrip], **kwargs: Any) -> AIMessage:
    kwargs.setdefault("action", "correct")
    return answer_message(answer, question=MONA, knowledge=knowledge, message_id="m1", **kwargs)


def test_the_text_names_the_cited_sources_by_number_and_title() -> None:
    ai = message("Leonardo painted it.", [PAINTER, REPORT], citations=[2, 1])
    assert ai.text == (
        "Leonardo painted it. [2] [1]\n\n**Sources**\n\n"
        "- [1] Mona Lisa — wikipedia:Mona Lisa#0\n"
        "- [2] /docs/report.pdf, p. 1 (added by a served run)"
    )
    assert ai.additional_kwargs["answer"] == "Leonardo painted it."
    assert [c["number"] for c in ai.additional_kwargs["citations"]] == [2, 1]


def test_an_uncited_entry_is_not_listed_and_no_citation_adds_nothing() -> None:
    assert message("Leonardo.", [PAINTER, REPORT], citations=[1]).text.count("- [") == 1
    assert message("Nobody knows.", [PAINTER], citations=[]).text == "Nobody knows."


def test_the_citations_are_standard_annotations_on_the_markers() -> None:
    ai = message("It boils at 77 K.", [NITROGEN], citations=[1], action="incorrect")
    assert isinstance(ai.content, list) and len(ai.content) == 1
    block = ai.content[0]
    assert isinstance(block, dict) and block["type"] == "text" and block["text"] == ai.text
    (citation,) = block["annotations"]
    assert ai.text[citation["start_index"] : citation["end_index"]] == "[1]"
    assert citation["type"] == "citation" and citation["url"] == PAGE_URL
    assert citation["title"] == "Liquid nitrogen"
    assert citation["cited_text"] == "Liquid nitrogen Liquid nitrogen boils at 77 K."
    assert citation["extras"]["number"] == 1
    # LangChain's standard blocks keep them (what a front-end reading content_blocks gets).
    assert ai.content_blocks[0].get("annotations") == block["annotations"]


def test_a_web_corrected_answer_says_so_and_links_the_page() -> None:
    ai = message("It boils at 77 K.", [NITROGEN], citations=[1], action="incorrect")
    assert ai.text == (
        f"It boils at 77 K. [1]\n\n*{NOTE_LINES['incorrect']}*\n\n**Sources**\n\n"
        f"- [1] Liquid nitrogen — <{PAGE_URL}>"
    )
    both = message("77 K.", [PAINTER, NITROGEN], citations=[2], action="ambiguous")
    assert f"*{NOTE_LINES['ambiguous']}*" in both.text


def test_no_correction_line_without_cited_web_knowledge() -> None:
    internal = message("Leonardo.", [PAINTER, NITROGEN], citations=[1], action="ambiguous")
    refusal = message("No.", [NITROGEN], citations=[], action="incorrect")
    for ai in (internal, refusal, message("Leonardo.", [PAINTER], citations=[1])):
        assert not any(note in ai.text for note in NOTE_LINES.values())


def test_an_abstention_says_crag_abstained() -> None:
    ai = message("I could not find the answer.", [], action="incorrect", abstained=True)
    assert ai.text == f"I could not find the answer.\n\n*{NOTE_LINES['abstained']}*"
    assert ai.additional_kwargs["abstained"] is True


def test_a_title_from_a_document_stays_text_in_markdown() -> None:
    hostile = KnowledgeStrip(
        text="[click](javascript:alert(1)) <img src=x> *bold*\nbody text here.",
        source="http://127.0.0.1/page with space",
        chunk=None,
        origin="external",
        score=None,
    )
    line = message("Yes.", [hostile], citations=[1]).text.splitlines()[-1]
    assert line == (
        r"- [1] \[click\](javascript:alert(1)) \<img src=x\> \*bold\* — "
        "http://127.0.0.1/page with space"
    )
    assert markdown_literal("a\nb  c") == "a b c"


def test_the_history_reads_the_plain_answer() -> None:
    ai = message("Leonardo da Vinci.", [PAINTER], citations=[1])
    turns = earlier_turns([HumanMessage(MONA), ai])
    assert [(t.question, t.answer) for t in turns] == [(MONA, "Leonardo da Vinci.")]


def test_a_history_without_the_recorded_answer_is_stripped_of_the_block() -> None:
    """A client that kept only the text (``{"role": "assistant", "content": ...}``)."""
    for ai in (
        message("Leonardo da Vinci.", [PAINTER, REPORT], citations=[1, 2]),
        message("It boils at 77 K.", [NITROGEN], citations=[1], action="incorrect"),
        message("I could not.", [], abstained=True),
    ):
        kept = AIMessage(ai.text)
        assert plain_answer(kept) == ai.additional_kwargs["answer"]
    assert strip_message_text("Plain text [1] with a marker [2]") == (
        "Plain text [1] with a marker [2]"
    )
    turns = earlier_turns(
        [HumanMessage(MONA), AIMessage(message("Leo.", [PAINTER], citations=[1]).text)]
    )
    assert turns[0].answer == "Leo."
