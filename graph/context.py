"""Run-time settings: one context schema with the paper's defaults.

LangGraph shows these fields (with their descriptions) in Studio and builds them from their
defaults on the server. In plain Python pass ``context=Context(...)`` to ``invoke``; nodes fall
back to ``Context()`` when no context is given.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal, get_args, get_origin, get_type_hints

DEFAULT_STORE_PATH = ".crag/chroma"
DEFAULT_COLLECTION = "crag"
DEFAULT_CHROMA_PORT = 8000

CHROMA_HOST_DESCRIPTION = (
    "Host name or IP of a Chroma server (`chroma run`) holding the store; empty: the on-disk "
    "store at store_path."
)


class InvalidSettingError(ValueError):
    """A setting has the wrong type or a value out of range (the message names it)."""


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidSettingError(
            f"environment variable {name} must be an integer, not {raw!r}"
        ) from None


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise InvalidSettingError(f"environment variable {name} must be true or false, not {raw!r}")


_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _check_value(name: str, value: Any, annotation: Any) -> Any:
    """Return ``value`` (an int given for a float becomes a float) or raise naming the problem."""
    if get_origin(annotation) is Literal:
        choices = get_args(annotation)
        if value not in choices:
            listed = ", ".join(repr(c) for c in choices)
            raise InvalidSettingError(f"setting {name} must be one of {listed}, not {value!r}")
        return value
    if annotation is bool:
        ok = isinstance(value, bool)
    elif annotation is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif annotation is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and not math.isfinite(value):
            raise InvalidSettingError(f"setting {name} must be a finite number, not {value!r}")
    elif annotation is str:
        ok = isinstance(value, str)
    else:  # pragma: no cover - every setting has one of the types above
        return value
    if not ok:
        raise InvalidSettingError(
            f"setting {name} must be {_TYPE_WORDS[annotation]}, not {value!r} "
            f"({type(value).__name__})"
        )
    return float(value) if annotation is float else value


# Where the store lives: the same settings, read from the same environment variables, in the
# question graph's Context and the ingestion graph's IngestContext.
def _store_path_field(description: str) -> Any:
    return field(
        default_factory=lambda: _env("CRAG_STORE_PATH", DEFAULT_STORE_PATH),
        metadata={"description": f"{description} (unused when chroma_host is set)."},
    )


def _collection_field(description: str) -> Any:
    return field(
        default_factory=lambda: _env("CRAG_COLLECTION", DEFAULT_COLLECTION),
        metadata={"description": description},
    )


def _chroma_host_field() -> Any:
    return field(
        default_factory=lambda: _env("CRAG_CHROMA_HOST", ""),
        metadata={"description": CHROMA_HOST_DESCRIPTION},
    )


def _chroma_port_field() -> Any:
    return field(
        default_factory=lambda: _env_int("CRAG_CHROMA_PORT", DEFAULT_CHROMA_PORT),
        metadata={"description": "Port of the Chroma server (with chroma_host)."},
    )


def _chroma_ssl_field() -> Any:
    return field(
        default_factory=lambda: _env_bool("CRAG_CHROMA_SSL", False),
        metadata={"description": "Talk to the Chroma server over HTTPS (with chroma_host)."},
    )


class _Settings:
    """Type and range checks shared by the settings dataclasses (run in ``__post_init__``).

    LangGraph builds a context from the JSON a caller sends without checking types, so a wrong
    type (``top_k: "ten"``) would otherwise fail deep inside a node with an unrelated error.
    """

    _MINIMUMS: ClassVar[dict[str, float]] = {}
    """Smallest allowed value per numeric setting."""
    _MAXIMUMS: ClassVar[dict[str, float]] = {}
    """Largest allowed value per numeric setting."""

    def __post_init__(self) -> None:
        hints = get_type_hints(type(self))
        for f in fields(self):  # type: ignore[arg-type]
            value = _check_value(f.name, getattr(self, f.name), hints[f.name])
            setattr(self, f.name, value)
            low = self._MINIMUMS.get(f.name)
            if low is not None and value < low:
                raise InvalidSettingError(f"setting {f.name} must be at least {low:g}, not {value}")
            high = self._MAXIMUMS.get(f.name)
            if high is not None and value > high:
                raise InvalidSettingError(f"setting {f.name} must be at most {high:g}, not {value}")

    @classmethod
    def setting_names(cls) -> set[str]:
        """The names of every setting."""
        return {f.name for f in fields(cls)}  # type: ignore[arg-type]


@dataclass(kw_only=True)
class Context(_Settings):
    """Every setting of a CRAG run."""

    _MINIMUMS: ClassVar[dict[str, float]] = {
        "top_k": 1,
        "strip_size": 1,
        "strips_kept": 1,
        "web_results": 1,
        "search_timeout": 0.001,
        "pages_to_read": 0,
        "page_timeout": 0.001,
        "max_page_bytes": 1,
        "max_redirects": 0,
        "web_cache_ttl": 0,
        "evaluator_batch_size": 1,
        "max_new_tokens": 1,
        "default_corpus_limit": 0,
        "max_question_chars": 1,
        "chroma_port": 1,
    }
    _MAXIMUMS: ClassVar[dict[str, float]] = {"chroma_port": 65535}

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
    # Ablations (the paper's Tables 2 and 3); the defaults run the full method
    force_action: Literal["", "correct", "incorrect", "ambiguous"] = field(
        default="",
        metadata={
            "description": "Take this action whatever the scores ('' : the action trigger "
            "decides). Ablation: CRAG with only one action."
        },
    )
    disable_action: Literal["", "correct", "incorrect", "ambiguous"] = field(
        default="",
        metadata={
            "description": "Remove one action, as the paper's Table 2 does: without correct or "
            "incorrect, that case becomes ambiguous; without ambiguous, one threshold halfway "
            "between lower_threshold and upper_threshold splits correct from incorrect."
        },
    )
    refine_knowledge: bool = field(
        default=True,
        metadata={
            "description": "Decompose, filter and recompose the retrieved passages; off: the "
            "passages not judged irrelevant go to the generator whole (ablation)."
        },
    )
    rewrite_for_search: bool = field(
        default=True,
        metadata={
            "description": "Rewrite the question into search keywords; off: search for the "
            "question as asked (ablation)."
        },
    )
    select_web_knowledge: bool = field(
        default=True,
        metadata={
            "description": "Score web paragraphs and keep the best; off: the first "
            "strips_kept paragraphs in result order, unscored (ablation)."
        },
    )
    # Components
    evaluator: str = field(
        default_factory=lambda: _env("CRAG_EVALUATOR", "embedding"),
        metadata={
            "description": "Retrieval evaluator backend: 'embedding' (shipped MiniLM, offline "
            "default), 't5' (the paper's T5 regression evaluator), 'cross-encoder' "
            "(sentence-transformers CrossEncoder) or 'llm' (the paper's yes/no prompt)."
        },
    )
    evaluator_model: str = field(
        default_factory=lambda: _env("CRAG_EVALUATOR_MODEL", ""),
        metadata={
            "description": "Checkpoint path or hub id for 't5' and 'cross-encoder'; a generator "
            "spec for 'llm' (empty: smollm2); ignored by 'embedding'."
        },
    )
    evaluator_int8: bool = field(
        default=False,
        metadata={
            "description": "Run the 't5' or 'cross-encoder' evaluator with int8 dynamically "
            "quantised linear layers (CPU only): about 2x faster, scores drift by up to ~0.1, "
            "so calibrate thresholds on int8 scores (`crag evaluator calibrate --int8`)."
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
    store_path: str = _store_path_field("Directory of the Chroma store on disk")
    collection: str = _collection_field("Chroma collection name.")
    chroma_host: str = _chroma_host_field()
    chroma_port: int = _chroma_port_field()
    chroma_ssl: bool = _chroma_ssl_field()
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
        known = cls.setting_names()
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


@dataclass(kw_only=True)
class IngestContext(_Settings):
    """The settings of the ingestion graph: which store, how documents are chunked."""

    _MINIMUMS: ClassVar[dict[str, float]] = {
        "chunk_size": 1,
        "chunk_overlap": 0,
        "chroma_port": 1,
        "max_document_chars": 1,
    }
    _MAXIMUMS: ClassVar[dict[str, float]] = {"chroma_port": 65535}

    store_path: str = _store_path_field(
        "Directory of the Chroma store on disk, created when missing"
    )
    collection: str = _collection_field(
        "Chroma collection the documents go to (created if missing)."
    )
    chroma_host: str = _chroma_host_field()
    chroma_port: int = _chroma_port_field()
    chroma_ssl: bool = _chroma_ssl_field()
    embedder: str = field(
        default="all-MiniLM-L6-v2",
        metadata={
            "description": "Sentence-transformers embedder: 'all-MiniLM-L6-v2' (shipped) or a "
            "local model path; use the one the questions are asked with."
        },
    )
    chunk_size: int = field(
        default=1000,
        metadata={"description": "Largest chunk, in characters."},
    )
    chunk_overlap: int = field(
        default=100,
        metadata={"description": "Characters shared by consecutive chunks (below chunk_size)."},
    )
    max_document_chars: int = field(
        default=5_000_000,
        metadata={"description": "Longest inline document accepted, in characters."},
    )
