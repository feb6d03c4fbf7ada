"""What a node reads: one run's settings, the graph's method and the operator's deployment, as one.

A graph is built with a :class:`~crag.core.method.MethodConfig` and (optionally) a
:class:`~crag.core.deployment.DeploymentSettings`; each run brings its
:class:`~crag.core.context.Context`. :func:`crag.core.node_runtime.graph_node` joins the three into
a :class:`RunSettings` (:meth:`RunSettings.combine`) and hands it to the node as
``runtime.context``. Each field is declared once, in its own kind's class; this class only
inherits them, and is never a schema: no caller builds it from what a run sends.
:class:`IngestSettings` does the same for the ingestion graph.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal, Self

from crag.core.allowed_hosts import parse_allowed_hosts
from crag.core.context import Context, IngestContext
from crag.core.deployment import (
    DeploymentSettings,
    bounds,
    deployment_settings,
    operator_default,
)
from crag.core.deployment import description as deployment_description
from crag.core.method import EVALUATORS, MethodConfig
from crag.core.scope_settings import searched_collection
from crag.core.setting_checks import (
    InvalidSettingError,
    Settings,
    check_choice,
    check_generator_spec,
    env_name,
    refusing_unknown_names,
)


def _deployment(setting: str) -> Any:
    """A deployment setting's field: its default, description and variable are the operator's."""
    return field(
        default_factory=functools.partial(operator_default, setting),
        metadata={
            "description": deployment_description(setting),
            "deployment": True,
            "env": env_name(setting),
        },
    )


@dataclass(kw_only=True)
class StoreDeployment:
    """The deployment settings of a run's store, and of the server's files.

    Which store a run reads or writes; where the server's files lie (the folders a served run
    names its files by: :mod:`crag.core.public_names`).
    """

    embedder: str = _deployment("embedder")
    store_path: str = _deployment("store_path")
    collection: str = _deployment("collection")
    chroma_host: str = _deployment("chroma_host")
    chroma_port: int = _deployment("chroma_port")
    chroma_ssl: bool = _deployment("chroma_ssl")
    ingest_root: str = _deployment("ingest_root")
    upload_dir: str = _deployment("upload_dir")


@dataclass(kw_only=True)
class QuestionDeployment(StoreDeployment):
    """The deployment settings the question graphs' nodes read."""

    readable_collections: str = _deployment("readable_collections")
    default_corpus: bool = _deployment("default_corpus")
    default_corpus_limit: int = _deployment("default_corpus_limit")
    evaluator: str = _deployment("evaluator")
    evaluator_model: str = _deployment("evaluator_model")
    evaluator_int8: bool = _deployment("evaluator_int8")
    evaluator_batch_size: int = _deployment("evaluator_batch_size")
    generator: str = _deployment("generator")
    rewriter: str = _deployment("rewriter")
    contextualizer: str = _deployment("contextualizer")
    no_repeat_ngram_size: int = _deployment("no_repeat_ngram_size")
    generator_batch_size: int = _deployment("generator_batch_size")
    search_provider: Literal["duckduckgo", "searxng", "tavily"] = _deployment("search_provider")
    search_url: str = _deployment("search_url")
    search_backend: str = _deployment("search_backend")
    search_timeout: float = _deployment("search_timeout")
    page_timeout: float = _deployment("page_timeout")
    max_page_bytes: int = _deployment("max_page_bytes")
    max_redirects: int = _deployment("max_redirects")
    allowed_hosts: str = _deployment("allowed_hosts")
    web_cache_ttl: float = _deployment("web_cache_ttl")
    max_question_chars: int = _deployment("max_question_chars")
    max_history_turns: int = _deployment("max_history_turns")
    max_history_chars: int = _deployment("max_history_chars")
    max_knowledge_chars: int = _deployment("max_knowledge_chars")


@dataclass(kw_only=True)
class IngestDeployment(StoreDeployment):
    """The deployment settings the ingestion reads: limits, the root, what runs may replace."""

    max_document_chars: int = _deployment("max_document_chars")
    ingest_run_replace: Literal["none", "served", "all"] = _deployment("ingest_run_replace")
    ingest_min_chunk_size: int = _deployment("ingest_min_chunk_size")
    ingest_max_chunks: int = _deployment("ingest_max_chunks")
    max_file_pages: int = _deployment("max_file_pages")
    max_file_paragraphs: int = _deployment("max_file_paragraphs")
    max_file_chars: int = _deployment("max_file_chars")


def _names(cls: type) -> tuple[str, ...]:
    return tuple(spec.name for spec in fields(cls))


def _bounds(*kinds: type[Settings], deployment: type) -> tuple[dict[str, float], dict[str, float]]:
    """The bounds of ``kinds`` and those the deployment settings of ``deployment`` declare."""
    names = set(_names(deployment))
    low = {k: v for kind in kinds for k, v in kind.MINIMUMS.items()}
    high = {k: v for kind in kinds for k, v in kind.MAXIMUMS.items()}
    low.update({k: v for k, v in bounds("ge").items() if k in names})
    high.update({k: v for k, v in bounds("le").items() if k in names})
    return low, high


def _values(part: object, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(part, name) for name in names}


@refusing_unknown_names
@dataclass(kw_only=True)
class RunSettings(Context, MethodConfig, QuestionDeployment):
    """A question run's settings of all three kinds, as the nodes read them."""

    MINIMUMS: ClassVar[dict[str, float]]
    MAXIMUMS: ClassVar[dict[str, float]]

    @classmethod
    def combine(
        cls,
        context: Context,
        method: MethodConfig | None = None,
        deployment: DeploymentSettings | None = None,
    ) -> Self:
        """One run's ``context`` under ``method`` and ``deployment`` (default: the operator's).

        Raises:
            InvalidSettingError: the three do not fit together (e.g. a collection the operator
                does not let runs read, thresholds out of order for the evaluator).
        """
        return cls(
            **_values(context, _names(Context)),
            **_values(method or MethodConfig(), _names(MethodConfig)),
            **_values(deployment or deployment_settings(), _names(QuestionDeployment)),
        )

    def context(self) -> Context:
        """The per-run part."""
        return Context(**_values(self, _names(Context)))

    def method(self) -> MethodConfig:
        """The method's part."""
        return MethodConfig(**_values(self, _names(MethodConfig)))

    def action_thresholds(self) -> tuple[float, float]:
        """The action trigger's (upper, lower): each as set, else the evaluator's own."""
        return self.thresholds_for(self.evaluator, self.evaluator_model)

    def answer_threshold(self) -> float:
        """The abstention threshold: as set, else the generator's own."""
        return self.abstention_for(self.generator)

    def check_components(self) -> None:
        """A known evaluator and well-formed generator specs, before any work is done.

        Only names and forms: a local path or a remote provider is tried when it is loaded.
        """
        self.evaluator = check_choice("evaluator", self.evaluator, EVALUATORS)
        check_generator_spec("generator", self.generator)
        for role in ("rewriter", "contextualizer"):
            if getattr(self, role).strip():
                check_generator_spec(role, getattr(self, role))
        if self.evaluator == "llm" and self.evaluator_model.strip():
            check_generator_spec("evaluator_model", self.evaluator_model)

    def check_together(self) -> None:
        """Each kind's own checks, then those across kinds.

        The evaluator's thresholds in order, known components, a readable allow-list, a
        collection runs may read.
        """
        Context.check_together(self)
        MethodConfig.check_together(self)
        self.check_components()
        self.check_thresholds(self.evaluator, self.evaluator_model)
        try:
            parse_allowed_hosts(self.allowed_hosts)
        except ValueError as exc:
            raise InvalidSettingError(f"setting {exc}") from None
        try:
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

    def replaced(self, **changes: Any) -> RunSettings:
        """These settings with ``changes`` applied (checked anew)."""
        return RunSettings(**{**_values(self, _names(RunSettings)), **changes})

    def for_role(self, role: Literal["rewriter", "contextualizer"]) -> RunSettings:
        """These settings with ``generator`` set to the model of an LLM role.

        The rewriter and the contextualizer use the generator unless their own setting names
        another model (``endpoint:small-model``, say).
        """
        spec = getattr(self, role).strip()
        if not spec or spec == self.generator:
            return self
        return self.replaced(generator=spec)


RunSettings.MINIMUMS, RunSettings.MAXIMUMS = _bounds(
    Context, MethodConfig, deployment=QuestionDeployment
)


@refusing_unknown_names
@dataclass(kw_only=True)
class IngestSettings(IngestContext, IngestDeployment):
    """An ingestion run's chunking and the operator's store and limits, as ingestion reads them."""

    MINIMUMS: ClassVar[dict[str, float]]
    MAXIMUMS: ClassVar[dict[str, float]]

    @classmethod
    def combine(cls, context: IngestContext, deployment: DeploymentSettings | None = None) -> Self:
        """One ingestion run's ``context`` under ``deployment`` (default: the operator's)."""
        return cls(
            **_values(context, _names(IngestContext)),
            **_values(deployment or deployment_settings(), _names(IngestDeployment)),
        )


IngestSettings.MINIMUMS, IngestSettings.MAXIMUMS = _bounds(
    IngestContext, deployment=IngestDeployment
)
