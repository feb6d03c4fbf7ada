"""Build a :class:`~graph.context.Context` from command-line ``KEY=VALUE`` pairs."""

from __future__ import annotations

import dataclasses
from typing import Any, get_type_hints

from graph.context import Context

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _convert(name: str, raw: str, annotation: Any) -> Any:
    text = str(annotation)
    if annotation is bool or text == "bool":
        lowered = raw.strip().lower()
        if lowered in _TRUE | _FALSE:
            return lowered in _TRUE
        raise ValueError(f"setting {name} takes true or false, not {raw!r}")
    try:
        if annotation is int or text == "int":
            return int(raw)
        if annotation is float or text == "float":
            return float(raw)
    except ValueError:
        raise ValueError(f"setting {name} takes a number, not {raw!r}") from None
    return raw


def parse_settings(pairs: list[str], base: dict[str, Any] | None = None) -> Context:
    """Parse ``KEY=VALUE`` strings into a context, on top of ``base`` values.

    Raises:
        ValueError: a pair without ``=``, an unknown setting (the message lists valid ones), or
            a value of the wrong type.
    """
    hints = get_type_hints(Context)
    names = {f.name for f in dataclasses.fields(Context)}
    values: dict[str, Any] = dict(base or {})
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise ValueError(f"--set takes KEY=VALUE, got {pair!r}")
        if key not in names:
            raise ValueError(f"unknown setting {key!r}; valid: {', '.join(sorted(names))}")
        values[key] = _convert(key, raw, hints[key])
    return Context.from_mapping(values)
