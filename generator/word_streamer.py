"""A reply's tokens turned into text pieces as transformers' ``TextIteratorStreamer`` turns them.

The onnxruntime generator streams without importing transformers
(:mod:`crag.generator.chat_tokenizer` says why), so it cuts its pieces here with the same rule
(transformers 5.23's ``generation/streamers.py``): the tokens so far are decoded as one text,
and what is new in it is given up to its last space, all of it at a line break (which also
starts the next text afresh) or after a CJK character; the end gives the rest. The pieces are
what transformers' streamer gives for the same tokens
(``tests/unit/test_word_streamer.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from queue import Queue

_CJK_BLOCKS = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
"""The CJK Unified Ideographs blocks after whose characters a piece may end."""


def is_cjk(character: str) -> bool:
    """Whether ``character`` is a CJK ideograph (transformers' ``_is_chinese_char``)."""
    code = ord(character)
    return any(low <= code <= high for low, high in _CJK_BLOCKS)


class WordStreamer:
    """Text pieces of whole words for the reply's tokens, ``put`` one by one then ``end``.

    Iterating gives the pieces as they come, from another thread than the one that puts; a
    piece not given within ``timeout`` seconds raises ``queue.Empty``.
    """

    def __init__(self, decode: Callable[[Sequence[int]], str], timeout: float | None = None):
        self._decode = decode
        self._timeout = timeout
        self._queue: Queue[str | None] = Queue()
        self._tokens: list[int] = []
        self._given = 0

    def put(self, tokens: Sequence[int]) -> None:
        """Add reply tokens; give what of the text they complete."""
        self._tokens.extend(int(token) for token in tokens)
        text = self._decode(self._tokens)
        if text.endswith("\n"):
            piece = text[self._given :]
            self._tokens, self._given = [], 0
        elif text and is_cjk(text[-1]):
            piece = text[self._given :]
            self._given += len(piece)
        else:
            piece = text[self._given : text.rfind(" ") + 1]
            self._given += len(piece)
        self._queue.put(piece, timeout=self._timeout)

    def end(self) -> None:
        """Give the rest of the text, then stop the iteration."""
        piece = self._decode(self._tokens)[self._given :] if self._tokens else ""
        self._tokens, self._given = [], 0
        self._queue.put(piece, timeout=self._timeout)
        self._queue.put(None, timeout=self._timeout)

    def __iter__(self) -> Iterator[str]:
        while (piece := self._queue.get(timeout=self._timeout)) is not None:
            yield piece
