"""The final AI message of a real graph shows what crag knows, for front-ends that read only it.

The app's CRAG graph with its real components (MiniLM, Chroma on disk, SmolLM2, a SearxNG
stand-in on 127.0.0.1). Agent Chat UI and assistant-ui show an AI message's text blocks as
Markdown and nothing of ``additional_kwargs``: the text must name the cited sources by number
and title, say when a web search corrected the answer and when crag abstained; a follow-up's
standalone question must be made from the plain answer, never the sources block.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver

from crag.app.graphs import components
from crag.graph.builder import CragGraph, build_graph
from crag.knowledge.conversation import NOTE_LINES, SOURCES_HEADING
from crag.prompts.contextualize import CONTEXTUALIZE_INSTRUCTION
from crag.prompts.generate import ABSTENTION
from crag.settings.context import Context
from crag.settings.deployment import deployment_with
from crag.settings.method import MethodConfig
from tests.integration_support import build_small_store
from tests.websearch_server import WebsearchServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

MONA = "Who painted the Mona Lisa?"
NITROGEN = "What is the boiling point of liquid nitrogen in kelvin?"
UNKNOWN = "What is the melting point of tungsten in kelvin?"
"""A question nothing answers (not the nitrogen one: the app's components keep search results)."""
NITROGEN_PAGE = "Liquid nitrogen boils at 77 kelvin (minus 196 degrees Celsius) at sea level."
WEB_ONLY = MethodConfig(upper_threshold=0.99, lower_threshold=0.98)
"""Thresholds no stored passage reaches: every run is Incorrect and goes to the web."""


class Prompts(BaseCallbackHandler):
    """Every chat-model prompt of a run, as the model was given it."""

    def __init__(self) -> None:
        self.seen: list[list[BaseMessage]] = []

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        self.seen.extend(messages)

    def contextualize(self) -> list[BaseMessage]:
        (prompt,) = [p for p in self.seen if p[0].text == CONTEXTUALIZE_INSTRUCTION]
        return prompt


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_small_store(tmp_path_factory.mktemp("store") / "chroma")


@pytest.fixture(scope="module")
def web() -> Iterator[WebsearchServer]:
    with WebsearchServer() as server:
        yield server


def graph(store: Path, web: WebsearchServer, method: MethodConfig | None = None) -> CragGraph:
    """The app's CRAG graph (its real components) over ``store``, searching ``web``, threaded."""
    return build_graph(
        components,
        InMemorySaver(),
        method=method,
        deployment=deployment_with(
            store_path=str(store),
            default_corpus=False,
            search_provider="searxng",
            search_url=web.url,
            allowed_hosts="127.0.0.1",
        ),
    )


def say(crag: CragGraph, thread: str, text: str, prompts: Prompts | None = None) -> Any:
    config: Any = {"configurable": {"thread_id": thread}, "callbacks": [prompts or Prompts()]}
    said: Any = {"messages": [{"role": "user", "content": text}]}
    return crag.invoke(said, config, context=Context())


def shown(message: BaseMessage) -> str:
    """The text Agent Chat UI shows of a message (``getContentString`` in
    src/components/thread/utils.ts): a string content, or its text blocks joined."""
    if isinstance(message.content, str):
        return message.content
    return " ".join(
        b["text"] for b in message.content if isinstance(b, dict) and b["type"] == "text"
    )


def source_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("- [")]


def test_the_answer_names_its_sources_and_a_follow_up_reads_only_the_answer(
    store_path: Path, web: WebsearchServer
) -> None:
    web.reset()
    web.search_status = 500
    crag = graph(store_path, web)
    out = say(crag, "art", MONA)
    assert out["action"] == "correct" and out["citations"]
    ai = out["messages"][-1]
    text = shown(ai)
    assert text.startswith(out["answer"]) and ai.additional_kwargs["answer"] == out["answer"]
    assert f"\n\n{SOURCES_HEADING}\n\n" in text
    # One line per cited entry, by number, each the entry's number then its title.
    numbers = [line.partition("] ")[0] + "]" for line in source_lines(text)]
    assert numbers == [f"- [{n}]" for n in sorted(out["citations"])]
    mona = [
        n for n in out["citations"] if out["knowledge"][n - 1]["source"] == "wikipedia:Mona Lisa"
    ]
    chunk = out["knowledge"][mona[0] - 1]["chunk"]
    assert f"- [{mona[0]}] Mona Lisa — wikipedia:Mona Lisa#{chunk}" in source_lines(text)
    assert not any(note in text for note in NOTE_LINES.values())

    prompts = Prompts()
    follow = say(crag, "art", "Where is it displayed?", prompts)
    history = "\n".join(m.text for m in prompts.contextualize())
    assert out["answer"] in history  # the earlier answer, as the model wrote it
    assert SOURCES_HEADING not in history and "wikipedia:Mona Lisa#" not in history
    assert "Sources" not in follow["standalone_question"]
    assert "#" not in follow["standalone_question"]


def test_a_web_corrected_answer_says_so_and_names_the_page(
    store_path: Path, web: WebsearchServer
) -> None:
    web.reset()
    page = web.add_page("/wiki/Liquid_nitrogen", "Liquid nitrogen", NITROGEN_PAGE)
    web.results = [web.result("Liquid nitrogen", page, "Liquid nitrogen boils at 77 K.")]
    out = say(graph(store_path, web, WEB_ONLY), "nitrogen", NITROGEN)
    assert out["action"] == "incorrect" and out["citations"]
    text = shown(out["messages"][-1])
    assert text.startswith(out["answer"])
    assert f"\n\n*{NOTE_LINES['incorrect']}*\n\n{SOURCES_HEADING}\n\n" in text
    cited = [out["knowledge"][n - 1] for n in sorted(out["citations"])]
    assert all(k["origin"] == "external" for k in cited)
    assert f"- [1] Liquid nitrogen — <{page}>" in source_lines(text)


def test_an_abstention_says_crag_abstained(store_path: Path, web: WebsearchServer) -> None:
    web.reset()
    web.search_status = 500
    out = say(graph(store_path, web, WEB_ONLY), "none", UNKNOWN)
    assert out["abstained"] is True and out["answer"] == ABSTENTION
    ai = out["messages"][-1]
    assert shown(ai) == f"{ABSTENTION}\n\n*{NOTE_LINES['abstained']}*"
