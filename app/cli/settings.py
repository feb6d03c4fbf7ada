"""The command line's settings: ``KEY=VALUE`` pairs sorted into their three kinds.

``--set`` takes any setting, since the CLI is run by the operator: a per-run setting goes to the
run's :class:`~crag.settings.context.Context`, a parameter of the method to the
:class:`~crag.settings.method.MethodConfig` the graph is built with, a deployment setting over the
operator's environment (:func:`~crag.settings.deployment.deployment_with`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from crag.settings.context import Context, IngestContext
from crag.settings.deployment import DeploymentSettings, deployment_with
from crag.settings.method import MethodConfig, operator_method
from crag.settings.run_settings import IngestSettings, RunSettings
from crag.settings.setting_checks import InvalidSettingError, parse_text
from crag.settings.setting_kinds import DEPLOYMENT_NAMES, METHOD_NAMES

ENVIRONMENT_ONLY = frozenset(name for name in DEPLOYMENT_NAMES if name.startswith("llm_"))
"""The model server's settings: read from the environment once per process by the components
(:class:`~crag.app.wiring.DefaultComponents`), so ``--set`` cannot change them (the API key, a
secret, is never typed on a command line)."""
COMMAND_LINE_DEPLOYMENT = DEPLOYMENT_NAMES - ENVIRONMENT_ONLY


@dataclass(frozen=True)
class CommandSettings:
    """One command's settings of the three kinds."""

    context: Context
    method: MethodConfig
    deployment: DeploymentSettings

    def run_settings(self) -> RunSettings:
        """The three joined, as a run's nodes read them."""
        return RunSettings.combine(self.context, self.method, self.deployment)

    def ingest_settings(self) -> IngestSettings:
        """The store and per-file limits ``crag ingest`` and ``crag remove`` read."""
        return IngestSettings.combine(IngestContext(), self.deployment)


def _unknown(key: str) -> InvalidSettingError:
    return InvalidSettingError(
        f"unknown setting {key!r}; per-run: {', '.join(sorted(Context.setting_names()))}; "
        f"method: {', '.join(sorted(METHOD_NAMES))}; deployment: "
        f"{', '.join(sorted(COMMAND_LINE_DEPLOYMENT))}"
    )


def _declared(key: str) -> Any:
    if key in Context.setting_names():
        return Context.declared_types()[key]
    if key in METHOD_NAMES:
        return MethodConfig.declared_types()[key]
    return DeploymentSettings.model_fields[key].annotation


def parse_settings(pairs: list[str], base: dict[str, Any] | None = None) -> CommandSettings:
    """Parse ``KEY=VALUE`` strings into the three kinds, on top of ``base`` values.

    Every setting may be given: the CLI is run by the operator. The method starts from the
    operator's (:func:`~crag.settings.method.operator_method`), the deployment from the environment.

    Raises:
        InvalidSettingError: a pair without ``=``, an unknown setting (the message lists the
            valid ones by kind), or a value of the wrong type.
    """
    values: dict[str, Any] = dict(base or {})
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise InvalidSettingError(f"--set takes KEY=VALUE, got {pair!r}")
        if key in ENVIRONMENT_ONLY:
            raise InvalidSettingError(
                f"setting {key} is read from the environment only: set CRAG_{key.upper()}"
            )
        if key in IngestContext.setting_names():
            raise InvalidSettingError(
                f"setting {key} is chosen per run of the served ingest graph (its context, "
                f'e.g. {{"{key}": 500}}), not by --set: crag ingest chunks with chunk_size '
                "1000 and chunk_overlap 100"
            )
        if key not in Context.setting_names() | METHOD_NAMES | COMMAND_LINE_DEPLOYMENT:
            raise _unknown(key)
        values[key] = parse_text(raw, _declared(key), f"setting {key}")
    if "store_path" in values and not str(values["store_path"]).strip():
        raise InvalidSettingError(
            "the store path is empty: name the vector store's directory (--store DIR)"
        )
    run = {k: v for k, v in values.items() if k in Context.setting_names()}
    method = {k: v for k, v in values.items() if k in METHOD_NAMES}
    deployment = {k: v for k, v in values.items() if k in DEPLOYMENT_NAMES}
    operator = operator_method()
    settings = CommandSettings(
        context=Context(**run),
        method=operator.replaced(**method) if method else operator,
        deployment=deployment_with(**deployment),
    )
    settings.run_settings()  # the checks across kinds (components, thresholds), before any work
    return settings


MODEL_PREFIXES = ("local:", "gguf:")
"""Generator specs that name a folder or file on disk."""


def _absolute(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))


def _absolute_spec(spec: str) -> str:
    for prefix in MODEL_PREFIXES:
        if spec.startswith(prefix) and not os.path.isabs(os.path.expanduser(spec[len(prefix) :])):
            return prefix + _absolute(spec[len(prefix) :])
    return spec


def with_absolute_model_paths(deployment: DeploymentSettings) -> DeploymentSettings:
    """``deployment`` with every model named by a relative path made absolute (the CLI's cwd).

    The models are cached per process by their setting: a warm server (``crag serve``) runs
    each client's command in the client's directory, so ``local:models/m`` or an
    ``evaluator_model``/``embedder`` folder ``models/m`` would otherwise load the first
    client's folder for every later one. A name that is no folder here (``smollm2``, a Hub name,
    ``endpoint:MODEL``) is kept as it is.
    """
    changes: dict[str, str] = {}
    for role in ("generator", "rewriter", "contextualizer"):
        spec = getattr(deployment, role)
        if _absolute_spec(spec) != spec:
            changes[role] = _absolute_spec(spec)
    for name in ("evaluator_model", "embedder"):
        value = getattr(deployment, name)
        if value and not os.path.isabs(value) and os.path.exists(value):
            changes[name] = _absolute(value)
    return deployment_with(deployment, **changes) if changes else deployment
