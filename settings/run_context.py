"""The context schemas of the served graphs: the per-run settings, with their bounds shown.

How langgraph-api turns a run's ``context`` into the object the nodes see: it keeps only the
keys that are properties of the graph's context JSON schema (the others are dropped silently;
so :mod:`crag.app.web.http` refuses a method parameter or a deployment setting by name before it
gets there), a ``config.configurable`` sent instead of ``context`` is copied into it first, and
LangGraph then calls the schema's constructor with what is left (``schema(**context)``).

The schemas here are :class:`~crag.settings.context.Context` and
:class:`~crag.settings.context.IngestContext` (pydantic models: Studio shows each setting's bounds
as the JSON schema's minimum and maximum) and, for the question graphs, a served run's
``scope_folder`` checked to be absolute (a relative one would be resolved in the server's working
directory).
"""

from __future__ import annotations

from crag.settings.context import Context, IngestContext
from crag.settings.scope_settings import check_served_folder
from crag.settings.setting_checks import InvalidSettingError


class RunContext(Context):
    """The context schema of the served question graphs (``crag``, ``rag``, ``crag-tutorial``).

    A :class:`~crag.settings.context.Context` whose ``scope_folder`` must be absolute or a name of
    the server's (``shared:docs``): the server cannot know which directory a relative one is
    relative to.
    """

    def check_together(self) -> None:
        """A served run's scope folder first, then the per-run checks."""
        try:
            check_served_folder(self.scope_folder, "setting scope_folder")
        except ValueError as exc:
            raise InvalidSettingError(str(exc)) from None
        super().check_together()


class RunIngestContext(IngestContext):
    """The context schema of the served ingestion graph (``ingest``): an ``IngestContext``."""


QUESTION_SCHEMA: type[Context] = RunContext
""":class:`RunContext`, as the question graphs are typed: their runs read a ``Context``."""

INGEST_SCHEMA: type[IngestContext] = RunIngestContext
""":class:`RunIngestContext`, as the ingestion graph is typed: its runs read ``IngestContext``."""
