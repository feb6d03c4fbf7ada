"""The three kinds of setting, and the error for a setting given where its kind may not be.

* **Per-run settings** (:class:`~crag.settings.context.Context`,
  :class:`~crag.settings.context.IngestContext`): what a person asking questions (or adding
  documents) chooses per run; a served caller sends them.
* **The method's parameters** (:class:`~crag.settings.method.MethodConfig`): set where a graph
  is built.
* **Deployment settings** (:class:`~crag.settings.deployment.DeploymentSettings`): the
  operator's, read from the environment.

A run's context that names a method parameter or a deployment setting is refused with an error
naming it (by the per-run classes, :class:`PerRunSettings`, and by the server's middleware,
:mod:`crag.app.web.http`, before langgraph-api would drop it without a word).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from crag.settings.deployment import DeploymentSettings
from crag.settings.method import MethodConfig
from crag.settings.setting_checks import InvalidSettingError, Settings, env_name

Kind = Literal["method", "deployment"]

METHOD_NAMES: frozenset[str] = frozenset(MethodConfig.model_fields)
"""The method's parameters."""
DEPLOYMENT_NAMES: frozenset[str] = frozenset(DeploymentSettings.model_fields)
"""The deployment settings."""


def kind_of(name: str) -> Kind | None:
    """``"method"`` or ``"deployment"`` for a setting a run may not give, else ``None``."""
    if name in DEPLOYMENT_NAMES:
        return "deployment"
    if name in METHOD_NAMES:
        return "method"
    return None


def deployment_error(names: list[str]) -> InvalidSettingError:
    """The error for a run that sets deployment settings (sorted ``names``)."""
    envs = ", ".join(env_name(name) for name in names)
    if len(names) == 1:
        return InvalidSettingError(
            f"setting {names[0]} is a deployment setting: the server's operator sets it "
            f"(environment variable {envs}); a run may not"
        )
    return InvalidSettingError(
        f"settings {', '.join(names)} are deployment settings: the server's operator sets them "
        f"(environment variables {envs}); a run may not"
    )


def method_error(names: list[str]) -> InvalidSettingError:
    """The error for a run that sets parameters of the method (sorted ``names``)."""
    listed = ", ".join(names)
    subject = (
        f"setting {listed} is a parameter"
        if len(names) == 1
        else f"settings {listed} are parameters"
    )
    return InvalidSettingError(
        f"{subject} of the method: set where the graph is built "
        "(build_graph(..., method=MethodConfig(...)), crag --set, or the operator's "
        f"environment: {', '.join(env_name(name) for name in names)}); a run may not"
    )


def other_kind_error(given: Iterable[str]) -> InvalidSettingError | None:
    """The error for the names in ``given`` a run may not set (deployment first), or ``None``."""
    names = sorted(set(given))
    deployment = [name for name in names if kind_of(name) == "deployment"]
    if deployment:
        return deployment_error(deployment)
    method = [name for name in names if kind_of(name) == "method"]
    return method_error(method) if method else None


class PerRunSettings(Settings):
    """Base of the per-run settings: a method parameter or a deployment setting is refused by name.

    A known setting of another kind gets an error saying who sets it, not "unknown setting".
    """

    @classmethod
    def check_names(cls, given: Iterable[str]) -> None:
        """Refuse another kind's settings by name, then any unknown name."""
        error = other_kind_error(set(given) - cls.setting_names())
        if error is not None:
            raise error
        super().check_names(given)
