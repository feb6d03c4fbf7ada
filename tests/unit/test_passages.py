"""One knowledge entry per stored passage: its kept strips joined, numbered once."""

from __future__ import annotations

from langchain_core.messages import BaseMessage

from crag.core.state import KnowledgeStrip
from crag.graph.builder import build_graph
from crag.knowledge.passages import one_per_passage
from crag.settings.method import MethodConfig
from tests.fakes import FakeComponents, ScriptedChatModel

LEONARDO = (
    "The Mona Lisa is a half-length portrait painting by the Italian artist Leonardo da Vinci."
)
LOUVRE = "The painting is held at the Louvre in Paris."


def strip(
    text: str, source: str, chunk: int | None, score: float | None = 0.5, **extra: str
) -> KnowledgeStrip:
    made: KnowledgeStrip = {
        "text": text,
        "source": source,
        "chunk": chunk,
        "origin": "internal" if chunk is not None else "external",
        "score": score,
    }
    made.update(extra)  # type: ignore[typeddict-item]
    return made


def test_strips_of_one_passage_become_one_entry_where_the_first_was() -> None:
    strips = [
        strip("Mona Lisa\nIt was painted by Leonardo.", "wikipedia:Mona Lisa", 0, 0.2),
        strip("Louvre\nThe Louvre is in Paris.", "wikipedia:Louvre", 0, 0.4),
        strip("Mona Lisa\nIt hangs in the Louvre.", "wikipedia:Mona Lisa", 0, 0.7),
        strip("Mona Lisa\nA later chunk.", "wikipedia:Mona Lisa", 1, 0.1),
        strip("A paragraph of a page.", "https://example.org/a", None),
        strip("Another paragraph of it.", "https://example.org/a", None),
    ]
    joined = one_per_passage(strips)
    assert [(s["source"], s["chunk"]) for s in joined] == [
        ("wikipedia:Mona Lisa", 0),
        ("wikipedia:Louvre", 0),
        ("wikipedia:Mona Lisa", 1),
        ("https://example.org/a", None),  # web paragraphs are passages of their own
        ("https://example.org/a", None),
    ]
    assert joined[0]["text"] == "Mona Lisa\nIt was painted by Leonardo. It hangs in the Louvre."
    assert joined[0]["score"] == 0.7  # its best strip's
    unscored = one_per_passage([strip("a", "s", 0, None), strip("b", "s", 0, 0.3)])
    assert unscored[0]["score"] is None and unscored[0]["text"] == "a b"


def test_the_passage_keeps_its_location_and_writer() -> None:
    strips = [
        strip("One.", "notes", 2, location="p. 3", writer="served"),
        strip("Two.", "notes", 2, location="p. 3", writer="served"),
    ]
    assert one_per_passage(strips) == [
        strip("One. Two.", "notes", 2, location="p. 3", writer="served")
    ]


def test_one_number_per_passage_in_the_prompt_and_the_citations(
    fake_components: FakeComponents,
) -> None:
    """The fake store's Mona Lisa passage: two strips kept, one entry, cited as [1] once."""
    fake_components.chat = ScriptedChatModel(respond=lambda _: "Leonardo [1], in Paris [1].")
    graph = build_graph(fake_components, method=MethodConfig(number_knowledge=True, strip_margin=0))
    out = graph.invoke({"question": "Who painted the Mona Lisa?"})
    prompt: list[BaseMessage] = fake_components.chat.prompts[-1]
    assert f"<knowledge>\n[1] {LEONARDO} {LOUVRE}\n</knowledge>" in prompt[-1].text
    assert out["citations"] == [1]
    assert [c["number"] for c in out["messages"][-1].additional_kwargs["citations"]] == [1]


def test_a_served_runs_passage_is_cited_as_such() -> None:
    from crag.knowledge.conversation import citation_entries, source_writer

    served = strip("Notes\nThe Louvre is in Paris.", "notes", 0, writer="served")
    operators = strip("Louvre\nThe Louvre is in Paris.", "louvre.md", 0)
    assert citation_entries([operators, served], [1, 2]) == [
        {"number": 1, "title": "Louvre", "source": "louvre.md", "chunk": 0},
        {"number": 2, "title": "Notes", "source": "notes", "chunk": 0, "writer": "served"},
    ]
    assert (source_writer(operators), source_writer(served)) == ("", " (added by a served run)")
