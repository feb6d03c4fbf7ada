"""Fakes for unit and graph tests: fixed-score evaluator, scripted chat model, static store."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pytest import MonkeyPatch

from crag.settings.context import Context
from crag.websearch.base import SearchResult, SearchUnavailableError


def dict_context(**settings: Any) -> Context:
    """Per-run settings as a plain mapping, the way the LangGraph server passes a context.

    The graphs turn a mapping into their context class when a run starts; LangGraph's types
    know only the class, so the mapping is cast to it.
    """
    return cast(Context, settings)


class FixedScoreEvaluator:
    """Scores a passage by the first keyword it contains; ``default`` otherwise."""

    name = "fixed"

    def __init__(self, keyword_scores: dict[str, float], default: float = -1.0) -> None:
        self.keyword_scores = keyword_scores
        self.default = default
        self.calls: list[tuple[str, list[str]]] = []

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        self.calls.append((question, list(passages)))
        scores = []
        for passage in passages:
            hit = [s for k, s in self.keyword_scores.items() if k.lower() in passage.lower()]
            scores.append(hit[0] if hit else self.default)
        return scores


class ScriptedChatModel(BaseChatModel):
    """Answers with ``respond(messages)``; records every prompt it was given."""

    respond: Callable[[list[BaseMessage]], str]
    prompts: list[list[BaseMessage]] = []  # noqa: RUF012 (pydantic copies field defaults)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.prompts.append(messages)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(self.respond(messages)))])


def scripted_chat(
    keywords: str = "Mona Lisa, painter", answer: str = "Leonardo da Vinci."
) -> ScriptedChatModel:
    """A chat model that answers rewrite prompts with ``keywords`` and others with ``answer``."""

    def respond(messages: list[BaseMessage]) -> str:
        text = messages[-1].text
        return keywords if text.startswith("question:") else answer

    return ScriptedChatModel(respond=respond, prompts=[])


class StaticStore:
    """A vector store stand-in that returns its documents in order."""

    def __init__(self, documents: list[Document]) -> None:
        self.documents = documents
        self.queries: list[tuple[str, int]] = []

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        self.queries.append((query, k))
        return self.documents[:k]


class StaticSearch:
    """A search provider with fixed results, or one that is down."""

    name = "static"

    def __init__(self, results: list[SearchResult] | None = None, error: str | None = None) -> None:
        self.results = results or []
        self.error = error
        self.queries: list[str] = []

    def search(self, query: str, max_results: int) -> list[SearchResult]:
        self.queries.append(query)
        if self.error:
            raise SearchUnavailableError(self.error)
        return self.results[:max_results]


@dataclass
class FakeComponents:
    """Components made of fakes (see :class:`crag.nodes.components.Components`)."""

    store: Any
    scorer: Any
    chat: Any
    web: Any = field(default_factory=lambda: StaticSearch(error="search is off in this test"))

    def vectorstore(self, context: Any) -> Any:
        return self.store

    def evaluator(self, context: Any) -> Any:
        return self.scorer

    def chat_model(self, context: Any) -> Any:
        return self.chat

    def search(self, context: Any) -> Any:
        return self.web


def use_app_components(monkeypatch: MonkeyPatch, components: Any) -> None:
    """Replace the app's components and graphs with ones built with ``components``.

    What :mod:`crag.app.graphs` holds (the graphs the CLI and the Python API run, and the
    components the threaded graphs and ``crag serve``'s warm-up use), undone by
    ``monkeypatch`` at the end of the test.
    """
    from crag.app import graphs
    from crag.graph.baselines import build_rag_graph, build_tutorial_graph
    from crag.graph.builder import build_graph

    monkeypatch.setattr(graphs, "components", components)
    monkeypatch.setattr(graphs, "graph", build_graph(components=components))
    monkeypatch.setattr(graphs, "rag_graph", build_rag_graph(components))
    monkeypatch.setattr(graphs, "tutorial_graph", build_tutorial_graph(components))


@contextmanager
def app_components(components: Any) -> Iterator[Any]:
    """:func:`use_app_components` for the block; yields ``components``."""
    with MonkeyPatch.context() as monkeypatch:
        use_app_components(monkeypatch, components)
        yield components


MONA_LISA = (
    "The Mona Lisa is a half-length portrait painting by the Italian artist Leonardo da Vinci. "
    "Considered an archetypal masterpiece of the Italian Renaissance, it has been described as "
    "the best known work of art in the world. The painting is held at the Louvre in Paris."
)
PHOTOSYNTHESIS = (
    "Photosynthesis is a process used by plants to convert light energy into chemical energy. "
    "It takes place mostly in the leaves. Oxygen is released as a by-product."
)


def corpus_documents() -> list[Document]:
    """Two passages: one that answers the Mona Lisa question, one that does not."""
    return [
        Document(page_content=MONA_LISA, metadata={"source": "wikipedia:Mona Lisa", "chunk": 0}),
        Document(
            page_content=PHOTOSYNTHESIS, metadata={"source": "wikipedia:Photosynthesis", "chunk": 0}
        ),
    ]


class InterruptingEmbeddings(Embeddings):
    """Delegates to ``inner``; the ``interrupt_on``-th batch raises Ctrl-C."""

    def __init__(self, inner: Embeddings, interrupt_on: int) -> None:
        self.inner = inner
        self.interrupt_on = interrupt_on
        self.calls = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        if self.calls == self.interrupt_on:
            raise KeyboardInterrupt
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


class CountingEmbeddings(Embeddings):
    """Delegates to the real embedder and counts the texts it embeds."""

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner
        self.documents = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents += len(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


class _MonaLisaScorer(FixedScoreEvaluator):
    """Scores as :class:`FixedScoreEvaluator` for Mona Lisa questions, -1 for any other."""

    def score(self, question: str, passages: Any) -> list[float]:
        scores = super().score(question, passages)
        return scores if "Mona" in question else [-1.0] * len(scores)


def mona_lisa_app_components(monkeypatch: MonkeyPatch) -> FakeComponents:
    """The app's components, faked: Mona Lisa questions are Correct; any other is Incorrect
    and web search is down. The CLI's and the Python API's graphs use them too."""
    fakes = FakeComponents(
        store=StaticStore(corpus_documents()),
        scorer=_MonaLisaScorer({"Leonardo": 0.9}),
        chat=scripted_chat(),
        web=StaticSearch(error="search is off in this test"),
    )
    use_app_components(monkeypatch, fakes)
    return fakes
