"""Per-run settings: what a person asking questions chooses for one run.

The served graphs' context schema (what LangGraph Studio draws, what a caller sends as ``context``)
and what ``graph.invoke(..., context=Context(...))`` takes in Python. The method's parameters
(:class:`~crag.settings.method.MethodConfig`) are set where a graph is built, and the deployment
settings (:class:`~crag.settings.deployment.DeploymentSettings`) are the operator's; a per-run
context naming either is refused (:mod:`crag.settings.setting_kinds`). A node reads all three as one
:class:`~crag.settings.run_settings.RunSettings`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Literal

from pydantic import Field

from crag.settings.scope_settings import check_tags, normal_file_types, normal_folder
from crag.settings.setting_checks import InvalidSettingError, StringList
from crag.settings.setting_kinds import PerRunSettings

__all__ = [
    "Context",
    "IngestContext",
    "InvalidSettingError",
    "default_context",
    "resolve_context",
    "resolve_ingest_context",
]


class Context(PerRunSettings):
    """The settings a run of the question graphs may choose."""

    # What the store is asked
    top_k: int = Field(
        default=10,
        ge=1,
        le=100,
        description="How many passages to retrieve from your documents (paper: 10).",
    )
    retrieval: Literal["dense", "lexical", "hybrid"] = Field(
        default="dense",
        description="How your documents are searched: 'dense', by meaning (nearest "
        "embeddings); 'lexical', by words (BM25: finds rare exact terms such as codes and "
        "names); 'hybrid', both. Lexical and hybrid need a store on disk (on a Chroma "
        "server they search by meaning).",
    )
    # Where to look: each set scope narrows the search (they combine); empty: everything
    scope_tags: StringList = Field(
        default_factory=list,
        description="Search only documents ingested with any of these tags (`crag "
        "ingest --tag NAME`; tags are case-sensitive). On the command line: comma-separated.",
    )
    scope_folder: str = Field(
        default="",
        description="Search only files ingested from this folder or below it (an "
        "absolute path on the machine that ingested them; a served run may name a folder "
        "of the server's as its runs show it: shared:docs, upload:members/NAME).",
    )
    scope_file_types: StringList = Field(
        default_factory=list,
        description="Search only documents of these types: file extensions such as "
        "'pdf' or 'md', 'wikipedia' (the bundled corpus) or 'inline' (documents given as "
        "text). On the command line: comma-separated.",
    )
    search_collection: str = Field(
        default="",
        description="Which collection to search (empty: the default one): one of those "
        "the operator lets runs read.",
    )
    # The web, when your documents do not hold the answer
    web_search: bool = Field(
        default=True,
        description="Search the web when the retrieved passages are judged wrong or "
        "doubtful; off: answer from your documents only (nothing leaves the server).",
    )
    web_results: int = Field(
        default=5,
        ge=1,
        le=50,
        description="How many web results to use per search (paper: top 5).",
    )
    pages_to_read: int = Field(
        default=5,
        ge=0,
        le=20,
        description="How many of those result pages to read, best first (paper: 5); the "
        "others give their search snippets. 0: snippets only.",
    )
    only_wikipedia: bool = Field(
        default=False,
        description="Use Wikipedia results only (drop every other web page).",
    )
    search_region: str = Field(
        default="us-en",
        description="Web search region and language, 'country-language' (e.g. 'us-en', "
        "'uk-en', 'de-de'); also picks the Wikipedia language (DuckDuckGo only).",
    )
    search_safesearch: Literal["on", "moderate", "off"] = Field(
        default="moderate",
        description="Safe search of the web results: 'on', 'moderate' or 'off'.",
    )
    # The answer
    max_new_tokens: int = Field(
        default=128,
        ge=1,
        le=1024,
        description="Longest answer, in tokens (about three quarters of a word).",
    )

    def check_together(self) -> None:
        """Normalise the scope settings; refuse a bad tag, folder or file type."""
        try:
            self.scope_tags = check_tags(self.scope_tags, "setting scope_tags")
            self.scope_folder = normal_folder(self.scope_folder, "setting scope_folder")
            self.scope_file_types = normal_file_types(
                self.scope_file_types, "setting scope_file_types"
            )
        except ValueError as exc:
            raise InvalidSettingError(str(exc)) from None


class IngestContext(PerRunSettings):
    """The settings a run of the ingestion graph may choose: how documents are chunked."""

    chunk_size: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Largest chunk, in characters.",
    )
    chunk_overlap: int = Field(
        default=100,
        ge=0,
        description="Characters shared by consecutive chunks (below chunk_size).",
    )

    def check_together(self) -> None:
        """Chunks overlap by less than their size."""
        if self.chunk_overlap >= self.chunk_size:
            raise InvalidSettingError(
                f"setting chunk_overlap ({self.chunk_overlap}) must be below chunk_size "
                f"({self.chunk_size})"
            )


def _not_settings(value: object, kind: str) -> InvalidSettingError:
    shown = " ".join(repr(value).split())
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return InvalidSettingError(
        f"context must be {kind}(...) or a mapping of setting names to values, not "
        f"{type(value).__name__} ({shown})"
    )


@functools.cache
def default_context() -> Context:
    """The default per-run settings, built once and shared (read it, do not change it)."""
    return Context()


def resolve_context(context: object) -> Context:
    """Return the run's settings: the given context, a mapping of settings, or the defaults.

    LangGraph builds the context at the graph's boundary: a dict becomes the graph's context
    schema (:data:`~crag.settings.run_context.RunContext`, itself a :class:`Context`) and anything
    else is passed through unchanged. So in plain Python ``runtime.context`` is ``None`` unless
    ``context=`` was passed to ``invoke``, and a wrong value (``context=42``) arrives here.

    Raises:
        InvalidSettingError: not a context or mapping, an unknown setting, a bad value, a method
            parameter or a deployment setting.
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
