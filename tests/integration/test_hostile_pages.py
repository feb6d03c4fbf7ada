"""Small pages and documents whose shape cost minutes: deep nesting, a declared width of XFD.

A web page of ``<div>`` nested thousands deep (88 KB, 8,000 deep, took ``crag ask`` 93 s to read;
660 KB did not finish in 10 minutes), one of ``<p>`` nested in one another, an HTML document of
100,000 nested ``<div>`` (``crag ingest`` was killed at 90 s), a 5 KB workbook declaring columns
up to XFD (13 minutes), and one whose rows really reach XFD. Each is written here and read by
real code in a child process, whose time and peak memory (``ru_maxrss``) are its own: pages by
the reader ``crag ask`` uses (:func:`crag.websearch.pages.extract`), documents by ``crag
ingest`` itself (the hash embedder stands in for MiniLM).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.document_factory import write_xlsx
from tests.integration.test_office_budgets import MEASURED_CRAG_INGEST, OTTERS, failed_line

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT = 120
"""Seconds a child may run: past it the test fails (before the fixes these ran for minutes)."""

MEASURED_PAGE_READ = textwrap.dedent(
    """
    import json, resource, sys, time
    from crag.websearch.fetch import FetchedPage
    from crag.websearch.pages import extract

    body = open(sys.argv[1], "rb").read()
    page = FetchedPage(
        url="http://127.0.0.1/deep", media_type="text/html", charset="utf-8", body=body
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    text = extract(page)
    seconds = time.monotonic() - started
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"seconds": seconds, "grown_mb": grown / 1024, "title": text.title,
                      "paragraphs": list(text.paragraphs)}))
    """
)
SENTENCE = "Otters hold hands while they sleep so that they do not drift apart."


def _child(script: str, *args: str) -> dict[str, Any]:
    """Run ``script`` with ``args`` in a child Python; its last line of JSON, and its output."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", script, *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child did not finish in {CHILD_TIMEOUT} s")
    assert done.returncode == 0, done.stderr[-3000:]
    measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    measured["stdout"], measured["stderr"] = done.stdout, done.stderr
    return measured


def read_page(path: Path) -> dict[str, Any]:
    """What ``crag ask``'s page reader makes of the page in ``path``, and what it cost."""
    return _child(MEASURED_PAGE_READ, str(path))


def ingest(tmp_path: Path, folder: Path) -> dict[str, Any]:
    """``crag ingest FOLDER`` in a child process: exit code, seconds, memory grown, output."""
    return _child(MEASURED_CRAG_INGEST, str(tmp_path / "store"), str(folder))


def nested_page(depth: int, opening: str = "<div>", closing: str = "</div>") -> str:
    """A page whose paragraph sits ``depth`` tags deep."""
    return (
        "<html><head><title>Otters</title></head><body>"
        + opening * depth
        + f"<p>{SENTENCE}</p>"
        + closing * depth
        + "</body></html>"
    )


@pytest.mark.parametrize(
    ("depth", "opening", "closing"),
    [
        (8_000, "<div>", "</div>"),  # 88 KB: 93 s before
        (60_000, "<div>", "</div>"),  # 660 KB: over 10 minutes before
        (8_000, '<div class="nav-item">', "</div>"),  # named like boilerplate: find_all("p") each
    ],
    ids=["8000-divs", "60000-divs", "8000-named-divs"],
)
def test_a_page_of_deeply_nested_divs_is_read_in_seconds(
    tmp_path: Path, depth: int, opening: str, closing: str
) -> None:
    page = tmp_path / "deep.html"
    page.write_text(nested_page(depth, opening, closing), encoding="utf-8")

    measured = read_page(page)
    assert measured["seconds"] < 15, measured
    assert measured["grown_mb"] < 400, measured
    assert measured["title"] == "Otters"
    if depth <= 8_000:  # the paragraph is within the tags read
        assert measured["paragraphs"] == [SENTENCE], measured


def test_a_page_of_paragraphs_nested_in_one_another_is_read_in_seconds(tmp_path: Path) -> None:
    """``html.parser`` does not close ``<p>`` at the next one: each holds all the ones after it."""
    page = tmp_path / "paragraphs.html"
    page.write_text("<html><body>" + f"<p>{SENTENCE} " * 30_000 + "</body></html>")

    measured = read_page(page)
    assert measured["seconds"] < 15, measured
    assert measured["paragraphs"] and measured["paragraphs"][0].startswith(SENTENCE), measured


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder of documents holding one harmless note besides the hostile file."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "otters.md").write_text(OTTERS, encoding="utf-8")
    return docs


def test_an_html_file_of_100k_nested_divs_is_ingested_in_seconds(
    tmp_path: Path, folder: Path
) -> None:
    deep = folder / "deep.html"
    deep.write_text(
        "<html><head><title>Deep</title></head><body>"
        + "<div>" * 100_000
        + "Beavers build dams across streams to make ponds."
        + "</div>" * 100_000
        + "</body></html>",
        encoding="utf-8",
    )

    measured = ingest(tmp_path, folder)
    assert measured["code"] == 0, measured["stderr"][-3000:]
    assert measured["stdout"].startswith("2 added, "), measured["stdout"]
    assert measured["seconds"] < 45, measured
    assert measured["grown_mb"] < 600, measured


def _patched_sheet(source: Path, target: Path, patch: Any) -> Path:
    """``source`` rewritten into ``target`` with its first sheet's XML passed through ``patch``."""
    with (
        zipfile.ZipFile(source) as old,
        zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as new,
    ):
        for info in old.infolist():
            data = old.read(info)
            if info.filename == "xl/worksheets/sheet1.xml":
                data = patch(data.decode()).encode()
            new.writestr(info.filename, data)
    source.unlink()
    return target


def test_a_workbook_declaring_columns_up_to_xfd_is_read_as_wide_as_its_cells(
    tmp_path: Path, folder: Path
) -> None:
    """The declared dimension A1:XFD150000 is ignored: the file is stored, quickly.

    openpyxl pads every row to the declared width, the 150,000 missing rows before the last
    one as well: 2.4 billion empty cells, before the fix.
    """

    def declare_xfd(xml: str) -> str:
        head, rest = xml.split("<dimension ", 1)
        last = '<row r="150000"><c r="A150000" t="inlineStr"><is><t>last</t></is></c></row>'
        rest = rest.split("/>", 1)[1].replace("</sheetData>", last + "</sheetData>")
        return head + '<dimension ref="A1:XFD150000"/>' + rest

    base = write_xlsx(tmp_path / "base.xlsx", rows=40)
    wide = _patched_sheet(base, folder / "wide.xlsx", declare_xfd)
    assert wide.stat().st_size < 10_000

    measured = ingest(tmp_path, folder)
    assert measured["code"] == 0, measured["stderr"][-3000:]
    assert measured["stdout"].startswith("2 added, "), measured["stdout"]
    assert "failed" not in measured["stderr"], measured["stderr"][-3000:]
    assert measured["seconds"] < 30, measured
    assert measured["grown_mb"] < 400, measured


def test_a_workbook_whose_rows_reach_xfd_is_refused_in_one_line(
    tmp_path: Path, folder: Path
) -> None:
    """1,000 rows with a cell in column XFD: 16 million cells, past the 5 million read."""

    def cells_at_xfd(xml: str) -> str:
        rows = "".join(
            f'<row r="{n}"><c r="A{n}" t="inlineStr"><is><t>r{n}</t></is></c>'
            f'<c r="XFD{n}"><v>{n}</v></c></row>'
            for n in range(100, 1_100)
        )
        return xml.replace("</sheetData>", rows + "</sheetData>")

    base = write_xlsx(tmp_path / "base.xlsx", rows=3)
    wide = _patched_sheet(base, folder / "xfd.xlsx", cells_at_xfd)

    measured = ingest(tmp_path, folder)
    assert failed_line(measured["stderr"], wide) == (
        f"{wide}: refused: its rows span more than 5,000,000 cells (the empty ones before each "
        "row's last cell counted), the most read from one workbook"
    )
    assert measured["stdout"].startswith("1 added, "), measured["stdout"]
    assert measured["seconds"] < 30, measured
    assert measured["grown_mb"] < 400, measured
