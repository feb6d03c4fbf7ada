r"""Text from data made safe to write to a terminal: control and format characters escaped.

Documents, web pages, answers, file names and the warm server's replies reach the terminal
through the progress lines, the answer, its sources, the history and the log. Raw, an ESC
sequence (``\x1b[31m``) in an ingested file could recolour, retitle or clear the user's
terminal, and an invisible format character could hide or reorder what is shown: U+202E
RIGHT-TO-LEFT OVERRIDE makes ``evil\u202etxt.exe`` read as ``evilexe.txt``. Each such character
is written as a visible escape instead (``\x1b``, ``\u202e``).

One-line text (a file name, a source) that is not in Unicode NFC also has its combining
characters escaped: ``café.md`` decomposed is another file than ``café.md`` composed, and is
shown as ``cafe\u0301.md`` so that the two can be told apart.

Standard library only: the warm server and its client import this before anything heavy.
"""

from __future__ import annotations

import json
import logging
import re
import unicodedata
from typing import Any

UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""What may not reach a terminal as it is, by Unicode category: controls (C0 but tab, DEL, C1),
format characters (bidirectional overrides and isolates, zero-width spaces, the BOM, tag
characters), lone surrogates (a file name that is not UTF-8, which cannot even be encoded), and
the line and paragraph separators U+2028/U+2029 (a line break to some terminals)."""

JOINERS = frozenset({"\u200c", "\u200d"})
"""ZERO WIDTH NON-JOINER and JOINER: format characters, but part of ordinary Persian and Indic
text and of emoji sequences. Kept in multi-line prose (an answer); escaped in one-line text such
as a file name, where an invisible character only makes two names look alike."""

_CANDIDATE = re.compile(r"[^\t\x20-\x7e]")
"""Every character but tab and printable ASCII: the few that are unsafe are picked out by
category (asking ``unicodedata`` per character keeps up with new Unicode versions, where a fixed
list of format characters would not)."""


def _is_unsafe(char: str, *, multiline: bool) -> bool:
    if char == "\n":
        return not multiline
    if multiline and char in JOINERS:
        return False
    return unicodedata.category(char) in UNSAFE_CATEGORIES


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _joins_previous(char: str) -> bool:
    """Whether NFC may compose ``char`` with the character before it.

    Combining marks, and the vowel and final consonant jamo of a decomposed Hangul syllable.
    """
    return (
        unicodedata.category(char).startswith("M")
        or "\u1161" <= char <= "\u1175"
        or "\u11a8" <= char <= "\u11c2"
    )


def _unnormalised(text: str) -> frozenset[int]:
    r"""Where ``text`` differs from its Unicode NFC form: the characters to show as escapes.

    ``text`` is cut into a base character and the characters composed onto it; in each piece
    NFC would change, the composed characters are marked (``e\u0301``), and the base too when
    NFC replaces it alone (U+212B ANGSTROM SIGN).
    """
    if unicodedata.is_normalized("NFC", text):
        return frozenset()
    marked: set[int] = set()
    starts = [i for i, char in enumerate(text) if i == 0 or not _joins_previous(char)]
    for start, end in zip(starts, [*starts[1:], len(text)], strict=True):
        if unicodedata.is_normalized("NFC", text[start:end]):
            continue
        if not unicodedata.is_normalized("NFC", text[start]):
            marked.add(start)
        marked.update(range(start + 1, end))
    return frozenset(marked)


def terminal_text(text: object, *, multiline: bool = False) -> str:
    r"""``text`` with every control and format character shown as an escape, for printing.

    Tab is kept; newlines only with ``multiline`` (an answer, a traceback): elsewhere one line
    stays one line, so data cannot start a line that looks like crag's own, and a character
    that makes it differ from its NFC form is escaped too (``cafe\u0301.md``), so that two
    names that differ only in Unicode form print differently.
    """
    line = str(text)
    lookalike = frozenset() if multiline else _unnormalised(line)

    def replace(match: re.Match[str]) -> str:
        char = match.group()
        unsafe = match.start() in lookalike or _is_unsafe(char, multiline=multiline)
        return _escape(char) if unsafe else char

    return _CANDIDATE.sub(replace, line)


def json_text(value: Any) -> str:
    r"""``value`` as indented JSON that is safe to print.

    ``json`` escapes the C0 controls itself, but not DEL, the C1 controls, format characters and
    lone surrogates: those are written as JSON escapes too (``\u202e``; a character beyond the
    BMP as its surrogate pair), so the output still parses to ``value``.
    """
    text = json.dumps(value, indent=2, ensure_ascii=False)

    def replace(match: re.Match[str]) -> str:
        char = match.group()
        if not _is_unsafe(char, multiline=True):
            return char
        return json.dumps(char, ensure_ascii=True)[1:-1]

    return _CANDIDATE.sub(replace, text)


class TerminalFormatter(logging.Formatter):
    r"""A log formatter that escapes what the record carries, for a terminal.

    Warnings name files, sources and exception text (``skipping evil\x1b[31mname.doc``): the
    message line is escaped as one line, so a name with a newline cannot forge a log line of its
    own; a traceback keeps its newlines but nothing else.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as ``logging.Formatter.format`` writes it, each part escaped."""
        record.message = record.getMessage()
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        parts = [terminal_text(self.formatMessage(record))]
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            parts.append(terminal_text(record.exc_text, multiline=True))
        if record.stack_info:
            parts.append(terminal_text(self.formatStack(record.stack_info), multiline=True))
        return "\n".join(parts)
