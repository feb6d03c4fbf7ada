"""How the bundled corpus names its documents' sources (no store code: cheap to import)."""

SOURCE_PREFIX = "wikipedia:"
"""Source of a bundled Wikipedia summary: this prefix and the page title."""
