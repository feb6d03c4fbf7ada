"""Debian's Chromium, headless, for measuring and testing the chat page.

Playwright (PyPI, the ``dev`` extra) drives ``/usr/bin/chromium`` (``CRAG_CHROMIUM`` names
another; ``scripts/install_browser.sh`` installs it): Playwright's own browser download cannot be
reached from these machines. The flags keep Chromium off the network: its background requests
(updates, sync, field trials) would otherwise be refused by a closed network, many at a time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("CRAG_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def chromium_missing() -> str | None:
    """Why the browser cannot be driven here, or ``None``."""
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is missing: run scripts/install_browser.sh (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is missing: install the dev extra (make install-dev)"
    return None


@contextmanager
def headless_chromium() -> Iterator[Any]:
    """A headless Chromium (Playwright's ``Browser``), closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS))
        try:
            yield browser
        finally:
            browser.close()
