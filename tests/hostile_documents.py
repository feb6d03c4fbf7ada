"""Small files that stand for huge documents, written byte by byte (no library would write them).

A PDF whose page tree names one page object thousands of times (every reader counts each
reference as a page), and a Word file of many one-word (or empty) paragraphs: a few kilobytes
on disk for many thousands of pages or paragraphs, a few hundred kilobytes for tens of
millions.
"""

from __future__ import annotations

import zipfile
from pathlib import Path


def write_repeated_page_pdf(path: Path, references: int, text: str = "The same page.") -> Path:
    """A PDF of ``references`` pages that are all one page object (about 6 bytes a page)."""
    content = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode("latin-1")
    kids = " ".join(["3 0 R"] * references)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {references} >>".encode(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets: list[int] = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    path.write_bytes(bytes(out))
    return path


_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" '
    'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/word/document.xml" ContentType="application/'
    'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
    "</Types>"
)
_RELATIONSHIPS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
    'relationships/officeDocument" Target="word/document.xml"/>'
    "</Relationships>"
)


_DOCUMENT_START = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
    "<w:body>"
)
_DOCUMENT_END = "</w:body></w:document>"


def write_many_paragraphs_docx(path: Path, paragraphs: int, text: str = "p") -> Path:
    """A Word file of ``paragraphs`` paragraphs of ``text`` (compressed: a few bytes each)."""
    return write_repeated_xml_docx(path, f"<w:p><w:r><w:t>{text}</w:t></w:r></w:p>", paragraphs)


def write_empty_paragraphs_docx(path: Path, paragraphs: int) -> Path:
    """A Word file of ``paragraphs`` empty paragraphs (``<w:p/>``, 6 bytes each unpacked).

    35 million of them unpack to 210 MB (the decompression bomb of a bug report) from a file
    of a few hundred kilobytes.
    """
    return write_repeated_xml_docx(path, "<w:p/>", paragraphs)


def write_repeated_xml_docx(path: Path, xml: str, times: int, batch: int = 100_000) -> Path:
    """A Word file whose body is ``xml`` ``times`` over, streamed into the archive.

    The body is written ``batch`` copies at a time, so that writing a file that unpacks to
    hundreds of megabytes takes a few megabytes of memory.
    """
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", _CONTENT_TYPES)
        archive.writestr("_rels/.rels", _RELATIONSHIPS)
        with archive.open("word/document.xml", "w") as document:
            document.write(_DOCUMENT_START.encode())
            chunk = (xml * batch).encode()
            full, rest = divmod(times, batch)
            for _ in range(full):
                document.write(chunk)
            document.write((xml * rest).encode())
            document.write(_DOCUMENT_END.encode())
    return path
