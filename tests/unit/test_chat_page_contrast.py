"""The chat page's colours meet WCAG 2.x AA contrast (4.5:1) for the text they carry.

The pairs are the page's text on its backgrounds (``app/web/src/app.css``'s custom properties):
body and muted text on white and on the panels, links and buttons, the white text of the action
badges and of the Ask button, the error box, the upload results and highlighted (kept) strips.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CSS = Path(__file__).resolve().parents[2] / "app" / "web" / "src" / "app.css"
AA_NORMAL_TEXT = 4.5


def _variables() -> dict[str, str]:
    text = CSS.read_text(encoding="utf-8")
    return dict(re.findall(r"--([a-z-]+):\s*(#[0-9a-fA-F]{6})", text))


def _colour(name: str) -> str:
    return name if name.startswith("#") else _variables()[name]


def _luminance(hex_colour: str) -> float:
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(foreground: str, background: str) -> float:
    """The WCAG contrast ratio of two colours, each a ``#rrggbb`` or a variable of app.css."""
    lighter, darker = sorted(
        (_luminance(_colour(foreground)), _luminance(_colour(background))), reverse=True
    )
    return (lighter + 0.05) / (darker + 0.05)


PAIRS = [
    ("ink", "paper"),
    ("ink", "soft"),
    ("ink", "kept"),
    ("muted", "paper"),
    ("muted", "soft"),
    ("accent", "paper"),
    ("accent", "soft"),
    ("#ffffff", "accent"),
    ("#ffffff", "correct"),
    ("#ffffff", "ambiguous"),
    ("#ffffff", "incorrect"),
    ("#ffffff", "muted"),
    ("incorrect", "#fdecea"),
    ("incorrect", "soft"),
    ("correct", "soft"),
]


@pytest.mark.parametrize(("foreground", "background"), PAIRS)
def test_text_meets_aa_contrast(foreground: str, background: str) -> None:
    assert contrast(foreground, background) >= AA_NORMAL_TEXT


def test_the_check_can_fail() -> None:
    assert contrast("#777777", "#ffffff") < AA_NORMAL_TEXT
    assert round(contrast("#000000", "#ffffff"), 1) == 21.0
