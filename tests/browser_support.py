"""Headless Chromium for the chat page's tests: Debian's ``chromium``, driven by Playwright.

``make test`` installs both (``scripts/install_browser.sh``: Debian's ``chromium`` package;
Playwright from PyPI, the ``dev`` extra); :mod:`crag_bench.browser` launches it off the network.
Every request the page makes to another origin is aborted and recorded, so a page that needed
the internet would fail its test.

Screenshots go to the test's temporary folder, and also to ``CRAG_CHAT_SCREENSHOTS`` when that
is set (how ``docs/images/chat-*.png`` are made: see docs/chat.md).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crag_bench.browser import chromium_missing, headless_chromium

__all__ = ["PHONE", "PageWatch", "browser", "chromium_missing", "open_page", "screenshot"]

DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


@dataclass
class PageWatch:
    """What a page asked of the network: requests outside its server, and failed responses."""

    origin: str
    foreign: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)


browser = headless_chromium
"""A headless Chromium, closed afterwards (:func:`crag_bench.browser.headless_chromium`)."""


def open_page(
    launched: Any, origin: str, viewport: dict[str, int] = DESKTOP, *, token: str = ""
) -> tuple[Any, PageWatch]:
    """A new page on ``origin``'s chat page, ready; requests elsewhere aborted and recorded.

    With ``token``, the page is opened as ``make serve`` prints it (``/chat/?token=...``),
    which signs the browser in.
    """
    context = launched.new_context(viewport=viewport)
    page = context.new_page()
    watch = PageWatch(origin)

    def guard(route: Any) -> None:
        if route.request.url.startswith(origin):
            route.continue_()
        else:
            watch.foreign.append(route.request.url)
            route.abort()

    page.route("**/*", guard)
    page.on("console", lambda m: watch.console_errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{origin}/chat/?token={token}" if token else f"{origin}/chat/")
    page.wait_for_selector("body[data-ready='true']", timeout=60_000)
    return page, watch


def screenshot(page: Any, folder: Path, name: str) -> Path:
    """Save a full-page screenshot as ``name``.png in ``folder`` (and ``CRAG_CHAT_SCREENSHOTS``)."""
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    extra = os.environ.get("CRAG_CHAT_SCREENSHOTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(extra) / path.name)
    return path
