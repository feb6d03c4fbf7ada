"""Build a :class:`~crag.core.context.Context` from command-line ``KEY=VALUE`` pairs."""

from __future__ import annotations

from typing import Any

from crag.core.context import Context
from crag.core.setting_checks import InvalidSettingError, check_known, parse_text


def parse_settings(pairs: list[str], base: dict[str, Any] | None = None) -> Context:
    """Parse ``KEY=VALUE`` strings into a context, on top of ``base`` values.

    Every setting may be given, deployment settings included: the CLI is run by the operator.

    Raises:
        InvalidSettingError: a pair without ``=``, an unknown setting (the message lists valid
            ones), or a value of the wrong type.
    """
    hints = Context.declared_types()
    names = Context.setting_names()
    values: dict[str, Any] = dict(base or {})
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise InvalidSettingError(f"--set takes KEY=VALUE, got {pair!r}")
        check_known([key], names)
        values[key] = parse_text(raw, hints[key], f"setting {key}")
    return Context.from_mapping(values)
