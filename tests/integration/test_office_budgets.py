"""Small Office files that unpack to huge XML cost ``crag ingest`` neither minutes nor memory.

A workbook of a few hundred kilobytes whose shared strings unpack to 150 MB (openpyxl spent
minutes of a core and hundreds of MB on one), a presentation whose one slide unpacks to 50 MB
(python-pptx parses it whole when it opens the file), a workbook whose shared strings pass for
a worksheet. Each is written here byte by byte into a real archive, then given to ``crag ingest``
in a child process (the hash embedder stands in for MiniLM), whose time and peak memory
(``ru_maxrss``) are its own: the file is refused in one line naming it and its part, quickly, and
the other file of the folder is stored.
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

from tests.document_factory import write_pptx, write_xlsx

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
OTTERS = "Otters hold hands while they sleep so that they do not drift apart."
SHARED_STRINGS_TYPE = (
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"
)
WORKSHEET_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"
SHARED_STRINGS_RELATION = (
    "http://schemas.openxmlformats.org/officeDocument/2006/relationships/sharedStrings"
)

MEASURED_CRAG_INGEST = textwrap.dedent(
    """
    import json, resource, sys, time
    import crag.vectorstore.embeddings
    from tests.hash_embeddings import HashEmbeddings

    shared = HashEmbeddings()
    crag.vectorstore.embeddings.locked_embeddings = lambda name: shared
    from crag.app.cli.commands import main

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started, cpu = time.monotonic(), time.process_time()
    code = main(["ingest", "--store", sys.argv[1], "--collection", "budgets", sys.argv[2]])
    seconds, cpu_seconds = time.monotonic() - started, time.process_time() - cpu
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"code": code, "seconds": seconds, "cpu_seconds": cpu_seconds,
                      "grown_mb": grown / 1024}))
    """
)


def _repeated(
    archive: zipfile.ZipFile, name: str, head: str, item: str, times: int, tail: str
) -> None:
    """Write the member ``name``: ``head``, ``item`` ``times`` over, ``tail`` (streamed)."""
    batch = 100_000
    with archive.open(name, "w", force_zip64=True) as member:
        member.write(head.encode())
        full, rest = divmod(times, batch)
        chunk = (item * batch).encode()
        for _ in range(full):
            member.write(chunk)
        member.write((item * rest).encode() + tail.encode())


def write_shared_strings_bomb(path: Path, strings: int, *, also_worksheet: bool = False) -> Path:
    """A real workbook (openpyxl's) whose shared strings are ``strings`` one-letter strings.

    17 bytes of XML each: 9 million unpack to 150 MB from a file of a few hundred kilobytes.
    ``also_worksheet``: the content types give the part the worksheet type as well.
    """
    types = [SHARED_STRINGS_TYPE, *([WORKSHEET_TYPE] if also_worksheet else [])]
    base = write_xlsx(path.with_name("base.xlsx"), rows=3)
    with zipfile.ZipFile(base) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for info in source.infolist():
            data = source.read(info)
            if info.filename == "[Content_Types].xml":
                overrides = "".join(
                    f'<Override PartName="/xl/sharedStrings.xml" ContentType="{kind}"/>'
                    for kind in types
                )
                data = data.replace(b"</Types>", overrides.encode() + b"</Types>")
            if info.filename == "xl/_rels/workbook.xml.rels":
                relation = (
                    f'<Relationship Id="rId99" Type="{SHARED_STRINGS_RELATION}" '
                    'Target="sharedStrings.xml"/>'
                )
                data = data.replace(b"</Relationships>", relation.encode() + b"</Relationships>")
            out.writestr(info.filename, data)
        head = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
        )
        _repeated(out, "xl/sharedStrings.xml", head, "<si><t>x</t></si>", strings, "</sst>")
    base.unlink()
    return path


def write_huge_slide_pptx(path: Path, paragraphs: int) -> Path:
    """A real deck (python-pptx's) whose first slide has ``paragraphs`` more empty paragraphs.

    Six bytes of XML each (``<a:p/>``): 8.5 million unpack to 50 MB, in a file of a few hundred
    kilobytes.
    """
    base = write_pptx(path.with_name("base.pptx"))
    with zipfile.ZipFile(base) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for info in source.infolist():
            data = source.read(info)
            if info.filename != "ppt/slides/slide1.xml":
                out.writestr(info.filename, data)
                continue
            head, tail = data.decode().split("</p:txBody>", 1)
            _repeated(out, info.filename, head, "<a:p/>", paragraphs, "</p:txBody>" + tail)
    base.unlink()
    return path


def measured_ingest(tmp_path: Path, folder: Path) -> dict[str, Any]:
    """``crag ingest FOLDER`` in a child process: its exit code, seconds, memory grown, output.

    ``cpu_seconds`` is what the file cost the process, which the tests bound: wall seconds
    also count the other work of a loaded machine (2 cores, three test workers).
    """
    done = subprocess.run(
        [sys.executable, "-c", MEASURED_CRAG_INGEST, str(tmp_path / "store"), str(folder)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    measured["stdout"], measured["stderr"] = done.stdout, done.stderr
    return measured


def failed_line(stderr: str, path: Path) -> str:
    """The line of ``crag ingest``'s report that lists ``path`` as failed."""
    lines = [line for line in stderr.splitlines() if f"failed: {path}:" in line]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0].split("failed: ", 1)[1]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder of documents holding one harmless note besides the hostile file."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "otters.md").write_text(OTTERS, encoding="utf-8")
    return docs


def test_a_workbook_whose_shared_strings_unpack_to_150_mb_is_refused_quickly(
    tmp_path: Path, folder: Path
) -> None:
    bomb = write_shared_strings_bomb(folder / "strings.xlsx", 9_000_000)
    assert bomb.stat().st_size < 1_000_000
    with zipfile.ZipFile(bomb) as archive:
        size = archive.getinfo("xl/sharedStrings.xml").file_size
    assert size > 150_000_000

    measured = measured_ingest(tmp_path, folder)
    assert failed_line(measured["stderr"], bomb) == (
        f"{bomb}: refused: its part xl/sharedStrings.xml would unpack to {size:,} bytes, more "
        "than the 16,777,216 bytes of XML read from one part of a workbook other than its "
        "worksheets"
    )
    assert measured["code"] == 0
    assert measured["stdout"].startswith("1 added, "), measured["stdout"]
    assert measured["cpu_seconds"] < 20, measured
    assert measured["grown_mb"] < 150, measured


def test_shared_strings_passing_for_a_worksheet_get_no_worksheets_budget(
    tmp_path: Path, folder: Path
) -> None:
    """Typed a worksheet as well, the part is still read whole by openpyxl: the smaller budget."""
    bomb = write_shared_strings_bomb(folder / "typed.xlsx", 3_000_000, also_worksheet=True)
    with zipfile.ZipFile(bomb) as archive:
        size = archive.getinfo("xl/sharedStrings.xml").file_size
    assert 16 << 20 < size < 64 << 20  # within a worksheet's budget, past any other part's

    measured = measured_ingest(tmp_path, folder)
    assert failed_line(measured["stderr"], bomb).startswith(
        f"{bomb}: refused: its part xl/sharedStrings.xml would unpack to {size:,} bytes, more "
        "than the 16,777,216 bytes"
    )
    assert measured["stdout"].startswith("1 added, "), measured["stdout"]
    assert measured["cpu_seconds"] < 20, measured


def test_worksheets_each_within_their_budget_are_refused_past_the_files_total(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two worksheets of 40 MB (a comment each): more than the 64 MiB all parts may hold."""
    monkeypatch.setenv("CRAG_MAX_FILE_CHARS", "1000")
    base = write_xlsx(tmp_path / "base.xlsx", rows=3)
    wide = folder / "wide.xlsx"
    with zipfile.ZipFile(base) as source, zipfile.ZipFile(wide, "w", zipfile.ZIP_DEFLATED) as out:
        for info in source.infolist():
            data = source.read(info).decode()
            if not info.filename.startswith("xl/worksheets/sheet"):
                out.writestr(info.filename, data)
                continue
            head, tail = data.split("<sheetData>", 1)
            _repeated(
                out, info.filename, head + "<!--", "x", 40_000_000, "-->" + "<sheetData>" + tail
            )

    with zipfile.ZipFile(wide) as archive:
        names = [info.filename for info in archive.infolist()]
        last = max(n for n in names if n.startswith("xl/worksheets/sheet"))
        upto = names[: names.index(last) + 1]
        declared = sum(archive.getinfo(n).file_size for n in upto if n.endswith((".xml", ".rels")))

    measured = measured_ingest(tmp_path, folder)
    assert failed_line(measured["stderr"], wide) == (
        f"{wide}: refused: its XML parts, up to its part {last}, would unpack to "
        f"{declared:,} bytes, more than the 67,108,864 bytes of XML read from one file for the "
        "characters it may hold (setting max_file_chars, environment variable "
        "CRAG_MAX_FILE_CHARS)"
    )
    assert measured["stdout"].startswith("1 added, "), measured["stdout"]
    assert measured["cpu_seconds"] < 20, measured


def test_a_presentation_with_a_50_mb_slide_is_refused_before_python_pptx_parses_it(
    tmp_path: Path, folder: Path
) -> None:
    bomb = write_huge_slide_pptx(folder / "slides.pptx", 8_500_000)
    assert bomb.stat().st_size < 1_000_000
    with zipfile.ZipFile(bomb) as archive:
        size = archive.getinfo("ppt/slides/slide1.xml").file_size
    assert size > 50_000_000

    measured = measured_ingest(tmp_path, folder)
    assert failed_line(measured["stderr"], bomb) == (
        f"{bomb}: refused: its part ppt/slides/slide1.xml would unpack to {size:,} bytes, more "
        "than the 8,388,608 bytes of XML read from one part of a presentation (a slide, its "
        "notes, a layout)"
    )
    assert measured["code"] == 0
    assert measured["stdout"].startswith("1 added, "), measured["stdout"]
    assert measured["cpu_seconds"] < 20, measured
    assert measured["grown_mb"] < 150, measured
