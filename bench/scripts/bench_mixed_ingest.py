"""``crag ingest`` of generated mixed files in a fresh process: wall time and peak memory.

Writes ``--files`` files (default 200) cycling through the formats crag reads (text,
Markdown, HTML, CSV, JSON Lines, PDF, Word, PowerPoint, Excel, EPUB), each with its own
paragraphs, then runs ``crag ingest --no-server`` on the folder into a new store, ``--runs``
times (a new store each time), and prints the median wall time, the chunks per second and the
largest peak RSS of the child. For a before/after comparison in one sitting, run it once with
each version's ``crag`` (``--crag PATH``, or ``PYTHONPATH`` pointing at the other version's
package).

Usage: .venv/bin/python bench/scripts/bench_mixed_ingest.py [--files 200] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import docx
import openpyxl
import pptx
from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

logger = logging.getLogger("bench_mixed_ingest")

WORDS = (
    "river mountain library engine harbour orchard lantern bridge meadow castle signal "
    "voyage archive compass garden theatre market tunnel island forest station canal"
).split()
FORMATS = ("txt", "md", "html", "csv", "jsonl", "pdf", "docx", "pptx", "xlsx", "epub")


def _paragraphs(rng: random.Random, count: int) -> list[str]:
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 90))).capitalize() + "."
        for _ in range(count)
    ]


def _pdf(path: Path, pages: list[str]) -> None:
    writer = PdfWriter()
    font = writer._add_object(
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
    )
    for text in pages:
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
        lines = [text[i : i + 80] for i in range(0, len(text), 80)]
        shown = " ".join(f"({line}) Tj T*" for line in lines)
        stream = DecodedStreamObject()
        stream.set_data(f"BT /F1 11 Tf 14 TL 72 720 Td {shown} ET".encode("latin-1"))
        page[NameObject("/Contents")] = writer._add_object(stream)
    with path.open("wb") as out:
        writer.write(out)


def _epub(path: Path, chapters: list[str]) -> None:
    spine = "".join(f'<itemref idref="c{i}"/>' for i in range(len(chapters)))
    manifest = "".join(
        f'<item id="c{i}" href="c{i}.xhtml" media-type="application/xhtml+xml"/>'
        for i in range(len(chapters))
    )
    with zipfile.ZipFile(path, "w") as book:
        book.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        book.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument'
            ':xmlns:container"><rootfiles><rootfile full-path="content.opf" media-type='
            '"application/oebps-package+xml"/></rootfiles></container>',
        )
        book.writestr(
            "content.opf",
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
            '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Book</dc:title>'
            f"</metadata><manifest>{manifest}</manifest><spine>{spine}</spine></package>",
        )
        for i, text in enumerate(chapters):
            book.writestr(
                f"c{i}.xhtml",
                f'<html xmlns="http://www.w3.org/1999/xhtml"><body><h1>Chapter {i + 1}</h1>'
                f"<p>{text}</p></body></html>",
            )


def write_file(folder: Path, number: int, rng: random.Random) -> Path:
    """File ``number`` of the set, in the format its number picks."""
    kind = FORMATS[number % len(FORMATS)]
    path = folder / f"doc{number:04d}.{kind}"
    texts = _paragraphs(rng, rng.randint(3, 8))
    if kind in {"txt", "md"}:
        head = f"# Document {number}\n\n" if kind == "md" else ""
        path.write_text(head + "\n\n".join(texts) + "\n", encoding="utf-8")
    elif kind == "html":
        body = "".join(f"<h2>Part {i}</h2><p>{t}</p>" for i, t in enumerate(texts))
        path.write_text(f"<html><head><title>Doc {number}</title></head><body>{body}</body></html>")
    elif kind == "csv":
        rows = ["name,description"] + [f"item{i},{t[:200]}" for i, t in enumerate(texts)]
        path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    elif kind == "jsonl":
        lines = [json.dumps({"title": f"Entry {i}", "text": t}) for i, t in enumerate(texts)]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    elif kind == "pdf":
        _pdf(path, texts)
    elif kind == "docx":
        document = docx.Document()
        for i, text in enumerate(texts):
            document.add_heading(f"Section {i}", level=1)
            document.add_paragraph(text)
        document.save(str(path))
    elif kind == "pptx":
        deck = pptx.Presentation()
        for i, text in enumerate(texts):
            slide = deck.slides.add_slide(deck.slide_layouts[1])
            slide.shapes.title.text = f"Slide {i}"
            slide.placeholders[1].text = text
        deck.save(str(path))
    elif kind == "xlsx":
        workbook = openpyxl.Workbook()
        sheet = workbook.active
        assert sheet is not None
        sheet.append(["name", "description"])
        for i, text in enumerate(texts):
            sheet.append([f"item{i}", text])
        workbook.save(str(path))
    else:
        _epub(path, texts)
    return path


def ingest_once(crag: str, folder: Path, store: Path) -> tuple[float, int, str]:
    """One ``crag ingest`` in a fresh process: wall seconds, peak RSS (KiB), its summary line."""
    started = time.perf_counter()
    done = subprocess.run(
        [crag, "ingest", "--no-server", "--store", str(store), str(folder)],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "CRAG_DEFAULT_CORPUS": "false"},
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"crag ingest failed ({done.returncode}): {done.stderr[-2000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, peak, done.stdout.strip().splitlines()[-1]


def main() -> int:
    """Write the files, ingest them ``--runs`` times, print the figures."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--crag", default=str(Path(sys.executable).with_name("crag")))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crag-mixed-") as scratch:
        folder = Path(scratch) / "docs"
        folder.mkdir()
        rng = random.Random(7)
        for number in range(args.files):
            write_file(folder, number, rng)
        walls: list[float] = []
        summary = ""
        for run in range(args.runs):
            wall, peak, summary = ingest_once(args.crag, folder, Path(scratch) / f"store{run}")
            walls.append(wall)
            logger.info("run %d: %.1f s", run + 1, wall)
        logger.info(
            "%d files: median %.1f s over %d runs, peak RSS %.2f GB (largest run); %s; load %s",
            args.files,
            statistics.median(walls),
            args.runs,
            peak / 1024 / 1024,
            summary,
            " ".join(f"{x:.2f}" for x in os.getloadavg()),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
