"""A model folder's chat template compiled as transformers compiles it, without transformers.

``apply_chat_template`` renders the template in jinja2's immutable sandbox with
``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols`` extension, a ``tojson`` filter
that leaves HTML characters alone, and the globals ``raise_exception``, ``strftime_now``,
``dict`` and ``namespace`` (one that refuses underscore-prefixed attributes, so a template
cannot reach Python's internals through it); transformers 5.23's
``utils/chat_template_utils._cached_compile_jinja_template``. This module builds the same
environment. A template that uses transformers' own ``{% generation %}`` tag (it marks the
assistant's tokens for training) is not compiled here: :func:`compile_chat_template` returns
None and the caller uses transformers.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

_GENERATION_TAG = re.compile(r"\{%[-+]?\s*(end)?generation\b")


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _TemplateDict:
    """``dict(...)`` and ``dict.fromkeys(...)`` for templates, without the type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """jinja2's ``namespace`` refusing names that start with an underscore."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        self, rest = args[0], args[1:]
        attributes = dict(*rest, **kwargs)
        for name in attributes:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attributes)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                "Chat templates cannot store underscore-prefixed attributes on a namespace, "
                f"but got {name!r}."
            )


@lru_cache(maxsize=8)
def compile_chat_template(source: str) -> jinja2.Template | None:
    """``source`` compiled in transformers' sandbox.

    None for a template of transformers' ``{% generation %}`` tag, or one jinja2 cannot
    compile here (transformers compiles it at the first prompt and says what is wrong then).
    """
    if _GENERATION_TAG.search(source):
        return None
    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    environment.globals["dict"] = _TemplateDict()
    environment.globals["namespace"] = _TemplateNamespace
    try:
        return environment.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError:
        return None
