"""The keys and values of recent prompts, so a prompt that starts as one of them is read from there.

Every prompt of a node starts the same way (the chat template's system turn, then the user
turn's first tags: 69 tokens of the generate node's 111-229 on the shipped SmolLM2), and a
causal model's cache at a position depends only on the tokens up to it. So the cache of an
earlier prompt, cut to the tokens it shares with a new one, is the new prompt's cache there,
and only the rest is read. onnxruntime gives the same logits either way (a maximum absolute
difference of 0.0 over SmolLM2's vocabulary on the generate node's prompts), so a reply's
tokens do not change; the read costs what the unshared tokens cost (docs/models.md).

Entries are whole prompts' caches (arrays onnxruntime returned, never written to again), kept
most recently used first within a byte budget.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PREFIX_CACHE_BYTES = 64 * 1024 * 1024
"""The budget of one decoder's kept caches: SmolLM2-135M's cache takes 46 KB a token (30
layers, keys and values of 3 heads of 64 float32), so about 1,400 prompt tokens."""

MIN_SHARED_TOKENS = 8
"""A shared start shorter than this is read again (cutting a cache copies it)."""

MAX_ENTRIES = 8
"""Prompts kept at most, whatever their size: a node's prompts share one start, so a few do."""


@dataclass(frozen=True)
class _Entry:
    tokens: tuple[int, ...]
    past: dict[str, Any]
    nbytes: int


class PrefixCache:
    """Recent prompts' key-value caches (thread-safe), to start a new prompt's read from."""

    def __init__(self, budget_bytes: int = PREFIX_CACHE_BYTES) -> None:
        self._budget = budget_bytes
        self._entries: list[_Entry] = []  # most recently used first
        self._lock = threading.Lock()

    @property
    def kept_bytes(self) -> int:
        """The bytes of the caches kept now."""
        with self._lock:
            return sum(entry.nbytes for entry in self._entries)

    def shared_start(self, prompt: Sequence[int]) -> tuple[int, dict[str, Any] | None]:
        """How many of ``prompt``'s first tokens a kept cache covers, and that cache cut there.

        At least the prompt's last token is left to read (its logits are the reply's first);
        ``(0, None)`` when no kept prompt shares :data:`MIN_SHARED_TOKENS` with it.
        """
        import numpy as np

        wanted = tuple(prompt)
        with self._lock:
            best, best_length = None, 0
            for entry in self._entries:
                length = _shared_length(entry.tokens, wanted)
                if length > best_length:
                    best, best_length = entry, length
            best_length = min(best_length, len(wanted) - 1)
            if best is None or best_length < MIN_SHARED_TOKENS:
                return 0, None
            self._entries.remove(best)
            self._entries.insert(0, best)
        past = {
            name: np.ascontiguousarray(array[:, :, :best_length, :])
            for name, array in best.past.items()
        }
        return best_length, past

    def keep(self, prompt: Sequence[int], past: dict[str, Any]) -> None:
        """Keep ``past``, the cache after exactly ``prompt``; the least recent go over budget."""
        nbytes = sum(int(array.nbytes) for array in past.values())
        if nbytes > self._budget:
            return
        entry = _Entry(tuple(prompt), past, nbytes)
        with self._lock:
            self._entries = [e for e in self._entries if e.tokens != entry.tokens]
            self._entries.insert(0, entry)
            del self._entries[MAX_ENTRIES:]
            while sum(e.nbytes for e in self._entries) > self._budget:
                self._entries.pop()


def _shared_length(kept: tuple[int, ...], wanted: tuple[int, ...]) -> int:
    """The length of the two token sequences' common start."""
    length = 0
    for a, b in zip(kept, wanted, strict=False):
        if a != b:
            break
        length += 1
    return length
