"""Write docs/configuration.md from the settings' declarations, or check that it is current.

The settings are the fields of :class:`crag.core.context.Context` (the question graphs) and
:class:`crag.core.context.IngestContext` (the ingestion graph). Each field carries its
description in ``metadata["description"]``; a deployment setting is marked
``metadata["deployment"]`` and names its environment variable in ``metadata["env"]`` (its
default is read from that variable, so the documented default is the one with the variable
unset). Bounds come from the classes' ``MINIMUMS`` and ``MAXIMUMS``. The page gets one table
per kind and graph: the per-run settings a caller may set (also in a served run's
``context``), and the deployment settings the operator sets.

Usage: .venv/bin/python scripts/settings_doc.py [--check]
    --check   write nothing; exit 1 when docs/configuration.md is not what this script writes
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import types
from collections.abc import Iterator, Sequence
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from crag.core.context import Context, IngestContext
from crag.core.setting_checks import ENV_PREFIX, Settings, env_name

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "configuration.md"

PREAMBLE = """\
# Configuration

<!-- Written by scripts/settings_doc.py from the settings' declarations in core/context.py;
do not edit by hand: run `.venv/bin/python scripts/settings_doc.py` (make test checks it). -->

Every setting of a run lives in one context schema, `crag.core.context.Context` (the question
graphs `crag`, `rag` and `crag-tutorial`); the served `ingest` graph has its own,
`IngestContext`. Settings are of two kinds:

- **Per-run settings** (retrieval, thresholds, strips, web results, ablations, answer length)
  may be set by whoever starts a run: `--set KEY=VALUE` on the command line (`crag ask`,
  `crag ingest`, `crag-bench eval`), `Context(...)` or a mapping as `context=` from Python,
  and a served run's `context`.
- **Deployment settings** say where things are and what may be reached or loaded: the store,
  the models, the search endpoint, the address allow-list, the bundled corpus, the reading and
  input limits. Only the operator sets them: the environment variable `CRAG_<NAME>` (in `.env`
  for the server, see `.env.example`), which is also their default for the CLI and Python, or
  `--set` and `Context(...)`, which the operator runs. A served run that gives one fails with
  `InvalidSettingError` naming its variable (`crag.core.run_context`).

Every setting is checked when the context is built, from the CLI, Python or a served run's
JSON: an unknown name, a wrong type, a value out of bounds or reversed thresholds are an
`InvalidSettingError` (a `ValueError`) naming the setting in one line, before the store is
opened (`setting top_k must be an integer, not 'ten' (str)`; `environment variable
CRAG_CHROMA_PORT must be an integer, not 'eighty'`). Thresholds and scores lie in [-1, 1].
Three more environment variables are not settings of a run: `CRAG_THREADS_DB` (where the CLI's
and the Python API's threads are kept, [python.md](python.md)), `CRAG_SERVE_SOCKET` (the socket
of `crag serve`, [cli.md](cli.md)) and `CRAG_CACHE_DIR` (converted models, default
`~/.cache/crag`). More on the settings: [retrieval](retrieval.md), [the evaluator](evaluator.md),
[web search](websearch.md), [the server](server.md).
"""

SECTIONS: tuple[tuple[type[Settings], str], ...] = (
    (Context, "The question graphs (`Context`)"),
    (IngestContext, "The ingestion graph (`IngestContext`)"),
)


@contextlib.contextmanager
def _without_crag_environment() -> Iterator[None]:
    """The process environment without its ``CRAG_*`` variables, restored on the way out."""
    saved = {name: value for name, value in os.environ.items() if name.startswith(ENV_PREFIX)}
    for name in saved:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(saved)


def default_of(spec: Field[Any]) -> Any:
    """The field's default as declared (a deployment setting's with its variable unset)."""
    if spec.default_factory is not MISSING:
        with _without_crag_environment():
            return spec.default_factory()
    return spec.default


def shown_value(value: Any) -> str:
    """A default as the page shows it: JSON-like words in backticks, ``unset`` for ``None``."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    if isinstance(value, list):
        return f"`{value!r}`".replace("'", '"')
    return f"`{value}`"


def _number(value: float) -> str:
    return f"{value:g}"


def _bounds(cls: type[Settings], name: str) -> str:
    low, high = cls.MINIMUMS.get(name), cls.MAXIMUMS.get(name)
    if low is not None and high is not None:
        return f" in [{_number(low)}, {_number(high)}]"
    if low is not None:
        return f" ≥ {_number(low)}"
    if high is not None:
        return f" ≤ {_number(high)}"
    return ""


def _without_none(hint: Any) -> Any:
    """``X`` for ``X | None``; any other type unchanged."""
    if get_origin(hint) in (Union, types.UnionType):
        rest = [arg for arg in get_args(hint) if arg is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return hint


def values_of(cls: type[Settings], name: str) -> str:
    """What the setting takes: its choices, or its type with its bounds."""
    hint = _without_none(cls.declared_types()[name])
    if get_origin(hint) is Literal:
        return " \\| ".join(f"`{choice}`" if choice else '`""`' for choice in get_args(hint))
    if hint is bool:
        return "true / false"
    if hint is int:
        return "integer" + _bounds(cls, name)
    if hint is float:
        return "number" + _bounds(cls, name)
    if get_origin(hint) is list:
        return "list of text (comma-separated on the command line)"
    return "text"


def _cell(text: str) -> str:
    """Text for a table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def per_run_table(cls: type[Settings]) -> list[str]:
    """The per-run settings of ``cls``: one row each, in declaration order."""
    lines = ["| setting | default | values | meaning |", "|---|---|---|---|"]
    for spec in fields(cls):  # type: ignore[arg-type]
        if spec.metadata.get("deployment"):
            continue
        lines.append(
            f"| `{spec.name}` | {shown_value(default_of(spec))} | {values_of(cls, spec.name)} "
            f"| {_cell(spec.metadata.get('description', ''))} |"
        )
    return lines


def deployment_table(cls: type[Settings]) -> list[str]:
    """The deployment settings of ``cls`` with their environment variables."""
    lines = [
        "| setting | environment variable | default | values | meaning |",
        "|---|---|---|---|---|",
    ]
    for spec in fields(cls):  # type: ignore[arg-type]
        if not spec.metadata.get("deployment"):
            continue
        lines.append(
            f"| `{spec.name}` | `{spec.metadata['env']}` | {shown_value(default_of(spec))} "
            f"| {values_of(cls, spec.name)} | {_cell(spec.metadata.get('description', ''))} |"
        )
    return lines


ENDPOINT_PREAMBLE = """\
Read from the environment only (never per run, nor from `crag ask --set`): where the
operator's OpenAI-compatible model server is, for the generator spec `endpoint` (or
`endpoint:MODEL`), which any LLM role may use (`generator`, `rewriter`, `contextualizer`,
`evaluator_model`). Python callers may pass them where the components are built instead
(`DefaultComponents(endpoint=EndpointConfig(...))`). See [models.md](models.md)."""


def endpoint_table() -> list[str]:
    """The deployment settings of the model server (``llm_*``: in no settings class)."""
    from crag.core.deployment import DeploymentSettings

    lines = [
        "| setting | environment variable | default | meaning |",
        "|---|---|---|---|",
    ]
    for name, info in DeploymentSettings.model_fields.items():
        if not name.startswith("llm_"):
            continue
        default = info.default
        shown = '`""`' if name == "llm_api_key" else shown_value(default)
        lines.append(
            f"| `{name}` | `{env_name(name)}` | {shown} | {_cell(info.description or '')} |"
        )
    return lines


def render() -> str:
    """The whole page."""
    parts = [PREAMBLE]
    for cls, title in SECTIONS:
        parts += [f"## {title}", "", "### Per-run settings", ""]
        parts += [*per_run_table(cls), ""]
        parts += ["### Deployment settings", ""]
        parts += [*deployment_table(cls), ""]
    parts += ["## Your model server", "", ENDPOINT_PREAMBLE, "", *endpoint_table(), ""]
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
