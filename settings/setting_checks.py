"""The base of the per-run and method settings, and the checks every kind of setting shares.

Every setting is declared one way: a pydantic field with its type, default, bounds and
description, on a :class:`Settings` model (the per-run settings, the method's parameters) or on
pydantic-settings' ``BaseSettings`` (the deployment settings, :mod:`crag.settings.deployment`), and
every environment variable is read by pydantic-settings. LangGraph builds a run's context from
the JSON a caller sends (``schema(**context)``) without checking it, so a :class:`Settings`
model checks every value when it is built: a wrong type (``top_k: "ten"``), a value out of range
or an unknown name is an :class:`InvalidSettingError` naming the setting (:func:`setting_error`
turns what pydantic found into that one line), never an unrelated error deep inside a node.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, ClassVar, Self, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    model_validator,
)

ENV_PREFIX = "CRAG_"
"""Every setting the operator sets is read from ``CRAG_<NAME>`` (``top_k``: ``CRAG_TOP_K``)."""

_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


class InvalidSettingError(ValueError):
    """A setting is unknown, has the wrong type, a value out of range, or may not be set here."""


GENERATOR_FORMS = (
    "'smollm2', 'endpoint' or 'endpoint:MODEL' (the model server at CRAG_LLM_BASE_URL), "
    "'local:/path/to/hf-model', 'gguf:/path/model.gguf' or 'provider:model' "
    "(e.g. 'openai:gpt-4o-mini')"
)

ENDPOINT_SPEC = "endpoint"
"""The generator spec of the operator's model server (``endpoint`` or ``endpoint:MODEL``)."""
"""The forms a generator spec takes (:func:`crag.generator.factory.load_chat_model`)."""

_LOCAL_PREFIXES = ("local:", "gguf:")


def _known_chat_providers() -> frozenset[str] | None:
    """The providers LangChain's ``init_chat_model`` knows by name; ``None`` if it cannot say.

    Read from LangChain (its table is private, so a version without it skips the check):
    a ``provider:model`` spec whose provider is not in it fails in ``init_chat_model``.
    """
    try:
        from langchain.chat_models import base
    except ImportError:  # pragma: no cover - langchain is a dependency
        return None
    providers = getattr(base, "_BUILTIN_PROVIDERS", None)
    return frozenset(providers) if isinstance(providers, Mapping | frozenset | set) else None


def generator_spec_problem(spec: str) -> str | None:
    """What is wrong with the form of generator ``spec``, or ``None`` when it is well formed.

    Only the form is checked (and a provider's name against LangChain's list): whether a local
    path holds a model or a remote provider answers is known only when the model is loaded.
    """
    spec = spec.strip()
    if spec in ("", "smollm2", ENDPOINT_SPEC):
        return None
    if spec.startswith(ENDPOINT_SPEC + ":"):
        has_model = spec.removeprefix(ENDPOINT_SPEC + ":").strip()
        return None if has_model else f"must give a model name after '{ENDPOINT_SPEC}:'"
    prefix = next((p for p in _LOCAL_PREFIXES if spec.startswith(p)), None)
    if prefix is not None:
        return None if spec.removeprefix(prefix).strip() else f"must give a path after {prefix!r}"
    provider, colon, model = spec.partition(":")
    if not colon or not provider.strip() or not model.strip():
        return f"must be {GENERATOR_FORMS}"
    known = _known_chat_providers()
    if known is not None and provider not in known:
        listed = ", ".join(sorted(known))
        return f"names the unknown provider {provider!r}; known providers: {listed}"
    return None


def check_generator_spec(setting: str, spec: str) -> None:
    """Raise :class:`InvalidSettingError` naming ``setting`` if ``spec`` is not a generator spec."""
    problem = generator_spec_problem(spec)
    if problem is not None:
        raise InvalidSettingError(f"setting {setting} {problem}, not {spec!r}")


def env_name(setting: str) -> str:
    """The environment variable of a deployment setting: ``CRAG_`` and its name in capitals."""
    return ENV_PREFIX + setting.upper()


def optional_arm(declared: Any) -> Any:
    """``T`` for a setting declared ``T | None``, else ``None``.

    ``None`` as a setting's value means "not set: follow another setting" (the action
    thresholds follow the evaluator), never "off".
    """
    if get_origin(declared) is types.UnionType:
        arms = [arm for arm in get_args(declared) if arm is not type(None)]
        if len(arms) == 1:
            return arms[0]
    return None


def _text_type(declared: Any) -> type:
    """The type a setting declared as ``declared`` is read as from text (a ``Literal``: str)."""
    declared = optional_arm(declared) or declared
    if get_origin(declared) is not None:
        return type(get_args(declared)[0])
    return declared if isinstance(declared, type) else str


def parse_text(raw: str, declared: Any, what: str) -> Any:
    """A command-line value (``--set KEY=VALUE``) as a value of a setting's declared type.

    Read as pydantic-settings reads an environment variable (pydantic's lax mode: ``true``,
    ``yes``, ``on`` or ``1`` is true); a list is comma-separated. Choices and bounds are left to
    the settings' own check.

    Raises:
        InvalidSettingError: the text is not a value of that type; the message starts with
            ``what``.
    """
    if get_origin(declared) is list:
        return raw.split(",")  # checked and cleaned by the settings (string_list)
    kind = _text_type(declared)
    if kind not in (bool, int, float):
        return raw
    try:
        return TypeAdapter(kind).validate_python(raw.strip(), strict=False)
    except ValidationError:
        raise InvalidSettingError(f"{what} must be {_TYPE_WORDS[kind]}, not {raw!r}") from None


def check_known(given: Iterable[str], known: Iterable[str]) -> None:
    """Raise :class:`InvalidSettingError` if a name in ``given`` is not in ``known``.

    The message lists the unknown names and every valid one, e.g. ``unknown setting 'bogus';
    valid: collection, top_k``.
    """
    valid = set(known)
    unknown = sorted(set(given) - valid, key=str)
    if unknown:
        names = ", ".join(repr(name) for name in unknown)
        plural = "s" if len(unknown) > 1 else ""
        raise InvalidSettingError(
            f"unknown setting{plural} {names}; valid: {', '.join(sorted(valid))}"
        )


def string_list(value: Any, info: ValidationInfo) -> list[str]:
    """A list setting's value: its strings stripped, blanks and repeats dropped, order kept.

    A run sends a JSON list (``["pdf", "docx"]``); text (the CLI's ``--set``, or a caller that
    sends one string) is split on commas: ``"pdf, docx"`` is the same list.

    Raises:
        InvalidSettingError: neither a string nor a list of strings.
    """
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise InvalidSettingError(
            f"setting {info.field_name} must be a list of strings (or one comma-separated "
            f"string), not {value!r} ({type(value).__name__})"
        )
    return list(dict.fromkeys(item.strip() for item in items if item.strip()))


_WANTED = {
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "finite_number": "a finite number",
}
"""What a setting must be, by the kind of error pydantic found in its value."""


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _choices(model: type[BaseModel], name: str) -> str:
    declared = model.model_fields[name].annotation
    return ", ".join(repr(choice) for choice in get_args(optional_arm(declared) or declared))


def setting_error(
    error: ValidationError, model: type[BaseModel], subject: Callable[[str], str] | None = None
) -> InvalidSettingError:
    """One line for the first bad value pydantic found in ``model``'s settings.

    It names the setting (``subject`` of its name: ``setting top_k`` by default, or its
    environment variable), what it must be and what it was; for a value of the wrong type, its
    type too.
    """
    first = error.errors()[0]
    name = str(first["loc"][0]) if first["loc"] else "?"
    kind, context, given = first["type"], first.get("ctx", {}), first["input"]
    if kind == "value_error":  # a validator's own message (a list setting's)
        return InvalidSettingError(str(context["error"]))
    shown = repr(given)
    if kind == "greater_than_equal":
        wanted = f"at least {_bound(context['ge'])}"
    elif kind == "less_than_equal":
        wanted = f"at most {_bound(context['le'])}"
    elif kind == "literal_error":
        wanted = f"one of {_choices(model, name)}"
    else:
        wanted = _WANTED.get(kind) or first["msg"].removeprefix("Input should be ")
        if kind.endswith("_type") or kind == "is_instance_of":  # say which type it was
            shown += f" ({type(given).__name__})"
    where = subject(name) if subject else f"setting {name}"
    return InvalidSettingError(f"{where} must be {wanted}, not {shown}")


StringList = Annotated[list[str], BeforeValidator(string_list)]
"""A list setting: a JSON list of strings, or one comma-separated string (:func:`string_list`)."""


class Settings(BaseModel):
    """Base of the per-run and method settings: every value is checked when an instance is built.

    Strict, as a caller's JSON is: ``"10"`` is not an integer, nor ``true`` a number; an integer
    is a number. Names are checked first (:meth:`check_names`: the unknown ones and every valid
    one), the checks across settings last (:meth:`check_together`); each mistake is one
    :class:`InvalidSettingError`.
    """

    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="forbid")

    subject: ClassVar[Callable[[str], str] | None] = None
    """How an error names a setting (default: ``setting NAME``)."""

    def __init__(self, *args: Any, **values: Any) -> None:
        if args:
            plural = "s" if len(args) > 1 else ""
            raise InvalidSettingError(
                f"{type(self).__name__} takes settings as keywords (name=value), not "
                f"{len(args)} positional value{plural}"
            )
        type(self).check_names(values)
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise setting_error(error, type(self), type(self).subject) from None

    @model_validator(mode="after")
    def _checked_together(self) -> Self:
        self.check_together()
        return self

    @classmethod
    def check_names(cls, given: Iterable[str]) -> None:
        """Refuse a name that is not one of these settings (the message lists the valid ones)."""
        check_known(given, cls.model_fields)

    def check_together(self) -> None:
        """Checks across settings (e.g. threshold order); none by default."""

    def values(self) -> dict[str, Any]:
        """Every setting's value by name (a part such as ``deployment`` as it is)."""
        return {name: getattr(self, name) for name in type(self).model_fields}

    def replaced(self, **changes: Any) -> Self:
        """These settings with ``changes`` applied, checked anew."""
        return type(self)(**{**self.values(), **changes})

    @classmethod
    def declared_types(cls) -> dict[str, Any]:
        """The type every setting is checked against (its annotation)."""
        return {name: info.annotation for name, info in cls.model_fields.items()}

    @classmethod
    def setting_names(cls) -> set[str]:
        """The names of every setting."""
        return set(cls.model_fields)

    @classmethod
    def bounds(cls) -> dict[str, tuple[float | None, float | None]]:
        """Each bounded setting's (lowest, highest) allowed value, ``None`` where unbounded."""
        found: dict[str, tuple[float | None, float | None]] = {}
        for name, info in cls.model_fields.items():
            low = next((float(m.ge) for m in info.metadata if hasattr(m, "ge")), None)
            high = next((float(m.le) for m in info.metadata if hasattr(m, "le")), None)
            if low is not None or high is not None:
                found[name] = (low, high)
        return found

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> Self:
        """Build the settings from a plain mapping (every setting allowed), rejecting typos.

        Raises:
            InvalidSettingError: an unknown name (the message lists the valid ones), a wrong
                type or a value out of range.
        """
        return cls(**dict(values or {}))
