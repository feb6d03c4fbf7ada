"""What ``crag`` prints from data never reaches the terminal as control characters.

Ingested files, web pages and the generator's answer reach stdout and stderr through the
progress lines, the kept strips, the answer, its sources and the thread history. An ESC
sequence (``\\x1b[31m``), a BEL or a NUL in any of them used to be written raw, so a document
could recolour, retitle or clear the user's terminal. Each is now shown as a visible escape.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from crag.app.cli.commands import _run_question, main
from crag.app.cli.terminal_text import TerminalFormatter, json_text, terminal_text
from tests.websearch_server import WebsearchServer

HOSTILE = "red\x1b[31m bell\x07 nul\x00 csi\x9b del\x7f cr\r"
"""ESC sequence, BEL, NUL, a C1 control, DEL and a carriage return."""

REPO = Path(__file__).resolve().parents[2]

RAW_CONTROLS = ("\x1b", "\x07", "\x00", "\x9b", "\x7f", "\r")


def _assert_no_controls(text: str, controls: tuple[str, ...] = RAW_CONTROLS) -> None:
    found = sorted({repr(c) for c in controls if c in text})
    assert not found, f"raw control characters printed: {found}"


# -- the helper -------------------------------------------------------------------------------


def test_controls_become_visible_escapes() -> None:
    shown = terminal_text(HOSTILE)
    assert shown == "red\\x1b[31m bell\\x07 nul\\x00 csi\\x9b del\\x7f cr\\x0d"


def test_newlines_are_kept_only_in_multiline_text_and_tabs_always() -> None:
    assert terminal_text("a\tb\nc") == "a\tb\\x0ac"
    assert terminal_text("a\tb\nc\r", multiline=True) == "a\tb\nc\\x0d"


def test_ordinary_text_is_unchanged() -> None:
    text = "Mona Lisa — Léonard, 蒙娜丽莎 [1] 100 %"
    assert terminal_text(text) == text


def test_a_file_name_that_is_not_utf8_prints_instead_of_failing() -> None:
    name = b"caf\xe9.md".decode("utf-8", "surrogateescape")
    assert terminal_text(name) == "caf\\udce9.md"
    terminal_text(name).encode("utf-8")  # what print() would do


FORMAT_CHARACTERS = "\u202e\u202a\u2066\u2069\u200b\u200e\ufeff\u2028\u2029\U000e0041"
"""Bidirectional overrides and isolates, a zero-width space, a direction mark, the BOM, the line
and paragraph separators and a tag character: invisible, or reordering what follows."""


def test_format_characters_become_visible_escapes() -> None:
    # `evil\u202etxt.exe` would show as `evilexe.txt`
    assert terminal_text("evil\u202etxt.exe") == "evil\\u202etxt.exe"
    shown = terminal_text(FORMAT_CHARACTERS, multiline=True)
    assert shown == ("\\u202e\\u202a\\u2066\\u2069\\u200b\\u200e\\ufeff\\u2028\\u2029\\U000e0041")


def test_joiners_stay_in_prose_but_not_in_a_name() -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # one emoji, joined
    persian = "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"  # "I want", with a ZWNJ
    assert terminal_text(family + persian, multiline=True) == family + persian
    assert terminal_text("ab\u200dc.md") == "ab\\u200dc.md"


# -- every print site of `crag ask`, with a scripted run --------------------------------------


def _strip(text: str, source: str, chunk: int | None, origin: str) -> dict[str, Any]:
    return {"text": text, "source": source, "chunk": chunk, "origin": origin, "score": 0.5}


SOURCE = f"docs/{HOSTILE}.md"
URL = f"https://example.org/{HOSTILE}"
KNOWLEDGE = [
    _strip(f"# Title {HOSTILE}\nBody {HOSTILE}", SOURCE, 0, "internal"),
    _strip(f"Web page {HOSTILE}", URL, None, "external"),
]
FINAL: dict[str, Any] = {
    "answer": f"Answer {HOSTILE}\nsecond line",
    "action": "ambiguous",
    "citations": [1],
    "abstained": False,
    "documents": [{"text": HOSTILE, "source": SOURCE, "chunk": 0, "score": 0.2}],
    "knowledge": KNOWLEDGE,
    "notes": [f"a note {HOSTILE}"],
}
STREAM: list[tuple[str, Any]] = [
    ("updates", {"contextualize": {"standalone_question": HOSTILE}}),
    ("updates", {"retrieve": {"documents": FINAL["documents"]}}),
    ("updates", {"grade": {"documents": FINAL["documents"], "notes": [f"note {HOSTILE}"]}}),
    ("updates", {"decide_action": {"action": "ambiguous", "decision": {"reason": HOSTILE}}}),
    ("updates", {"refine": {"internal_knowledge": [KNOWLEDGE[0]]}}),
    ("updates", {"rewrite_query": {"search_query": HOSTILE}}),
    ("custom", {"node": "web_search", "event": "searching", "query": HOSTILE}),
    (
        "custom",
        {"node": "web_search", "event": "page", "ok": True, "done": 1, "total": 1, "url": URL},
    ),
    ("updates", {"web_search": {"external_knowledge": [KNOWLEDGE[1]]}}),
    ("messages", (SimpleNamespace(text=f"Answer {HOSTILE}"), {"langgraph_node": "generate"})),
    ("messages", (SimpleNamespace(text="\nsecond line"), {"langgraph_node": "generate"})),
    ("updates", {"generate": {"answer": FINAL["answer"], "citations": [1]}}),
    ("values", FINAL),
]


class ScriptedGraph:
    """Streams the parts of :data:`STREAM` in the stream modes asked for."""

    def stream(self, *args: Any, stream_mode: list[str], **kwargs: Any) -> Iterator[Any]:
        yield from (part for part in STREAM if part[0] in stream_mode)


def _ask(json_output: bool = False) -> argparse.Namespace:
    return argparse.Namespace(
        question=HOSTILE, json=json_output, quiet=False, set=None, store=None, collection=None
    )


def test_progress_strips_answer_notes_and_sources_are_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _run_question(ScriptedGraph(), _ask(), None) == 0
    captured = capsys.readouterr()
    _assert_no_controls(captured.out)
    _assert_no_controls(captured.err)
    lines = captured.err.splitlines()
    for node in ("contextualize", "grade", "decide_action", "rewrite_query", "web_search"):
        line = next(line for line in lines if line.startswith(f"[{node}]"))
        assert "\\x1b[31m" in line, line
    strip = lines[lines.index("[refine] kept 1 strips") + 1]
    assert "Body red\\x1b[31m" in strip and "docs/red\\x1b[31m" in strip, strip
    assert "page 1/1 read: https://example.org/red\\x1b[31m" in captured.err
    assert "note: a note red\\x1b[31m bell\\x07 nul\\x00" in captured.err
    # the streamed answer keeps its line break, and the sources show title and location
    assert captured.out.startswith(
        "Answer red\\x1b[31m bell\\x07 nul\\x00 csi\\x9b del\\x7f cr\\x0d\n"
    )
    assert "  [1] Title red\\x1b[31m" in captured.out
    assert (
        "docs/red\\x1b[31m" in captured.out and "https://example.org/red\\x1b[31m" in captured.out
    )


def test_json_output_escapes_what_json_itself_leaves_raw(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _run_question(ScriptedGraph(), _ask(json_output=True), None) == 0
    captured = capsys.readouterr()
    _assert_no_controls(captured.out)
    assert "\\u009b" in captured.out and "\\u007f" in captured.out
    assert json.loads(captured.out)["answer"] == FINAL["answer"]  # the same data, still JSON


def test_a_one_line_error_stays_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail(args: argparse.Namespace) -> int:
        raise ValueError(f"bad input {HOSTILE}\nsecond line")

    monkeypatch.setattr("crag.app.cli.commands.cmd_graph", fail)
    assert main(["graph"]) == 2
    err = capsys.readouterr().err
    _assert_no_controls(err)
    assert err.count("\n") == 1 and err.startswith("crag: error: bad input red\\x1b[31m")


# -- end to end: an ingested document, `crag ask` and `crag history` ---------------------------


@pytest.fixture(scope="module")
def down() -> Iterator[WebsearchServer]:
    with WebsearchServer() as server:
        server.search_status = 503
        yield server


@pytest.mark.integration
def test_an_ingested_document_with_escapes_reaches_the_terminal_escaped(
    tmp_path: Path, down: WebsearchServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # (no NUL here: `crag ingest` refuses a file holding one as binary data; a web page or an
    # answer may still hold one, which the scripted run above covers)
    docs = tmp_path / "docs"
    docs.mkdir()
    body = (
        "# The Mona Lisa \x1b[31mpainting\x07\n\n"
        "The Mona Lisa \x1b[31mis a portrait\x1b[0m painted by Leonardo da Vinci in the "
        "early sixteenth century.\x07 It hangs in the Louvre in Paris.\x1b]0;owned\x07\n"
    )
    (docs / "mona\x1b[31m.md").write_text(body, encoding="utf-8")
    store, threads = tmp_path / "store", tmp_path / "threads.sqlite"
    assert main(["ingest", "--store", str(store), str(docs)]) == 0
    ask = [
        "ask", "--store", str(store), "--thread", "t", "--threads-db", str(threads),
        "--set", "search_provider=searxng", "--set", f"search_url={down.url}",
        "--set", "allowed_hosts=127.0.0.1", "--set", "max_new_tokens=24",
        "Who painted the Mona Lisa?",
    ]  # fmt: skip
    assert main(ask) == 0
    assert main(["history", "t", "--threads-db", str(threads)]) == 0
    assert main(["history", "t", "--threads-db", str(threads), "--json"]) == 0
    captured = capsys.readouterr()
    _assert_no_controls(captured.out)
    # the models' own loading bars redraw their line with \r; the document has ESC and BEL
    _assert_no_controls(captured.err, ("\x1b", "\x07"))
    assert "mona\\x1b[31m.md" in captured.err  # the source, in the grade lines
    assert "\\x1b[31mis a portrait\\x1b[0m" in captured.err  # a kept strip's text
    assert "The Mona Lisa \\x1b[31mpainting\\x07" in captured.out  # its title, under Sources


def test_json_text_escapes_format_characters_and_still_parses() -> None:
    value = {"source": f"evil\u202etxt.exe {FORMAT_CHARACTERS} {HOSTILE}"}
    text = json_text(value)
    _assert_no_controls(text, (*RAW_CONTROLS, *FORMAT_CHARACTERS))
    assert "\\u202e" in text and "\\udb40\\udc41" in text  # a tag character: a surrogate pair
    assert json.loads(text) == value


# -- the log: warnings name files, sources and exception text ---------------------------------


def _log_to(stream: io.StringIO) -> logging.Logger:
    """A logger writing through the formatter `crag` itself installs, to ``stream``."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TerminalFormatter("%(levelname)s %(name)s: %(message)s"))
    log = logging.getLogger(f"crag.test_output_safety.{id(stream)}")
    log.propagate = False
    log.handlers[:] = [handler]
    return log


def test_a_log_line_escapes_its_arguments_and_stays_one_line() -> None:
    stream = io.StringIO()
    _log_to(stream).warning("skipping %s", "evil\x1b[31m\u202ename.doc\nERROR crag: forged")
    line = stream.getvalue()
    assert line == (
        "WARNING crag.test_output_safety."
        f"{id(stream)}: skipping evil\\x1b[31m\\u202ename.doc\\x0aERROR crag: forged\n"
    )


def test_a_logged_traceback_keeps_its_lines_and_escapes_the_rest() -> None:
    stream = io.StringIO()
    log = _log_to(stream)
    try:
        raise OSError(f"cannot read {HOSTILE}\u202e")
    except OSError:
        log.exception("ingest failed")
    text = stream.getvalue()
    _assert_no_controls(text, (*RAW_CONTROLS, "\u202e"))
    assert text.startswith("ERROR ") and "\nTraceback (most recent call last):\n" in text
    assert "OSError: cannot read red\\x1b[31m" in text and "\\u202e" in text


INGEST_WITH_A_FAST_EMBEDDER = """
import sys
import crag.vectorstore.embeddings as embeddings
from tests.hash_embeddings import HashEmbeddings

embeddings.shared_embeddings = lambda *args, **kwargs: HashEmbeddings()  # no model to load
embeddings.load_embeddings = lambda *args, **kwargs: HashEmbeddings()
from crag.app.cli.console import main

sys.argv = ["crag", *sys.argv[1:]]
sys.exit(main())
"""


def test_crag_ingest_warns_about_a_hostile_file_name_escaped(tmp_path: Path) -> None:
    """A real `crag ingest` process: the skipped file's warning reaches stderr escaped."""
    name = tmp_path / "evil\x1b[31m\u202ename.doc"  # no loader for .doc: skipped, warned about
    name.write_text("hello", encoding="utf-8")
    argv = ["ingest", "--no-server", "--store", str(tmp_path / "store"), str(name)]
    done = subprocess.run(
        [sys.executable, "-c", INGEST_WITH_A_FAST_EMBEDDER, *argv],
        cwd=REPO,
        capture_output=True,
        timeout=120,
    )
    err = done.stderr.decode("utf-8")
    assert done.returncode == 1, err
    _assert_no_controls(err, ("\x1b", "\u202e"))
    warning = next(line for line in err.splitlines() if line.startswith("failed: "))
    assert "evil\\x1b[31m\\u202ename.doc" in warning, warning
