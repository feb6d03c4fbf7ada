"""Sections from a run of headings and blocks: each heading starts one, under its path."""

from __future__ import annotations

from crag.documents.document import Section

HEADING_SEPARATOR = " > "
"""Between the headings of a path: ``"Method > Evaluator"``."""


class Outline:
    """Gathers blocks of text under the headings they follow.

    Each heading starts a section whose ``headings`` is the path of headings down to it (a
    heading of level N closes the open headings of level N and deeper). The text before the
    first heading is a section without headings. A section holding nothing but its heading
    line is dropped: the heading is already in the path of what follows it.
    """

    def __init__(self, part: int | None = None) -> None:
        self.part = part
        self._path: list[tuple[int, str]] = []
        self._blocks: list[str] = []
        self._heading_only = False
        self._sections: list[Section] = []

    def heading(self, level: int, title: str, line: str | None = None) -> None:
        """Start a section under heading ``title`` at ``level`` (1 outermost).

        ``line`` is the heading as it appears in the text (``"## Method"``), default ``title``.
        """
        self._flush()
        while self._path and self._path[-1][0] >= level:
            self._path.pop()
        self._path.append((level, title))
        self._blocks = [line or title]
        self._heading_only = True

    def add(self, text: str) -> None:
        """Add a block of text to the current section (blank text is ignored)."""
        if text.strip():
            self._blocks.append(text)
            self._heading_only = False

    def sections(self) -> list[Section]:
        """The sections gathered so far, in order."""
        self._flush()
        return list(self._sections)

    def _flush(self) -> None:
        if self._blocks and not self._heading_only:
            path = HEADING_SEPARATOR.join(title for _, title in self._path)
            self._sections.append(
                Section(
                    "\n\n".join(self._blocks),
                    headings=path or None,
                    part=self.part if not path else None,
                )
            )
        self._blocks = []
        self._heading_only = False
