"""Run-time settings: the paper's defaults, in two kinds.

**Deployment settings** say where things are and what may be reached or loaded (the store, the
models, the search endpoint, the address allow-list, the corpus, the reading limits). Only the
operator sets them: ``CRAG_<NAME>`` environment variables (``.env`` for the server), which are
their defaults here, or ``Context(...)`` from Python and ``--set`` from the CLI. **Per-run
settings** (top_k, thresholds, strips, web results, ablations, ...) may also come from a served
run's ``context``; the served graphs are compiled with the schemas of
:mod:`crag.core.run_context`, which refuse deployment settings.

In plain Python pass ``context=Context(...)`` to ``invoke``; a run without a context gets the
defaults (:func:`default_context`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from crag.core.allowed_hosts import parse_allowed_hosts
from crag.core.deployment import (
    CHROMA_HOST_DESCRIPTION,
    DEFAULT_CHROMA_PORT,
    DEFAULT_COLLECTION,
    DEFAULT_STORE_PATH,
    MAX_GENERATOR_BATCH_SIZE,
    DeploymentSettings,
    bounds,
    deployment_settings,
    operator_default,
)
from crag.core.deployment import description as deployment_description
from crag.core.scope_settings import (
    check_tags,
    normal_file_types,
    normal_folder,
    searched_collection,
)
from crag.core.setting_checks import (
    InvalidSettingError,
    Settings,
    check_choice,
    check_generator_spec,
    env_name,
    refusing_unknown_names,
)

__all__ = [
    "CHROMA_HOST_DESCRIPTION",
    "DEFAULT_CHROMA_PORT",
    "DEFAULT_COLLECTION",
    "DEFAULT_STORE_PATH",
    "EVALUATORS",
    "EVALUATOR_THRESHOLDS",
    "MAX_GENERATOR_BATCH_SIZE",
    "PAPER_THRESHOLDS",
    "Context",
    "IngestContext",
    "InvalidSettingError",
    "default_context",
    "resolve_context",
    "resolve_ingest_context",
]


EVALUATORS: tuple[str, ...] = ("embedding", "t5", "cross-encoder", "llm")
"""The evaluator backends (``crag.evaluator.registry.BACKENDS``; a test keeps the two in step),
named here so that a bad ``evaluator`` fails when the settings are built, not after retrieval."""

PAPER_THRESHOLDS: tuple[float, float] = (0.59, -0.99)
"""The paper's action thresholds (upper, lower), set for its fine-tuned T5 on PopQA."""
EVALUATOR_THRESHOLDS: dict[str, tuple[float, float]] = {
    "embedding": (0.1, -0.9),
    "cross-encoder": (0.59, -0.99),
}
"""Action thresholds calibrated on an evaluator's own score scale (the embedding evaluator's
passage map on the open-domain dev sets; the shipped cross-encoder's scores on the ``select``
split of the mined dev pairs); an evaluator not named here takes the paper's. The
``cross-encoder`` entry is the shipped checkpoint's: a cross-encoder named by
``evaluator_model`` takes the paper's."""


def _deployment(setting: str, description: str | None = None) -> Any:
    """A deployment setting: its default is the operator's (:func:`operator_default`).

    Its type's values, bounds and description are declared once, in
    :class:`~crag.core.deployment.DeploymentSettings`; ``description`` replaces the declared
    one where a settings class uses the setting differently (the ingestion graph's store).
    """
    return field(
        default_factory=functools.partial(operator_default, setting),
        metadata={
            "description": description or deployment_description(setting),
            "deployment": True,
            "env": env_name(setting),
        },
    )


def _deployment_bounds(kind: Literal["ge", "le"], names: frozenset[str]) -> dict[str, float]:
    """The declared lower or upper bounds of those of ``names`` that are deployment settings."""
    return {name: value for name, value in bounds(kind).items() if name in names}


@refusing_unknown_names
@dataclass(kw_only=True)
class Context(Settings):
    """Every setting of a CRAG run."""

    MINIMUMS: ClassVar[dict[str, float]] = {
        "top_k": 1,
        "upper_threshold": -1,
        "lower_threshold": -1,
        "strip_threshold": -1,
        "strip_margin": 0,
        "abstention_threshold": -1,
        "strip_size": 1,
        "strips_kept": 1,
        "web_results": 1,
        "pages_to_read": 0,
        "evaluator_batch_size": 1,
        "max_new_tokens": 1,
    }
    MAXIMUMS: ClassVar[dict[str, float]] = {
        # What one run may cost: bounds on the per-run settings a caller of the server sets.
        "top_k": 100,
        "upper_threshold": 1,
        "lower_threshold": 1,
        "strip_threshold": 1,
        "abstention_threshold": 1,
        "strip_size": 1000,
        "strips_kept": 100,
        "strip_margin": 100,
        "web_results": 50,
        "pages_to_read": 20,
        "evaluator_batch_size": 512,
        "max_new_tokens": 1024,
    }

    # Retrieval
    top_k: int = field(
        default=10,
        metadata={"description": "Passages retrieved from the store per question (paper: 10)."},
    )
    retrieval: Literal["dense", "lexical", "hybrid"] = field(
        default="dense",
        metadata={
            "description": "How the store is searched: 'dense', nearest embeddings; 'lexical', "
            "BM25 over the chunks' words (finds rare exact terms: codes, names); 'hybrid', "
            "both ranked lists fused by reciprocal rank. Lexical and hybrid need a store on "
            "disk (on a Chroma server they search densely)."
        },
    )
    # Scoped search: each set scope narrows retrieval (they combine); empty: the whole collection
    scope_tags: list[str] = field(
        default_factory=list,
        metadata={
            "description": "Search only documents ingested with any of these tags (`crag "
            "ingest --tag NAME`; tags are case-sensitive). On the command line: comma-separated."
        },
    )
    scope_folder: str = field(
        default="",
        metadata={
            "description": "Search only files ingested from this folder or below it (an "
            "absolute path on the machine that ingested them; '~' and '..' are resolved)."
        },
    )
    scope_file_types: list[str] = field(
        default_factory=list,
        metadata={
            "description": "Search only documents of these types: file extensions such as "
            "'pdf' or 'md', 'wikipedia' (the bundled corpus) or 'inline' (documents given as "
            "text). On the command line: comma-separated."
        },
    )
    search_collection: str = field(
        default="",
        metadata={
            "description": "Collection to search (empty: collection): one of the collections "
            "the operator lets runs read (collection and readable_collections)."
        },
    )
    # Action trigger
    upper_threshold: float | None = field(
        default=None,
        metadata={
            "description": "Correct if any passage scores above this. Unset (null): the "
            "evaluator's own: 0.1 for the default embedding evaluator (calibrated on the "
            "open-domain dev sets), the paper's 0.59 for 't5', 'cross-encoder' and 'llm'."
        },
    )
    lower_threshold: float | None = field(
        default=None,
        metadata={
            "description": "Incorrect if every passage scores below this. Unset (null): the "
            "evaluator's own: -0.9 for the default embedding evaluator (P(relevant) = 0.05 on "
            "its scale, calibrated on the open-domain dev sets), the paper's -0.99 for 't5', "
            "'cross-encoder' and 'llm'."
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
    strip_scoring: Literal["strips", "passages"] = field(
        default="strips",
        metadata={
            "description": "How strips are scored: 'strips', with the evaluator's strip "
            "calibration where it has one (the embedding evaluator: cosine, heading and the "
            "question's words, fitted on strips that state the answer); 'passages', with the "
            "map used to grade whole passages."
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
        default=-0.99,
        metadata={
            "description": "Strips scoring at or below this are dropped (paper: -0.5 on its "
            "T5's scale; -0.99 here, the lower threshold: the embedding evaluator scores single "
            "sentences lower than passages, and at -0.5 it dropped most answer-bearing strips)."
        },
    )
    strip_margin: float = field(
        default=1.0,
        metadata={
            "description": "Strips whose logit (2 atanh(score)) is more than this below the "
            "best kept strip's are dropped too, store and web alike: distractors the reader "
            "would copy (1.0: more right answers on the dev sets, see Benchmark). 0: off."
        },
    )
    # External knowledge
    search_provider: Literal["duckduckgo", "searxng", "tavily"] = _deployment("search_provider")
    search_url: str = _deployment("search_url")
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
    search_timeout: float = _deployment("search_timeout")
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
    page_timeout: float = _deployment("page_timeout")
    max_page_bytes: int = _deployment("max_page_bytes")
    max_redirects: int = _deployment("max_redirects")
    allowed_hosts: str = _deployment("allowed_hosts")
    web_cache_ttl: float = _deployment("web_cache_ttl")
    # Answering
    abstain_without_knowledge: bool = field(
        default=True,
        metadata={
            "description": "When no knowledge passed the strip threshold (nothing kept from "
            "the store, and the web failed or gave nothing relevant), answer with a fixed "
            "sentence saying so, without asking the generator (abstained: true); off: the "
            "generator answers with no knowledge (crag graph only)."
        },
    )
    abstention_threshold: float = field(
        default=-0.9,
        metadata={
            "description": "Abstain also when knowledge was kept but none of it scores above "
            "this (on the embedding evaluator's strip map -0.9 is P(the strip states the "
            "answer) = 0.05; whole web paragraphs are scored with its passage map, where it is "
            "P(from a gold document) = 0.05); strips with no score always count. -1: only "
            "empty knowledge abstains."
        },
    )
    ambiguous_knowledge: Literal["both", "pooled"] = field(
        default="pooled",
        metadata={
            "description": "What an Ambiguous run reads: 'pooled', the best strips_kept of "
            "the refined store strips and the selected web strips together; 'both', each "
            "branch's strips side by side (up to 2 x strips_kept), as the paper concatenates "
            "them."
        },
    )
    knowledge_order: Literal["original", "score"] = field(
        default="original",
        metadata={
            "description": "Order of the knowledge in the generator's prompt: 'original', "
            "store strips then web strips, each in passage order, as the paper recomposes; "
            "'score', best-scored first (no better on the dev sets: +3 points on nq-dev, -4 "
            "on trivia-dev)."
        },
    )
    number_knowledge: bool = field(
        default=False,
        metadata={
            "description": "Number the knowledge in the generator's prompt ([1] ...) so the "
            "generator can cite entries itself (its valid [n] become the citations; without "
            "them citations come from word overlap). Off by default: SmolLM2-135M never "
            "cites and read numbered knowledge worse on the dev sets."
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
    best_passage_whole: bool = field(
        default=False,
        metadata={
            "description": "Refinement keeps the passage of the best-scored strip whole, in "
            "place of its strips (one entry among the strips_kept), so the generator reads the "
            "most relevant passage as written; off: strips only, as the paper refines."
        },
    )
    rewrite_for_search: bool = field(
        default=False,
        metadata={
            "description": "Rewrite the question into at most three search keywords with the "
            "paper's few-shot prompt before searching; off (default): search for the question "
            "as asked, which found the answer more often on the dev sets and saves a generator "
            "call."
        },
    )
    select_web_knowledge: bool = field(
        default=True,
        metadata={
            "description": "Score web paragraphs and keep the best; off: the first "
            "strips_kept paragraphs in result order, unscored (ablation)."
        },
    )
    refine_web_knowledge: bool = field(
        default=False,
        metadata={
            "description": "Off (default): whole web paragraphs are scored by the evaluator and "
            "the best strips_kept above strip_threshold kept (the relevant paragraphs), which "
            "answered more dev questions; on: they are refined as retrieved knowledge is "
            "(decomposed into strips, scored, the best kept), as the paper refines web "
            "knowledge."
        },
    )
    # Components
    evaluator: str = _deployment("evaluator")
    evaluator_model: str = _deployment("evaluator_model")
    evaluator_int8: bool = _deployment("evaluator_int8")
    evaluator_batch_size: int = field(
        default=32,
        metadata={"description": "Pairs scored per forward pass by the evaluator."},
    )
    generator: str = _deployment("generator")
    rewriter: str = _deployment("rewriter")
    contextualizer: str = _deployment("contextualizer")
    max_new_tokens: int = field(
        default=128,
        metadata={"description": "Longest answer the generator may write, in tokens."},
    )
    no_repeat_ngram_size: int = _deployment("no_repeat_ngram_size")
    generator_batch_size: int = _deployment("generator_batch_size")
    embedder: str = _deployment("embedder")
    store_path: str = _deployment("store_path")
    collection: str = _deployment("collection")
    readable_collections: str = _deployment("readable_collections")
    chroma_host: str = _deployment("chroma_host")
    chroma_port: int = _deployment("chroma_port")
    chroma_ssl: bool = _deployment("chroma_ssl")
    default_corpus: bool = _deployment("default_corpus")
    default_corpus_limit: int = _deployment("default_corpus_limit")
    max_question_chars: int = _deployment("max_question_chars")
    max_history_turns: int = _deployment("max_history_turns")
    max_history_chars: int = _deployment("max_history_chars")
    max_knowledge_chars: int = _deployment("max_knowledge_chars")

    def action_thresholds(self) -> tuple[float, float]:
        """The action trigger's (upper, lower) thresholds: each as set, else the evaluator's.

        Thresholds belong to an evaluator's score scale, so an unset one follows the
        ``evaluator`` setting (:data:`EVALUATOR_THRESHOLDS`, else :data:`PAPER_THRESHOLDS`):
        an operator who switches to the paper's T5 gets the paper's thresholds without setting
        them, and a run that sets one keeps it whatever the evaluator.
        """
        own = self.evaluator != "cross-encoder" or not self.evaluator_model.strip()
        upper, lower = (
            EVALUATOR_THRESHOLDS.get(self.evaluator, PAPER_THRESHOLDS) if own else PAPER_THRESHOLDS
        )
        return (
            upper if self.upper_threshold is None else self.upper_threshold,
            lower if self.lower_threshold is None else self.lower_threshold,
        )

    def check_components(self) -> None:
        """A known evaluator and well-formed generator specs, before any work is done.

        The evaluator is one of :data:`EVALUATORS` (any case, stored lower-case); ``generator``
        (and ``evaluator_model`` for the ``llm`` evaluator) is a generator spec. Only names and
        forms: a local path or a remote provider is tried when it is loaded.
        """
        self.evaluator = check_choice("evaluator", self.evaluator, EVALUATORS)
        check_generator_spec("generator", self.generator)
        for role in ("rewriter", "contextualizer"):
            if getattr(self, role).strip():
                check_generator_spec(role, getattr(self, role))
        if self.evaluator == "llm" and self.evaluator_model.strip():
            check_generator_spec("evaluator_model", self.evaluator_model)

    def replaced(self, **changes: Any) -> Context:
        """A plain :class:`Context` with these settings, ``changes`` applied (checked anew).

        Not ``dataclasses.replace``: a served run's constructor refuses the deployment settings
        that ``replace`` would pass on (they are filled in from the environment by then).
        """
        values = {name: getattr(self, name) for name in Context.setting_names()}
        return Context(**{**values, **changes})

    def for_role(self, role: Literal["rewriter", "contextualizer"]) -> Context:
        """These settings with ``generator`` set to the model of an LLM role.

        The rewriter and the contextualizer use the generator unless their own setting names
        another model (``endpoint:small-model``, say).
        """
        spec = getattr(self, role).strip()
        if not spec or spec == self.generator:
            return self
        return self.replaced(generator=spec)

    def _threshold_origin(self) -> str:
        """Where an unset threshold's value came from, for the order error (empty if both set)."""
        unset = [
            name
            for name, value in (("upper", self.upper_threshold), ("lower", self.lower_threshold))
            if value is None
        ]
        if not unset:
            return ""
        return f" ({' and '.join(unset)}: the {self.evaluator} evaluator's default)"

    def check_together(self) -> None:
        """Known components, thresholds in order, no contradictory ablations, a readable allow-list.

        And a well-formed scope (:meth:`check_scope`). Checked when the context is built, so
        that a bad combination fails before retrieval and grading rather than at
        ``decide_action`` (or a bad evaluator at ``grade``, a bad generator at ``generate``).
        Equal thresholds are allowed (no Ambiguous band); with ``disable_action='ambiguous'``
        the one cut is halfway between them.
        """
        self.check_components()
        upper, lower = self.action_thresholds()
        if lower > upper:
            raise InvalidSettingError(
                f"setting lower_threshold ({lower:g}) must not be above upper_threshold "
                f"({upper:g}){self._threshold_origin()}"
            )
        if self.force_action and self.force_action == self.disable_action:
            raise InvalidSettingError(
                f"settings force_action and disable_action both name {self.force_action!r}: "
                "an action cannot be forced and removed at once"
            )
        try:
            parse_allowed_hosts(self.allowed_hosts)
        except ValueError as exc:
            raise InvalidSettingError(f"setting {exc}") from None
        self.check_scope()

    def check_scope(self) -> None:
        """Normalise the scope settings; refuse a bad tag or a collection runs may not read."""
        try:
            self.scope_tags = check_tags(self.scope_tags, "setting scope_tags")
            self.scope_folder = normal_folder(self.scope_folder, "setting scope_folder")
            self.scope_file_types = normal_file_types(
                self.scope_file_types, "setting scope_file_types"
            )
            self.searched_collection()
        except ValueError as exc:
            raise InvalidSettingError(str(exc)) from None

    def searched_collection(self) -> str:
        """The collection this run searches: ``search_collection``, else ``collection``.

        Raises:
            ValueError: ``search_collection`` names a collection the operator does not let runs
                read (``collection`` and ``readable_collections``).
        """
        return searched_collection(
            self.collection, self.readable_collections, self.search_collection
        )


def _add_deployment_bounds(cls: type[Settings]) -> None:
    """Give ``cls`` the bounds its deployment settings declare (checked on every value)."""
    names = cls.deployment_names()
    cls.MINIMUMS = {**cls.MINIMUMS, **_deployment_bounds("ge", names)}
    cls.MAXIMUMS = {**cls.MAXIMUMS, **_deployment_bounds("le", names)}


_add_deployment_bounds(Context)


@refusing_unknown_names
@dataclass(kw_only=True)
class IngestContext(Settings):
    """The settings of the ingestion graph: which store, how documents are chunked."""

    MINIMUMS: ClassVar[dict[str, float]] = {
        "chunk_size": 1,
        "chunk_overlap": 0,
    }
    MAXIMUMS: ClassVar[dict[str, float]] = {"chunk_size": 100_000}

    store_path: str = _deployment(
        "store_path",
        "Directory of the Chroma store on disk, created when missing (unused when chroma_host "
        "is set).",
    )
    collection: str = _deployment(
        "collection", "Chroma collection the documents go to (created if missing)."
    )
    chroma_host: str = _deployment("chroma_host")
    chroma_port: int = _deployment("chroma_port")
    chroma_ssl: bool = _deployment("chroma_ssl")
    embedder: str = _deployment(
        "embedder",
        "Sentence-transformers embedder: 'all-MiniLM-L6-v2' (shipped) or a local model path; "
        "use the one the questions are asked with.",
    )
    chunk_size: int = field(
        default=1000,
        metadata={"description": "Largest chunk, in characters."},
    )
    chunk_overlap: int = field(
        default=100,
        metadata={"description": "Characters shared by consecutive chunks (below chunk_size)."},
    )
    max_document_chars: int = _deployment("max_document_chars")
    ingest_root: str = _deployment("ingest_root")
    ingest_run_replace: Literal["none", "served", "all"] = _deployment("ingest_run_replace")
    ingest_min_chunk_size: int = _deployment("ingest_min_chunk_size")
    ingest_max_chunks: int = _deployment("ingest_max_chunks")
    max_file_pages: int = _deployment("max_file_pages")
    max_file_paragraphs: int = _deployment("max_file_paragraphs")
    max_file_chars: int = _deployment("max_file_chars")

    def check_together(self) -> None:
        """Chunks overlap by less than their size."""
        if self.chunk_overlap >= self.chunk_size:
            raise InvalidSettingError(
                f"setting chunk_overlap ({self.chunk_overlap}) must be below chunk_size "
                f"({self.chunk_size})"
            )


_add_deployment_bounds(IngestContext)


def _not_settings(value: object, kind: str) -> InvalidSettingError:
    shown = " ".join(repr(value).split())
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return InvalidSettingError(
        f"context must be {kind}(...) or a mapping of setting names to values, not "
        f"{type(value).__name__} ({shown})"
    )


@functools.lru_cache(maxsize=4)
def _defaults_under(operator: DeploymentSettings) -> Context:
    """The default settings, built once per value of the operator's settings."""
    del operator  # the cache key: Context() takes its deployment fields from the same object
    return Context()


def default_context() -> Context:
    """The default settings under the current ``CRAG_<NAME>`` environment variables.

    Built once per environment and shared (read it, do not change it): every node of a run, and
    every run under the same environment, gets the same object.
    """
    return _defaults_under(deployment_settings())


def resolve_context(context: object) -> Context:
    """Return the run's settings: the given context, a mapping of settings, or the defaults.

    LangGraph builds the context at the graph's boundary: a dict becomes the graph's context
    schema (:data:`~crag.core.run_context.RunContext`, itself a :class:`Context`) and anything else
    is passed through unchanged. So in plain Python ``runtime.context`` is ``None`` unless
    ``context=`` was passed to ``invoke``, and a wrong value (``context=42``) arrives here.
    Idempotent and cheap: a :class:`Context` is returned as is, ``None`` gives the shared
    :func:`default_context`; only a mapping other than a dict is built anew.

    Raises:
        InvalidSettingError: not a context or mapping, an unknown setting, a bad value.
    """
    if context is None:
        return default_context()
    if isinstance(context, Context):
        return context
    if isinstance(context, Mapping):
        return Context.from_mapping(context)
    raise _not_settings(context, "Context")


def resolve_ingest_context(context: object) -> IngestContext:
    """Like :func:`resolve_context`, for the ingestion graph's settings."""
    if context is None:
        return IngestContext()
    if isinstance(context, IngestContext):
        return context
    if isinstance(context, Mapping):
        return IngestContext.from_mapping(context)
    raise _not_settings(context, "IngestContext")
