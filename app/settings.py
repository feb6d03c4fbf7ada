"""Build a :class:`~crag.core.context.Context` from command-line ``KEY=VALUE`` pairs."""

from __future__ import annotations

import os
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


MODEL_PREFIXES = ("local:", "gguf:")
"""Generator specs that name a folder or file on disk."""


def _absolute(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))


def _absolute_spec(spec: str) -> str:
    for prefix in MODEL_PREFIXES:
        if spec.startswith(prefix) and not os.path.isabs(os.path.expanduser(spec[len(prefix) :])):
            return prefix + _absolute(spec[len(prefix) :])
    return spec


def with_absolute_model_paths(context: Context) -> Context:
    """``context`` with every model named by a relative path made absolute (the CLI's cwd).

    The models are cached per process by their setting: a warm server (``crag serve``) runs
    each client's command in the client's directory, so ``local:models/m`` or an
    ``evaluator_model``/``embedder`` folder ``models/m`` would otherwise load the first
    client's folder for every later one. A name that is no folder here (``smollm2``, a Hub name,
    ``endpoint:MODEL``) is kept as it is.
    """
    changes: dict[str, str] = {}
    for role in ("generator", "rewriter", "contextualizer"):
        spec = getattr(context, role)
        if _absolute_spec(spec) != spec:
            changes[role] = _absolute_spec(spec)
    for name in ("evaluator_model", "embedder"):
        value = getattr(context, name)
        if value and not os.path.isabs(value) and os.path.exists(value):
            changes[name] = _absolute(value)
    return context.replaced(**changes) if changes else context
