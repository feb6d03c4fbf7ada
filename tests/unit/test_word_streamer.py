"""The onnxruntime generator's text pieces are what transformers' ``TextIteratorStreamer`` cuts."""

from __future__ import annotations

import queue
import threading
from typing import Any

import numpy as np
import pytest

from crag.generator.chat_tokenizer import chat_tokenizer_for
from crag.generator.smollm2 import ensure_smollm2
from crag.generator.word_streamer import WordStreamer, is_cjk

REPLIES = [
    "The Mona Lisa is the work of Leonardo da Vinci. [1]",
    "Line one\nline two\n\nand a last line without its break",
    "東京は日本の首都です。 Tokyo is the capital",
    "Emoji 🙂 split across byte tokens, ünïcödé, and <|im_end|> inside",
    "   spaces   everywhere   ",
    "",
]


def _pieces(streamer: Any, tokens: list[int], prompt: list[int] | None) -> list[str]:
    if prompt is not None:  # transformers' streamer skips the prompt generate puts first
        streamer.put(np.array([prompt]))
    for token in tokens:
        streamer.put(np.array([token]) if prompt is not None else [token])
    streamer.end()
    return [str(piece) for piece in streamer]


@pytest.mark.parametrize("reply", REPLIES)
def test_the_pieces_are_transformers_pieces(reply: str) -> None:
    from transformers.generation.streamers import TextIteratorStreamer

    tokenizer = chat_tokenizer_for(ensure_smollm2())
    assert tokenizer is not None
    tokens = tokenizer.encode(reply)
    theirs = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)  # type: ignore[arg-type]
    ours = WordStreamer(lambda ids: tokenizer.decode(ids, skip_special_tokens=True))
    expected = _pieces(theirs, tokens, prompt=[1, 2, 3])
    assert _pieces(ours, tokens, prompt=None) == expected
    assert "".join(expected) == tokenizer.decode(tokens, skip_special_tokens=True)


def test_pieces_arrive_on_another_thread_and_a_silent_stream_times_out() -> None:
    streamer = WordStreamer(lambda ids: " ".join(f"w{i}" for i in ids) + " ", timeout=5.0)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.extend(streamer))
    reader.start()
    for token in (1, 2, 3):
        streamer.put([token])
    streamer.end()
    reader.join(timeout=5.0)
    assert "".join(received) == "w1 w2 w3 "
    silent = WordStreamer(lambda ids: "", timeout=0.05)
    with pytest.raises(queue.Empty):
        next(iter(silent))


def test_cjk_ideographs_and_nothing_else() -> None:
    assert is_cjk("東") and is_cjk("\U00020000")
    assert not any(is_cjk(c) for c in "aé🙂す")
