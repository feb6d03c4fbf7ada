"""What a node reads: one run's settings, the graph's method and the operator's deployment, as one.

A graph is built with a :class:`~crag.settings.method.MethodConfig` and (optionally) a
:class:`~crag.settings.deployment.DeploymentSettings`; each run brings its
:class:`~crag.settings.context.Context`. :func:`crag.nodes.node_runtime.graph_node` joins the three
into a :class:`RunSettings` (:meth:`RunSettings.combine`) and hands it to the node as
``runtime.context``. Each field is declared once, in its own kind's class: this class inherits the
per-run and method ones and holds the operator's as :attr:`RunSettings.deployment`. It is never a
schema: no caller builds it from what a run sends. :class:`IngestSettings` does the same for the
ingestion graph.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import Field

from crag.net.allowed_hosts import parse_allowed_hosts
from crag.settings.context import Context, IngestContext
from crag.settings.deployment import DeploymentSettings, deployment_settings, deployment_with
from crag.settings.method import KnowledgeForm, MethodConfig
from crag.settings.scope_settings import searched_collection
from crag.settings.setting_checks import InvalidSettingError, check_generator_spec


def _values(part: object, names: type) -> dict[str, Any]:
    """``part``'s values of the settings ``names`` declares (a settings class)."""
    return {name: getattr(part, name) for name in names.model_fields}  # type: ignore[attr-defined]


class RunSettings(Context, MethodConfig):
    """A question run's settings of all three kinds, as the nodes read them.

    The per-run and method settings are its own fields (inherited, each declared once in its
    kind's class); the operator's are :attr:`deployment`, read as ``settings.deployment.NAME``.
    """

    deployment: DeploymentSettings = Field(default_factory=deployment_settings)

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
            **_values(context, Context),
            **_values(method or MethodConfig(), MethodConfig),
            deployment=deployment or deployment_settings(),
        )

    def context(self) -> Context:
        """The per-run part."""
        return Context(**_values(self, Context))

    def method(self) -> MethodConfig:
        """The method's part."""
        return MethodConfig(**_values(self, MethodConfig))

    def action_thresholds(self) -> tuple[float, float]:
        """The action trigger's (upper, lower): each as set, else the evaluator's own."""
        return self.thresholds_for(self.deployment.evaluator, self.deployment.evaluator_model)

    def answer_threshold(self) -> float:
        """The abstention threshold: as set, else the generator's own."""
        return self.abstention_for(self.deployment.generator)

    def reader_knowledge_form(self) -> KnowledgeForm:
        """The knowledge form: as set, else the generator's own."""
        return self.knowledge_form_for(self.deployment.generator)

    def check_components(self) -> None:
        """Well-formed generator specs, before any work is done (the evaluator is a choice).

        Only names and forms: a local path or a remote provider is tried when it is loaded.
        """
        deployment = self.deployment
        check_generator_spec("generator", deployment.generator)
        for role in ("rewriter", "contextualizer"):
            if getattr(deployment, role).strip():
                check_generator_spec(role, getattr(deployment, role))
        if deployment.evaluator == "llm" and deployment.evaluator_model.strip():
            check_generator_spec("evaluator_model", deployment.evaluator_model)

    def check_together(self) -> None:
        """Each kind's own checks, then those across kinds.

        The evaluator's thresholds in order, known components, a readable allow-list, a
        collection runs may read.
        """
        Context.check_together(self)
        MethodConfig.check_together(self)
        self.check_components()
        self.check_thresholds(self.deployment.evaluator, self.deployment.evaluator_model)
        try:
            parse_allowed_hosts(self.deployment.allowed_hosts)
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
        deployment = self.deployment
        return searched_collection(
            deployment.collection, deployment.readable_collections, self.search_collection
        )

    def replaced(self, **changes: Any) -> Self:
        """These settings with ``changes`` applied (checked anew), deployment settings too."""
        operator = {
            name: changes.pop(name)
            for name in list(changes)
            if name in DeploymentSettings.model_fields
        }
        deployment = deployment_with(self.deployment, **operator) if operator else self.deployment
        return type(self)(**{**self.values(), "deployment": deployment, **changes})

    def for_role(self, role: Literal["rewriter", "contextualizer"]) -> RunSettings:
        """These settings with ``generator`` set to the model of an LLM role.

        The rewriter and the contextualizer use the generator unless their own setting names
        another model (``endpoint:small-model``, say).
        """
        spec = getattr(self.deployment, role).strip()
        if not spec or spec == self.deployment.generator:
            return self
        return self.replaced(generator=spec)


class IngestSettings(IngestContext):
    """An ingestion run's chunking and the operator's store and limits, as ingestion reads them."""

    deployment: DeploymentSettings = Field(default_factory=deployment_settings)

    @classmethod
    def combine(cls, context: IngestContext, deployment: DeploymentSettings | None = None) -> Self:
        """One ingestion run's ``context`` under ``deployment`` (default: the operator's)."""
        return cls(
            **_values(context, IngestContext),
            deployment=deployment or deployment_settings(),
        )
