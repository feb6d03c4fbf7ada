"""The README and docs/ stay short, current and runnable as printed.

- README.md is under 200 lines; the rest lives in docs/.
- docs/configuration.md is what ``scripts/settings_doc.py`` writes from the settings: the
  three kinds (per-run, the method's parameters, deployment) in three sections, kept apart.
- Every command in a ``bash``/``sh``/``console`` code block of README.md and docs/*.md that
  runs ``crag``, ``crag-bench``, ``make`` or a script of ``scripts/`` or ``bench/scripts/``
  names what exists: ``crag`` and ``crag-bench`` command lines parse with the real parsers
  (and their ``--experiments``, ``--dataset`` and ``--set`` values are known), make targets and
  variables are in the Makefile, scripts are files (run bare: executable ones).
- Every relative link of README.md and docs/*.md resolves to a file, and its ``#anchor`` to a
  heading of that file.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from crag.app.cli.commands import build_parser as crag_parser
from crag.app.cli.settings import parse_settings
from crag.settings.context import Context, IngestContext
from crag.settings.setting_kinds import DEPLOYMENT_NAMES, METHOD_NAMES
from crag_bench.cli import build_parser as bench_parser
from crag_bench.datasets import dataset_names
from crag_bench.experiments import select_experiments

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
MAX_README_LINES = 200

COMMAND_BLOCKS = frozenset({"bash", "sh", "shell", "console"})
SHELL_OPERATORS = frozenset({"&", "&&", "||", "|", ";", ">", ">>", "2>&1", "<"})
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
SCRIPT_FOLDERS = ("scripts/", "bench/scripts/")


@dataclass(frozen=True)
class Command:
    """One shell command of a code block: where it is printed and its words."""

    page: Path
    line: int
    words: list[str]

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: {shlex.join(self.words)}"


def code_blocks(page: Path) -> Iterator[tuple[str, int, list[str]]]:
    """Each fenced code block of ``page``: its language, first line number and lines."""
    language: str | None = None
    start, lines = 0, list[str]()
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        fence = line.strip()
        if language is None and fence.startswith("```"):
            language, start, lines = fence.removeprefix("```").strip(), number + 1, []
        elif language is not None and fence == "```":
            yield language, start, lines
            language = None
        elif language is not None:
            lines.append(line)


def _logical_lines(language: str, start: int, lines: list[str]) -> Iterator[tuple[int, str]]:
    """The block's command lines, continuations joined (console blocks: ``$`` lines only)."""
    pending, first = "", start
    for number, raw in enumerate(lines, start=start):
        line = raw.strip()
        if not pending:
            first = number
            if language == "console":
                if not line.startswith("$ "):
                    continue
                line = line.removeprefix("$ ")
        if line.endswith("\\"):
            pending += line.removesuffix("\\") + " "
            continue
        yield first, pending + line
        pending = ""


def _words(text: str) -> list[str]:
    """The command's words up to its first shell operator, leading assignments left out."""
    words = shlex.split(text, comments=True)
    for index, word in enumerate(words):
        if word in SHELL_OPERATORS:
            words = words[:index]
            break
    while words and ASSIGNMENT.match(words[0]):
        words = words[1:]
    return words


def commands() -> list[Command]:
    """Every command of the pages' shell code blocks."""
    found = []
    for page in PAGES:
        for language, start, lines in code_blocks(page):
            if language not in COMMAND_BLOCKS:
                continue
            for number, text in _logical_lines(language, start, lines):
                words = _words(text)
                if words:
                    found.append(Command(page, number, words))
    return found


def _parse(
    build: Callable[[], argparse.ArgumentParser], argv: list[str]
) -> tuple[argparse.Namespace | None, str]:
    """Parse ``argv``; the namespace, or ``None`` and argparse's message."""
    parser = build()
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            return parser.parse_args(argv), ""
    except SystemExit as exc:
        if exc.code == 0:  # --help
            return None, ""
        return None, stderr.getvalue().strip().splitlines()[-1]


def _values_problem(namespace: argparse.Namespace) -> str:
    """What is wrong with the experiments, dataset or settings a parsed command names."""
    try:
        experiments = getattr(namespace, "experiments", None)
        if experiments:
            select_experiments(experiments)
        dataset = getattr(namespace, "dataset", None)
        if dataset and dataset not in dataset_names():
            return f"unknown dataset {dataset!r}"
        pairs = getattr(namespace, "set", None)
        if pairs:
            parse_settings(list(pairs))
    except ValueError as exc:
        return str(exc).splitlines()[0]
    return ""


def cli_problem(build: Callable[[], argparse.ArgumentParser], argv: list[str]) -> str:
    """Why the real parser refuses ``argv`` (or its values are unknown); empty when fine."""
    namespace, message = _parse(build, argv)
    if message:
        return message
    return _values_problem(namespace) if namespace is not None else ""


def _makefile() -> tuple[set[str], set[str]]:
    """The Makefile's targets and variables."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, flags=re.MULTILINE))
    variables = set(re.findall(r"^([A-Za-z_][A-Za-z0-9_]*)\s*[?:+]?=", text, flags=re.MULTILINE))
    return targets, variables


def make_problem(arguments: list[str]) -> str:
    """An unknown target or variable of a ``make`` command line; empty when fine."""
    targets, variables = _makefile()
    for argument in arguments:
        name, is_variable, _ = argument.partition("=")
        if is_variable and name not in variables:
            return f"no variable {name} in the Makefile"
        if not is_variable and argument not in targets:
            return f"no target {argument!r} in the Makefile"
    return ""


def script_problem(path: str, run_bare: bool) -> str:
    """A script that is not there (or, run bare, not executable); empty when fine."""
    script = ROOT / path
    if not script.is_file():
        return f"no file {path}"
    if run_bare and not os.access(script, os.X_OK):
        return f"{path} is not executable: run it with .venv/bin/python"
    return ""


def command_problem(words: list[str]) -> str | None:
    """What is wrong with one command; ``None`` for a command this test does not check."""
    program, arguments = words[0], words[1:]
    name = program.removeprefix(".venv/bin/")
    if name == "crag":
        return cli_problem(crag_parser, arguments)
    if name == "crag-bench":
        return cli_problem(bench_parser, arguments)
    if program == "make":
        return make_problem(arguments)
    if name == "python" and arguments and arguments[0].startswith(SCRIPT_FOLDERS):
        return script_problem(arguments[0], run_bare=False)
    if program.startswith(SCRIPT_FOLDERS):
        return script_problem(program, run_bare=True)
    return None


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < MAX_README_LINES, f"README.md has {len(lines)} lines: move some to docs/"


def _settings_doc() -> ModuleType:
    spec = importlib.util.spec_from_file_location("settings_doc", ROOT / "scripts/settings_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_architecture_pages_diagram_is_the_compiled_graphs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = importlib.util.spec_from_file_location(
        "architecture_diagram", ROOT / "scripts/architecture_diagram.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, capsys.readouterr().err
    page = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
    stale = page.replace("decide_answer -.->|no knowledge| abstain", "decide_answer --> abstain")
    assert module.with_diagram(stale, module.render()) == page  # a stale diagram is rewritten


def test_configuration_page_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    code = _settings_doc().main(["--check"])
    assert code == 0, capsys.readouterr().err


def test_configuration_page_does_not_depend_on_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings_doc = _settings_doc()
    plain = settings_doc.render()
    monkeypatch.setenv("CRAG_STORE_PATH", "/elsewhere")
    monkeypatch.setenv("CRAG_GENERATOR_BATCH_SIZE", "8")
    assert settings_doc.render() == plain
    assert os.environ["CRAG_STORE_PATH"] == "/elsewhere"  # restored after rendering


def test_configuration_page_keeps_the_three_kinds_apart() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    sections = {part.split("\n", 1)[0]: part for part in page.split("\n## ")[1:]}
    assert list(sections) == ["Per-run settings", "The method's parameters", "Deployment settings"]

    def rows(title: str) -> list[str]:
        return re.findall(r"^\| `(\w+)` \|", sections[title], flags=re.MULTILINE)

    per_run = rows("Per-run settings")
    assert sorted(per_run) == sorted(Context.setting_names() | IngestContext.setting_names())
    assert sorted(rows("The method's parameters")) == sorted(METHOD_NAMES)
    assert sorted(rows("Deployment settings")) == sorted(DEPLOYMENT_NAMES)


def test_the_pages_print_commands() -> None:
    names = {command.words[0].removeprefix(".venv/bin/") for command in commands()}
    assert {"crag", "crag-bench", "make"} <= names


def test_every_printed_command_names_what_exists() -> None:
    problems = []
    for command in commands():
        problem = command_problem(command.words)
        if problem:
            problems.append(f"{command.where()}\n    {problem}")
    assert not problems, "\n".join(problems)


def test_a_wrong_command_is_caught() -> None:
    assert "invalid choice" in (command_problem(["crag", "evaluate", "--limit", "5"]) or "")
    assert "unknown experiment" in (
        command_problem(["crag-bench", "eval", "--experiments", "crag,crag-web-paragraphs"]) or ""
    )
    assert "unknown setting" in (command_problem(["crag", "ask", "--set", "topk=3", "q"]) or "")
    assert "no target" in (command_problem(["make", "evaluate"]) or "")
    assert "no file" in (command_problem(["bench/scripts/missing.py"]) or "")
    assert command_problem(["crag", "ask", "--store", "S", "..."]) == ""


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text, lower case, punctuation dropped, dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[`*]", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of the page's headings (outside code blocks), duplicates numbered."""
    found: set[str] = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            base = slug(line.lstrip("#"))
            anchor, count = base, 0
            while anchor in found:
                count += 1
                anchor = f"{base}-{count}"
            found.add(anchor)
    return found


LINK = re.compile(r"\]\(([^)\s]+)\)")


def link_problems(page: Path) -> list[str]:
    """The page's relative links whose file or heading does not exist."""
    problems = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            problems.append(f"{page.relative_to(ROOT)}: {target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{page.relative_to(ROOT)}: {target}: no such heading")
    return problems


def test_the_readme_links_to_the_docs() -> None:
    linked = set(re.findall(r"\]\((docs/[^)#\s]+)", README.read_text(encoding="utf-8")))
    assert linked, "README.md links to nothing in docs/"
    assert {f"docs/{page.name}" for page in DOCS} <= linked


def test_every_relative_link_resolves() -> None:
    problems = [problem for page in PAGES for problem in link_problems(page)]
    assert not problems, "\n".join(problems)
