"""The context schemas of the served graphs: the per-run settings, with their bounds shown.

How langgraph-api turns a run's ``context`` into the object the nodes see: it keeps only the
keys that are properties of the graph's context JSON schema (the others are dropped silently;
so :mod:`crag.app.web.http` refuses a method parameter or a deployment setting by name before it
gets there), a ``config.configurable`` sent instead of ``context`` is copied into it first, and
LangGraph then calls the schema's constructor with what is left (``schema(**context)``).

The schemas here are :class:`~crag.core.context.Context` and
:class:`~crag.core.context.IngestContext` (each setting's bounds are in its metadata, which Studio
shows as the JSON schema's minimum and maximum) and, for the question graphs, a served
run's ``scope_folder`` checked to be absolute (a relative one would be resolved in the server's
working directory).
"""

from __future__ import annotations

import functools
from dataclasses import fields, make_dataclass
from typing import Any, TypeVar, cast, get_type_hints

from crag.core.context import Context, IngestContext
from crag.core.scope_settings import check_served_folder
from crag.core.setting_checks import InvalidSettingError, Settings, check_known
from crag.core.setting_kinds import other_kind_error

S = TypeVar("S", bound=Settings)


def served_schema(base: type[S], name: str) -> type[S]:
    """A subclass of ``base`` that checks a served run's scope folder."""
    hints = get_type_hints(base)

    def __post_init__(self: S) -> None:
        folder = getattr(self, "scope_folder", None)  # the question graphs' scope
        if isinstance(folder, str):
            try:
                check_served_folder(folder, "setting scope_folder")
            except ValueError as exc:
                raise InvalidSettingError(str(exc)) from None
        self.check()

    def declared_types(cls: type[S]) -> dict[str, Any]:
        return {spec.name: hints[spec.name] for spec in fields(base)}  # type: ignore[arg-type]

    schema = make_dataclass(
        name,
        [],  # the base's fields, their bounds in their metadata
        bases=(base,),
        kw_only=True,
        namespace={
            "__post_init__": __post_init__,
            "declared_types": classmethod(declared_types),
            "__doc__": base.__doc__,
        },
    )
    generated = vars(schema)["__init__"]

    @functools.wraps(generated)
    def __init__(self: S, **values: Any) -> None:
        _check_names(base, values)
        generated(self, **values)

    schema.__init__ = __init__  # type: ignore[misc]
    schema.__module__ = __name__
    return cast("type[S]", schema)


def _check_names(base: type[Settings], values: dict[str, Any]) -> None:
    """The base's checks of the names: another kind's setting, then an unknown one."""
    error = other_kind_error(set(values) - base.setting_names())
    if error is not None:
        raise error
    check_known(values, base.setting_names())


RunContext = served_schema(Context, "RunContext")
"""The context schema of the served question graphs (``crag``, ``rag``, ``crag-tutorial``)."""

RunIngestContext = served_schema(IngestContext, "RunIngestContext")
"""The context schema of the served ingestion graph (``ingest``)."""
