"""Checks shared by the settings: types, ranges, names, environment variables.

LangGraph builds a run's context from the JSON a caller sends without checking types, so every
settings dataclass checks its own values when it is built (``__post_init__``): a wrong type
(``top_k: "ten"``) or a value out of range is an :class:`InvalidSettingError` naming the
setting, never an unrelated error deep inside a node. Every kind is checked one way, by
pydantic: the dataclasses' fields through a model made from their declarations
(:func:`_checker`), the deployment settings by their own model; :func:`setting_error` turns
what pydantic found into that one line.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from typing import Annotated, Any, Self, TypeVar, get_args, get_origin, get_type_hints

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    InstanceOf,
    ValidationError,
    ValidationInfo,
    create_model,
)

ENV_PREFIX = "CRAG_"
"""Every deployment setting is read from ``CRAG_<NAME>`` (``store_path``: ``CRAG_STORE_PATH``)."""

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
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


def check_choice(setting: str, value: str, choices: Iterable[str]) -> str:
    """``value`` stripped and lower-cased if it is one of ``choices``, else a setting error."""
    normal = value.strip().lower()
    listed = tuple(choices)
    if normal not in listed:
        names = ", ".join(repr(choice) for choice in listed)
        raise InvalidSettingError(f"setting {setting} must be one of {names}, not {value!r}")
    return normal


def env_name(setting: str) -> str:
    """The environment variable of a deployment setting: ``CRAG_`` and its name in capitals."""
    return ENV_PREFIX + setting.upper()


def parse_bool(raw: str, what: str) -> bool:
    """``true/false``, ``yes/no``, ``on/off`` or ``1/0`` (any case) as a bool.

    Raises:
        InvalidSettingError: anything else; the message starts with ``what``.
    """
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise InvalidSettingError(f"{what} must be true or false, not {raw!r}")


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
    """Text (a command-line value or an environment variable) as a value of a setting's type.

    One parser for ``--set KEY=VALUE`` and ``CRAG_<NAME>``: ``declared`` is the setting's
    declared type (``bool``, ``int``, ``float``, ``str``, a ``Literal`` of strings, read as
    text, or ``list[str]``, comma-separated); booleans are :func:`parse_bool`'s.

    Raises:
        InvalidSettingError: the text is not a value of that type; the message starts with
            ``what``.
    """
    if get_origin(declared) is list:
        return raw.split(",")  # checked and cleaned by check_value (string_list)
    kind = _text_type(declared)
    if kind is bool:
        return parse_bool(raw, what)
    try:
        if kind is int:
            return int(raw.strip())
        if kind is float:
            return float(raw.strip())
    except ValueError:
        raise InvalidSettingError(f"{what} must be {_TYPE_WORDS[kind]}, not {raw!r}") from None
    return raw


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


C = TypeVar("C", bound=type)


def refusing_unknown_names(cls: C) -> C:
    """Make a settings dataclass refuse unknown names with :class:`InvalidSettingError`.

    A dataclass's generated ``__init__`` raises ``TypeError`` for a keyword it does not take
    (``Context(bogus=1)``); every other mistake in a setting is an ``InvalidSettingError``
    naming it, so the constructor checks the names first (:func:`check_known`: the unknown
    ones and every valid one) and refuses positional values. Apply it above ``@dataclass``;
    the wrapper keeps the generated signature (``functools.wraps``), which LangGraph and
    pydantic read. A subclass built with ``make_dataclass`` gets an ``__init__`` of its own.
    """
    generated: Callable[..., None] = cls.__init__  # type: ignore[misc]

    @functools.wraps(generated)
    def __init__(self: Any, *args: Any, **values: Any) -> None:
        if args:
            plural = "s" if len(args) > 1 else ""
            raise InvalidSettingError(
                f"{type(self).__name__} takes settings as keywords (name=value), not "
                f"{len(args)} positional value{plural}"
            )
        check_known(values, type(self).setting_names())
        generated(self, **values)

    cls.__init__ = __init__  # type: ignore[misc]
    return cls


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


_HINTS: dict[type, dict[str, Any]] = {}


def _type_hints(cls: type) -> dict[str, Any]:
    """A class's resolved annotations, looked up once (every built instance checks them)."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = get_type_hints(cls)
    return hints


_CHECKERS: dict[type, type[BaseModel]] = {}


def _checker(cls: type) -> type[BaseModel]:
    """A pydantic model of ``cls``'s fields: their declared types, strictly, and their bounds.

    Strict, as a caller's JSON is: ``"10"`` is not an integer, nor ``true`` a number; an
    integer is a number. A list setting also takes one comma-separated string
    (:func:`string_list`), and a part of the settings (``RunSettings.deployment``) must be an
    instance of its class.
    """
    if cls in _CHECKERS:
        return _CHECKERS[cls]
    hints = _type_hints(cls)
    declared: dict[str, Any] = {}
    for spec in fields(cls):
        annotation = hints[spec.name]
        if get_origin(annotation) is list:
            annotation = Annotated[annotation, BeforeValidator(string_list)]
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            annotation = Annotated[annotation, InstanceOf()]  # type: ignore[type-arg]  # mypy sees pydantic's alias, not the class
        bounds = {key: spec.metadata[key] for key in ("ge", "le") if key in spec.metadata}
        declared[spec.name] = (annotation, Field(**bounds))
    config = ConfigDict(strict=True, allow_inf_nan=False)
    model: type[BaseModel] = create_model(f"{cls.__name__}Check", __config__=config, **declared)
    return _CHECKERS.setdefault(cls, model)


class Settings:
    """Base of the settings dataclasses: checks every value when an instance is built.

    Each field declares its description and bounds in its metadata, in pydantic's words
    (``metadata={"description": ..., "ge": 1, "le": 100}``), as the deployment settings do in
    theirs; subclasses may add cross-field checks in :meth:`check_together`.
    """

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Check (and normalise) every value with pydantic, then those that depend on each other.

        Raises:
            InvalidSettingError: the first bad value, in one line (:func:`setting_error`).
        """
        checker = _checker(type(self))
        values = {spec.name: getattr(self, spec.name) for spec in fields(self)}  # type: ignore[arg-type]
        try:
            checked = checker.model_validate(values)
        except ValidationError as error:
            raise setting_error(error, checker) from None
        for name in values:
            setattr(self, name, getattr(checked, name))
        self.check_together()

    def check_together(self) -> None:
        """Checks across settings (e.g. threshold order); none by default."""

    @classmethod
    def declared_types(cls) -> dict[str, Any]:
        """The type every setting is checked against (its annotation)."""
        return dict(_type_hints(cls))

    @classmethod
    def setting_names(cls) -> set[str]:
        """The names of every setting."""
        return {f.name for f in fields(cls)}  # type: ignore[arg-type]

    @classmethod
    def bounds(cls) -> dict[str, tuple[float | None, float | None]]:
        """Each bounded setting's (lowest, highest) allowed value, ``None`` where unbounded."""
        return {
            f.name: (f.metadata.get("ge"), f.metadata.get("le"))
            for f in fields(cls)  # type: ignore[arg-type]
            if "ge" in f.metadata or "le" in f.metadata
        }

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> Self:
        """Build the settings from a plain mapping (every setting allowed), rejecting typos.

        Raises:
            InvalidSettingError: an unknown name (the message lists the valid ones), a wrong
                type or a value out of range.
        """
        return cls(**dict(values or {}))  # the constructor checks the names
