"""The chat page's build (``app/web/dist``, committed, shipped) is the build of its sources.

``make page`` (npm, at development time) writes ``dist/BUILD.json`` with the SHA-256 of every
source file; a source changed without a rebuild fails here, on a machine without Node.js.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

WEB = Path(__file__).resolve().parents[2] / "app" / "web"


def test_the_committed_build_is_the_build_of_the_sources() -> None:
    recorded = json.loads((WEB / "dist" / "BUILD.json").read_text(encoding="utf-8"))["sources"]
    sources = ["package.json", "package-lock.json", "build.mjs"]
    sources += [f"src/{p.name}" for p in sorted((WEB / "src").iterdir())]
    current = {name: hashlib.sha256((WEB / name).read_bytes()).hexdigest() for name in sources}
    assert current == recorded, "app/web changed since its build: run `make page` and commit dist/"


def test_the_page_loads_nothing_from_another_origin() -> None:
    page = (WEB / "dist" / "index.html").read_text(encoding="utf-8")
    assert not re.search(r"""(?:src|href)=["'](?:https?:)?//""", page)
    bundle = (WEB / "dist" / "app.js").read_text(encoding="utf-8")
    assert (
        "fonts.googleapis" not in bundle
        and "cdn.jsdelivr" not in bundle
        and "unpkg.com" not in bundle
    )
