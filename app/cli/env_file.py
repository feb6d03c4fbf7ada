"""Set variables in a ``.env`` file, keeping every other line of it as it was.

The LangGraph server reads the ``.env`` that ``langgraph.json`` names (``"env": ".env"``,
relative to the folder it is started from); ``crag thresholds --write`` sets the action
trigger's thresholds there. :func:`set_variables` replaces the lines that set the variables
(``NAME=...`` or ``export NAME=...``), appends one for each variable no line sets, and keeps
every other byte: comments, blank lines, order, line endings, a commented-out ``# NAME=``. The
new file is written beside the old one and renamed over it, with the old one's mode, so a
reader sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Change", "default_env_file", "edited_text", "set_variables"]

NEW_FILE_MODE = 0o600
"""The mode of a ``.env`` made anew: it may come to hold keys (``OPENAI_API_KEY``)."""
_ENCODING = ("utf-8", "surrogateescape")
"""Bytes that are not UTF-8 come back out as they went in."""


@dataclass(frozen=True)
class Change:
    """One variable set: its value before (``None``: unset or empty) and now."""

    name: str
    old: str | None
    new: str

    def line(self) -> str:
        """``NAME: old -> new``, ``unset`` for a variable no line set."""
        return f"{self.name}: {self.old if self.old is not None else 'unset'} -> {self.new}"


def default_env_file(folder: Path) -> Path:
    """The ``.env`` the server started in ``folder`` reads: ``langgraph.json``'s ``env`` file.

    ``folder/.env`` when there is no ``langgraph.json``, or it names no file (an ``env`` that
    is a mapping of values, or none).
    """
    try:
        config = json.loads((folder / "langgraph.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    named = config.get("env") if isinstance(config, dict) else None
    return folder / (named if isinstance(named, str) and named.strip() else ".env")


def _setting(name: str) -> re.Pattern[str]:
    """A line that sets ``name``: ``NAME=``, ``export NAME =``; not ``# NAME=``."""
    return re.compile(rf"^[ \t]*(?:export[ \t]+)?{re.escape(name)}[ \t]*=(?P<value>.*)$", re.S)


def _value(raw: str) -> str | None:
    """A line's value as dotenv reads it: unquoted, its ``# comment`` cut; ``None`` if empty."""
    text = raw.strip()
    if text[:1] in ("'", '"'):
        end = text.find(text[0], 1)
        text = text[1:end] if end > 0 else text[1:]
    else:
        text = re.split(r"[ \t]#", text, maxsplit=1)[0].strip()
    return text or None


def _ending(line: str) -> str:
    """The line's end: CR LF, LF, CR, or none (a last line without one)."""
    body = line.rstrip("\r\n")
    return line[len(body) :]


def _lines(text: str) -> list[str]:
    """``text``'s lines, each with its end: split at LF only (a CR stays on its line)."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def edited_text(text: str, values: Mapping[str, str]) -> tuple[str, list[Change]]:
    """``text`` with each variable of ``values`` set, and what each was before.

    Every line that sets a variable is replaced (dotenv reads the last one: that is its old
    value); a variable no line sets is appended, after a line end if the text lacks one, with
    the end of the text's last line that has one (LF in a text without any).
    """
    lines = _lines(text)
    old: dict[str, str | None] = {}
    for number, line in enumerate(lines):
        body, end = line[: len(line) - len(_ending(line))], _ending(line)
        for name, value in values.items():
            found = _setting(name).match(body)
            if found:
                old[name] = _value(found.group("value"))
                lines[number] = f"{name}={value}{end}"
    newline = next((_ending(line) for line in reversed(lines) if _ending(line)), "\n")
    missing = [name for name in values if name not in old]
    if missing and lines and not _ending(lines[-1]):
        lines[-1] += newline
    lines += [f"{name}={values[name]}{newline}" for name in missing]
    changes = [Change(name, old.get(name), value) for name, value in values.items()]
    return "".join(lines), changes


def _write_beside(path: Path, data: bytes, mode: int) -> None:
    """``data`` into a temporary file in ``path``'s folder, renamed over ``path``."""
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as out:
            out.write(data)
            out.flush()
            os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def set_variables(path: Path, values: Mapping[str, str]) -> list[Change]:
    """Set ``values`` in the ``.env`` file ``path`` (made when missing); what changed.

    A link is followed: the file it points to is the one rewritten.

    Raises:
        ValueError: the file cannot be read or written, in one sentence naming it.
    """
    target = Path(os.path.realpath(path))
    try:
        before = target.read_bytes()
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        before, mode = b"", NEW_FILE_MODE
    except IsADirectoryError:
        raise ValueError(f"env file {path} is a directory, not a file") from None
    except OSError as exc:
        raise ValueError(f"cannot read env file {path}: {exc.strerror}") from None
    text, changes = edited_text(before.decode(*_ENCODING), values)
    try:
        _write_beside(target, text.encode(*_ENCODING), mode)
    except OSError as exc:
        raise ValueError(f"cannot write env file {path}: {exc.strerror}") from None
    return changes
