"""The context schemas of the served graphs: a run may set per-run settings only.

How langgraph-api (0.16) turns a run's ``context`` into the object the nodes see: it keeps only
the keys that are properties of the graph's context JSON schema (the others are dropped
silently), a ``config.configurable`` sent instead of ``context`` is copied into it first, and
LangGraph then calls the schema's constructor with what is left (``schema(**context)``); a
context that is not a dict is passed on unchanged.

So the served schemas below keep every setting as a property (a deployment setting left out
would be dropped without a word) but redeclare each deployment setting as optional with
``None`` ("not given") as its default. Their constructor refuses a deployment setting that is
given, with an :class:`~crag.core.setting_checks.InvalidSettingError` naming it and its environment
variable, and an unknown name; it then takes every deployment setting from the settings class's
own defaults (the operator's ``CRAG_<NAME>`` environment variables) and checks the whole as
usual. The result *is* a :class:`~crag.core.context.Context` (or
:class:`~crag.core.context.IngestContext`): the nodes use it as they use one built in Python.

Studio shows the schema: per-run settings with their defaults, bounds and descriptions;
deployment settings read-only, their description naming the environment variable.
"""

from __future__ import annotations

import functools
from dataclasses import MISSING, Field, field, fields, make_dataclass
from typing import Any, TypeVar, cast, get_type_hints

from crag.core.context import Context, IngestContext
from crag.core.scope_settings import check_served_folder
from crag.core.setting_checks import InvalidSettingError, Settings, check_known, env_name

S = TypeVar("S", bound=Settings)


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


def _operator_value(spec: Field[Any]) -> Any:
    """A deployment setting's value when no one gives it: its (environment) default."""
    if spec.default_factory is not MISSING:
        return spec.default_factory()
    return spec.default


def _per_run_field(base: type[Settings], spec: Field[Any]) -> Any:
    """The same field, its bounds added to the metadata (JSON schema minimum/maximum)."""
    metadata = dict(spec.metadata)
    if spec.name in base.MINIMUMS:
        metadata["ge"] = base.MINIMUMS[spec.name]
    if spec.name in base.MAXIMUMS:
        metadata["le"] = base.MAXIMUMS[spec.name]
    if spec.default_factory is not MISSING:
        return field(default_factory=spec.default_factory, metadata=metadata)
    return field(default=spec.default, metadata=metadata)


def _deployment_field(spec: Field[Any]) -> Any:
    description = (
        f"{spec.metadata.get('description', '')} Deployment setting: the server's operator "
        f"sets it (environment variable {spec.metadata['env']}); a run may not."
    ).strip()
    return field(
        default=None,
        metadata={"description": description, "json_schema_extra": {"readOnly": True}},
    )


def served_schema(base: type[S], name: str) -> type[S]:
    """A subclass of ``base`` whose constructor takes per-run settings only (see the module)."""
    hints = get_type_hints(base)
    deployment = base.deployment_names()
    specs: list[tuple[str, Any, Any]] = []
    for spec in fields(base):  # type: ignore[arg-type]
        if spec.name in deployment:
            specs.append((spec.name, hints[spec.name] | None, _deployment_field(spec)))
        else:
            specs.append((spec.name, hints[spec.name], _per_run_field(base, spec)))
    base_fields = {spec.name: spec for spec in fields(base)}  # type: ignore[arg-type]
    per_run = set(base_fields) - deployment

    def __post_init__(self: S) -> None:
        given = sorted(n for n in deployment if getattr(self, n) is not None)
        if given:
            raise deployment_error(given)
        folder = getattr(self, "scope_folder", None)  # the question graphs' scope
        if isinstance(folder, str):
            try:
                check_served_folder(folder, "setting scope_folder")
            except ValueError as exc:
                raise InvalidSettingError(str(exc)) from None
        for setting in deployment:
            setattr(self, setting, _operator_value(base_fields[setting]))
        self.check()

    def declared_types(cls: type[S]) -> dict[str, Any]:
        return {name: hints[name] for name in base_fields}

    schema = make_dataclass(
        name,
        specs,
        bases=(base,),
        kw_only=True,
        namespace={
            "__post_init__": __post_init__,
            "declared_types": classmethod(declared_types),
            "__doc__": f"The settings a served run may give: {base.__name__} without its "
            "deployment settings (those come from the operator's environment).",
        },
    )
    generated = vars(schema)["__init__"]

    @functools.wraps(generated)
    def __init__(self: S, **values: Any) -> None:
        # Deployment settings are known: __post_init__ names them with a better message.
        check_known(set(values) - deployment, per_run)
        generated(self, **values)

    schema.__init__ = __init__  # type: ignore[misc]
    schema.__module__ = __name__
    return cast("type[S]", schema)


RunContext = served_schema(Context, "RunContext")
"""The context schema of the served question graphs (``crag``, ``rag``, ``crag-tutorial``)."""

RunIngestContext = served_schema(IngestContext, "RunIngestContext")
"""The context schema of the served ingestion graph (``ingest``)."""
