"""The benchmark's settings of the three kinds: ``--set`` values, sorted by kind.

``crag-bench`` is run by the operator, so its ``--set`` takes every kind of setting, as
``crag --set`` does (:func:`crag.app.cli.settings.parse_settings`): a per-run setting goes to each
run's :class:`~crag.settings.context.Context`, a parameter of the method to the
:class:`~crag.settings.method.MethodConfig` each graph is built with, a deployment setting over the
operator's environment (:class:`~crag.settings.deployment.DeploymentSettings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crag.app.cli.settings import CommandSettings, parse_settings
from crag.settings.context import Context
from crag.settings.method import MethodConfig
from crag.settings.setting_checks import check_known
from crag.settings.setting_kinds import DEPLOYMENT_NAMES, METHOD_NAMES


def setting_value(settings: CommandSettings, name: str) -> Any:
    """The value of the setting ``name`` in the part of ``settings`` of its kind."""
    if name in METHOD_NAMES:
        return getattr(settings.method, name)
    if name in DEPLOYMENT_NAMES:
        return getattr(settings.deployment, name)
    return getattr(settings.context, name)


def given_settings(pairs: list[str] | None) -> dict[str, Any]:
    """The settings ``KEY=VALUE`` pairs name, each parsed to its type, by name (every kind).

    Raises:
        InvalidSettingError: a pair without ``=``, an unknown setting or a bad value.
    """
    parsed = parse_settings(list(pairs or []))
    keys = {pair.partition("=")[0].strip().replace("-", "_") for pair in pairs or []}
    return {key: setting_value(parsed, key) for key in sorted(keys)}


def settings_by_kind(values: Mapping[str, Any]) -> CommandSettings:
    """``values`` (setting name → value, any kind) sorted into a run's three kinds.

    The method starts from the operator's (:func:`~crag.settings.method.operator_method`), the
    deployment from the environment, as for ``crag --set``.

    Raises:
        InvalidSettingError: an unknown setting or a bad value.
    """
    check_known(values, Context.setting_names() | METHOD_NAMES | DEPLOYMENT_NAMES)
    return parse_settings([], base=dict(values))


def method_with(method: MethodConfig, changes: Mapping[str, Any]) -> MethodConfig:
    """``method`` with ``changes`` (parameters of the method) applied, checked anew.

    Raises:
        InvalidSettingError: a name that is no parameter of the method, or a bad value.
    """
    check_known(changes, METHOD_NAMES)
    return method.replaced(**changes)
