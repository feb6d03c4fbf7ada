"""Run-time settings: one context schema with the paper's defaults.

LangGraph shows these fields (with their descriptions) in Studio and builds them from their
defaults on the server. In plain Python pass ``context=Context(...)`` to ``invoke``; nodes fall
back to ``Context()`` when no context is given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, Literal

DEFAULT_STORE_PATH = ".crag/chroma"
DEFAULT_COLLECTION = "crag"


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


@dataclass(kw_only=True)
class Context:
    """Every setting of a CRAG run."""

    # Retrieval
    top_k: int = field(
        default=10,
        metadata={"description": "Passages retrieved from the store per question (paper: 10)."},
    )
    # Action trigger
    upper_threshold: float = field(
        default=0.59,
        metadata={"description": "Correct if any passage scores above this (paper, PopQA: 0.59)."},
    )
    lower_threshold: float = field(
        default=-0.99,
        metadata={
            "description": "Incorrect if every passage scores below this (paper, PopQA: -0.99)."
        },
    )
    # Knowledge refinement
    strip_mode: Literal["sentences", "words", "passage"] = field(
        default="sentences",
        metadata={
            "description": "How passages are decomposed into strips: groups of sentences, "
            "fixed-size word windows, or whole passages (no decomposition)."
        },
    )
    strip_size: int = field(
        default=1,
        metadata={
            "description": "Sentences per strip ('sentences' mode) or words per strip "
            "('words' mode). A passage of at most two sentences stays one strip."
        },
    )
    strips_kept: int = field(
        default=5,
        metadata={"description": "Strips kept after filtering, best first (paper: top 5)."},
    )
    strip_threshold: float = field(
        default=-0.5,
        metadata={"description": "Strips scoring at or below this are dropped (paper: -0.5)."},
    )
    # External knowledge
    search_provider: Literal["duckduckgo", "searxng", "tavily"] = field(
        default="duckduckgo",
        metadata={
            "description": "Web search provider: 'duckduckgo' (ddgs), 'searxng' (a self-hosted "
            "SearxNG JSON API at search_url) or 'tavily' (hosted API; needs the optional "
            "tavily-python package and TAVILY_API_KEY in the environment)."
        },
    )
    search_url: str = field(
        default_factory=lambda: _env("CRAG_SEARCH_URL", "http://127.0.0.1:8888"),
        metadata={"description": "Base URL of the SearxNG instance (searxng provider only)."},
    )
    web_results: int = field(
        default=5,
        metadata={"description": "Web results used per search (paper: top 5)."},
    )
    prefer_wikipedia: bool = field(
        default=True,
        metadata={
            "description": "Bias the web query towards Wikipedia and rank Wikipedia pages first "
            "(as the paper does)."
        },
    )
    search_timeout: float = field(
        default=10.0,
        metadata={"description": "Seconds before a web search is abandoned."},
    )
    search_region: str = field(
        default="us-en",
        metadata={
            "description": "DuckDuckGo (ddgs) region, 'country-language' (e.g. 'us-en', "
            "'uk-en', 'de-de'); also picks the Wikipedia language (duckduckgo only)."
        },
    )
    search_safesearch: Literal["on", "moderate", "off"] = field(
        default="moderate",
        metadata={"description": "DuckDuckGo safe search: 'on', 'moderate' or 'off'."},
    )
    search_backend: str = field(
        default="auto",
        metadata={
            "description": "ddgs backend(s): 'auto' (several engines), 'duckduckgo', "
            "'wikipedia', or a comma-separated list such as 'wikipedia,bing' (duckduckgo only)."
        },
    )
    only_wikipedia: bool = field(
        default=False,
        metadata={"description": "Keep Wikipedia results only (drop every other web page)."},
    )
    fetch_pages: bool = field(
        default=True,
        metadata={
            "description": "Read the pages of the top results and select their paragraphs "
            "(as the paper does); off: use the search snippets only."
        },
    )
    pages_to_read: int = field(
        default=5,
        metadata={
            "description": "Pages read per search, best results first (paper: top 5); the "
            "other results give their search snippets."
        },
    )
    page_timeout: float = field(
        default=5.0,
        metadata={
            "description": "Seconds to read one page, redirects included; pages are read "
            "concurrently (up to 8 at once), so this also bounds the whole reading step."
        },
    )
    max_page_bytes: int = field(
        default=2_000_000,
        metadata={
            "description": "Largest page read, in bytes; a larger page falls back to its "
            "search snippet."
        },
    )
    max_redirects: int = field(
        default=5,
        metadata={"description": "Most redirects followed when reading a page."},
    )
    allowed_hosts: str = field(
        default_factory=lambda: _env("CRAG_ALLOWED_HOSTS", ""),
        metadata={
            "description": "Comma-separated host names, IP addresses and CIDR networks that "
            "pages may be read from although they are not public (e.g. '127.0.0.1, "
            "intranet.example, 10.1.0.0/16'). Empty: public addresses only."
        },
    )
    web_cache_ttl: float = field(
        default=3600.0,
        metadata={
            "description": "Seconds a web search or page stays cached in this process, so it "
            "is not fetched twice (0: no cache)."
        },
    )
    # Components
    evaluator: str = field(
        default="embedding",
        metadata={
            "description": "Retrieval evaluator backend: 'embedding' (shipped MiniLM, offline "
            "default) or 't5' (the paper's T5 regression evaluator; set evaluator_model)."
        },
    )
    evaluator_model: str = field(
        default="",
        metadata={
            "description": "Checkpoint path or hub id for the 't5' evaluator (ignored by "
            "'embedding')."
        },
    )
    evaluator_batch_size: int = field(
        default=32,
        metadata={"description": "Pairs scored per forward pass by the evaluator."},
    )
    generator: str = field(
        default_factory=lambda: _env("CRAG_GENERATOR", "smollm2"),
        metadata={
            "description": "'smollm2' (shipped SmolLM2-135M-Instruct), 'local:/path/to/hf-model', "
            "or any LangChain chat model as 'provider:model' (e.g. 'openai:gpt-4o-mini')."
        },
    )
    max_new_tokens: int = field(
        default=128,
        metadata={"description": "Longest answer the generator may write, in tokens."},
    )
    embedder: str = field(
        default="all-MiniLM-L6-v2",
        metadata={
            "description": "Sentence-transformers embedder: 'all-MiniLM-L6-v2' (shipped) or a "
            "local model path."
        },
    )
    store_path: str = field(
        default_factory=lambda: _env("CRAG_STORE_PATH", DEFAULT_STORE_PATH),
        metadata={"description": "Directory of the Chroma store on disk."},
    )
    collection: str = field(
        default_factory=lambda: _env("CRAG_COLLECTION", DEFAULT_COLLECTION),
        metadata={"description": "Chroma collection name."},
    )
    default_corpus: bool = field(
        default=True,
        metadata={
            "description": "When the collection is empty or missing, ingest the bundled "
            "Wikipedia vital-article summaries first (CC BY-SA)."
        },
    )
    default_corpus_limit: int = field(
        default=0,
        metadata={"description": "Ingest only the first N bundled summaries (0: all 10,033)."},
    )
    max_question_chars: int = field(
        default=2000,
        metadata={"description": "Longer questions are rejected with a clear error."},
    )

    @classmethod
    def from_mapping(cls, values: dict[str, Any] | None) -> Context:
        """Build a context from a plain mapping, ignoring unknown keys' absence, rejecting typos."""
        values = dict(values or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"unknown setting(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
            )
        return cls(**values)


def resolve_context(context: Context | dict[str, Any] | None) -> Context:
    """Return the run's settings: the given context, a mapping of settings, or the defaults.

    In plain Python ``runtime.context`` is ``None`` unless ``context=`` was passed to ``invoke``;
    the server builds it from the schema's defaults.
    """
    if context is None:
        return Context()
    if isinstance(context, Context):
        return context
    return Context.from_mapping(dict(context))
