"""Write docs/configuration.md from the settings' declarations, or check that it is current.

Settings are of three kinds, each declared once as a pydantic field with its type, default,
``ge``/``le`` bounds and description: the per-run settings (:class:`crag.settings.context.Context`
for the question graphs, :class:`crag.settings.context.IngestContext` for the ingestion graph), the
method's parameters (:class:`crag.settings.method.MethodConfig`) and the deployment settings
(:class:`crag.settings.deployment.DeploymentSettings`, grouped by who reads them: one part class
per group).
The page gets one section per kind, kept apart, each setting in a table with its type, default
(the declared one: never the environment's), bounds and description, and for the method and the
deployment its ``CRAG_<NAME>`` environment variable.

Usage: .venv/bin/python scripts/settings_doc.py [--check]
    --check   write nothing; exit 1 when docs/configuration.md is not what this script writes
"""

from __future__ import annotations

import argparse
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from crag.settings.context import Context, IngestContext
from crag.settings.deployment import (
    IngestDeployment,
    ModelServerDeployment,
    QuestionDeployment,
    ServerDeployment,
    StoreDeployment,
)
from crag.settings.method import MethodConfig
from crag.settings.setting_checks import env_name

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "configuration.md"

PREAMBLE = """\
# Configuration

<!-- Written by scripts/settings_doc.py from the settings' declarations in settings/context.py,
settings/method.py and settings/deployment.py; do not edit by hand: run
`.venv/bin/python scripts/settings_doc.py` (make test checks it). -->

crag's settings are of three kinds, kept apart. Which one you want depends on who sets it and
for how long it holds:

- **[Per-run settings](#per-run-settings)**: what one run chooses (how many passages, where to
  look, whether to search the web, the answer's length; how the ingestion graph chunks). Whoever
  starts a run sets them: `Context(...)` in Python, `--set` on the command line, a served run's
  `context` (what LangGraph Studio shows).
- **[The method's parameters](#the-methods-parameters)**: how CRAG decides and refines (the
  action thresholds, the strips, the web branch, the ablations). Fixed for a graph where it is
  built: `MethodConfig(...)` in Python, `--set` on the command line, the operator's
  `CRAG_<NAME>` variables for the served graphs. A served run may not change them.
- **[Deployment settings](#deployment-settings)**: where things are and what may be reached or
  loaded (the store, the models, the search endpoint, the address allow-list, the limits). The
  operator's: `CRAG_<NAME>` or `.env`; `deployment_with(...)` in Python, `--set` on the command
  line. Never in a run's context.

Every setting is checked where it is given (the CLI, Python, the environment or a served run's
JSON): an unknown name, a wrong type, a value out of bounds, reversed thresholds, or a setting
of another kind given as a per-run one are an `InvalidSettingError` (a `ValueError`) naming the
setting in one line, before the store is opened (`setting top_k must be an integer, not 'ten'
(str)`; `environment variable CRAG_CHROMA_PORT must be an integer, not 'eighty'`; `setting
store_path is a deployment setting: the server's operator sets it (environment variable
CRAG_STORE_PATH); a run may not`). Thresholds and scores lie in [-1, 1]. Three more
environment variables are not settings, because `crag ask` reads them before it imports the
settings' library (pydantic), to reach a running `crag serve` within a few milliseconds:
`CRAG_SERVE_SOCKET` (the socket of `crag serve`), `CRAG_SERVE_AUTOSTART` (`0`: `crag ask` and
`crag ingest` start no warm server) and `CRAG_SERVE_IDLE_TIMEOUT` (seconds a server they
started waits for a command, default 900); all three in [cli.md](cli.md).
More on the settings: [retrieval](retrieval.md), [the evaluator](evaluator.md),
[web search](websearch.md), [the server](server.md).
"""

PER_RUN_INTRO = """\
What one run chooses. In Python, the run's `context`: `graph.invoke(input,
context=Context(top_k=5))` or a mapping (`context={"top_k": 5}`), `ask(question,
Context(top_k=5))`; on the command line `--set KEY=VALUE` (`crag ask --set top_k=5`); in a
served run the `context` a caller sends (`{"top_k": 5, "web_search": false}`; the ingest graph's:
`{"chunk_size": 500}`), which is what LangGraph Studio shows for each graph. These are the only
settings a served caller may send. A per-run context that names a method parameter or a
deployment setting is refused with an error naming it and who sets it; the server refuses such
a run with 422 before it starts ([server.md](server.md#what-a-run-may-set)). A served run's
`scope_folder` must be an absolute path or a folder's name (`shared:docs`), and its
`chunk_size` at least the operator's `ingest_min_chunk_size`."""

METHOD_INTRO = """\
How CRAG decides, refines and searches: what Yan et al. (2024) tune and ablate, the same for
every run of a graph, so they are set where the graph is built. In Python:
`build_graph(components, method=MethodConfig(strips_kept=3))` (the baselines,
`persistent_graph` and `ask`/`aask` take `method=` too); on the command line `crag ask --set
strips_kept=3` and `crag-bench eval --set ...`; for the served graphs, the operator's
environment variable `CRAG_<NAME>` (in `.env`, read when a run starts), which is also the
default wherever no method is given (`crag.settings.method.operator_method()`). A served run that
sends one in its `context` is refused with an error naming it. The defaults are calibrated for
the shipped evaluator ([evaluator.md](evaluator.md), [benchmark.md](benchmark.md))."""

DEPLOYMENT_INTRO = """\
Where things are and what may be reached or loaded. The operator's: the environment variable
`CRAG_<NAME>` (in `.env` for the server, see `.env.example`; an empty variable counts as unset),
read by `crag.settings.deployment.deployment_settings()`. In Python, `deployment_with(...)` (the
environment's settings with some changed, checked: `deployment_with(store_path="my-store")`)
passed as `deployment=` to `build_graph`, the baselines, `build_ingest_graph`, `ask`/`aask` and
`persistent_graph`; on the command line `--set KEY=VALUE` (and `--store`, `--collection`).
Never in a run's context: `Context(store_path=...)` and a served run that sends one are refused
by name."""

ENDPOINT_INTRO = """\
Read from the environment only (never per run, nor from `--set`): where the operator's
OpenAI-compatible model server is, for the generator spec `endpoint` (or `endpoint:MODEL`),
which any LLM role may use (`generator`, `rewriter`, `contextualizer`, `evaluator_model`).
Python callers may pass them where the components are built instead
(`DefaultComponents(endpoint=EndpointConfig(...))`). See [models.md](models.md)."""


class Row(NamedTuple):
    """One setting as the page shows it.

    A named tuple: the docs test loads this file as an unregistered module, where a dataclass
    cannot resolve its annotations.
    """

    name: str
    kind: str
    default: str
    bounds: str
    description: str

    def cells(self, with_env: bool) -> str:
        """The row of the table (with the environment variable's column when ``with_env``)."""
        env = f" `{env_name(self.name)}` |" if with_env else ""
        return (
            f"| `{self.name}` |{env} {self.kind} | {self.default} | {self.bounds} "
            f"| {_cell(self.description)} |"
        )


def shown_value(value: Any) -> str:
    """A default as the page shows it: JSON-like words in backticks, ``unset`` for ``None``."""
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    if isinstance(value, list):
        return f"`{value!r}`".replace("'", '"')
    return f"`{value}`"


def _number(value: float) -> str:
    return f"{value:g}"


def shown_bounds(low: float | None, high: float | None) -> str:
    """``[low, high]``, ``≥ low``, ``≤ high``, or nothing."""
    if low is not None and high is not None:
        return f"[{_number(low)}, {_number(high)}]"
    if low is not None:
        return f"≥ {_number(low)}"
    if high is not None:
        return f"≤ {_number(high)}"
    return ""


def _optional_arm(hint: Any) -> Any:
    """``X`` for ``X | None``, else ``None``."""
    if get_origin(hint) in (Union, types.UnionType):
        rest = [arg for arg in get_args(hint) if arg is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return None


def shown_type(hint: Any) -> str:
    """What a setting of type ``hint`` takes: its choices, or its type in words."""
    arm = _optional_arm(hint)
    if arm is not None:
        return shown_type(arm) + " or null (unset)"
    if get_origin(hint) is Literal:
        return " \\| ".join(f"`{choice}`" if choice else '`""`' for choice in get_args(hint))
    words = {bool: "true / false", int: "integer", float: "number", SecretStr: "text (secret)"}
    if get_origin(hint) is list:
        return "list of text (comma-separated on the command line)"
    return words.get(hint, "text")


def _cell(text: str) -> str:
    """Text for a table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _bound(info: FieldInfo, kind: str) -> float | None:
    for constraint in info.metadata:
        value = getattr(constraint, kind, None)
        if value is not None:
            return float(value)
    return None


def rows(part: type[BaseModel]) -> list[Row]:
    """The settings ``part`` declares, in order, each default the declared one (not the env's)."""
    return [
        Row(
            name=name,
            kind=shown_type(info.annotation),
            default=shown_value(info.get_default(call_default_factory=True)),
            bounds=shown_bounds(_bound(info, "ge"), _bound(info, "le")),
            description=info.description or "",
        )
        for name, info in part.model_fields.items()
    ]


def table(rows: list[Row], *, with_env: bool) -> list[str]:
    """A markdown table of ``rows``."""
    env = " environment variable |" if with_env else ""
    rule = "|---|---|---|---|---|" + ("---|" if with_env else "")
    header = f"| setting |{env} type | default | bounds | description |"
    return [header, rule, *(row.cells(with_env) for row in rows), ""]


def deployment_groups() -> list[tuple[str, str, type[BaseModel]]]:
    """The deployment settings by who reads them: (heading, intro, the part that declares them)."""
    return [
        ("The store", "Read by every graph: which store a run reads or writes.", StoreDeployment),
        (
            "The question graphs",
            "The models, the web search and the limits of a question run.",
            QuestionDeployment,
        ),
        (
            "The ingestion graph",
            "What ingestion reads, and what a served run may do.",
            IngestDeployment,
        ),
        ("Other deployment settings", "", ServerDeployment),
        ("Your model server", ENDPOINT_INTRO, ModelServerDeployment),
    ]


def deployment_section() -> list[str]:
    """The deployment settings, one table per group."""
    parts = ["## Deployment settings", "", DEPLOYMENT_INTRO, ""]
    for title, intro, part in deployment_groups():
        parts += [f"### {title}", ""]
        if intro:
            parts += [intro, ""]
        parts += table(rows(part), with_env=True)
    return parts


def render() -> str:
    """The whole page."""
    parts = [PREAMBLE, "## Per-run settings", "", PER_RUN_INTRO, ""]
    parts += ["### The question graphs (`Context`)", ""]
    parts += table(rows(Context), with_env=False)
    parts += ["### The ingestion graph (`IngestContext`)", ""]
    parts += table(rows(IngestContext), with_env=False)
    parts += ["## The method's parameters", "", METHOD_INTRO, ""]
    parts += table(rows(MethodConfig), with_env=True)
    parts += deployment_section()
    return "\n".join(parts).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write the page, or with ``--check`` say whether it is current (0) or not (1)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the page is not current; write nothing"
    )
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print(
                f"{TARGET.relative_to(ROOT)} is not current: run "
                ".venv/bin/python scripts/settings_doc.py",
                file=sys.stderr,
            )
            return 1
        return 0
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
