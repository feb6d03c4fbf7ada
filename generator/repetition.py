"""A guard against degenerate repetition: no n-gram of the reply's own tokens twice.

SmolLM2-135M, decoding greedily, can fall into a loop ("The Grapes of Wrath: The Grapes of
Wrath: ..." until the token limit). transformers' ``no_repeat_ngram_size`` bans a repeated
n-gram, but over the whole sequence, the prompt included: a reader that must copy names and
phrases from the knowledge in its prompt would then be barred from copying any four tokens it
has read. This guard applies the same rule to the reply's tokens only: a token that would
complete an n-gram the reply already holds gets probability zero. The same function serves
``generate`` (as a logits processor) and the step decoder (:mod:`crag.generator.step_decoding`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

DEFAULT_NGRAM = 4
"""Length of the n-grams a reply may not repeat (tokens); 0 turns the guard off."""


def banned_tokens(generated: Sequence[int], size: int) -> set[int]:
    """Tokens that would complete an n-gram of ``size`` already in ``generated``."""
    if size < 1 or len(generated) < size:
        return set()
    prefix = tuple(generated[len(generated) - size + 1 :]) if size > 1 else ()
    banned: set[int] = set()
    for start in range(len(generated) - size + 1):
        if tuple(generated[start : start + size - 1]) == prefix:
            banned.add(int(generated[start + size - 1]))
    return banned


def block_repeats(logits: Any, rows: Sequence[Sequence[int]], size: int) -> Any:
    """``logits`` (rows, vocabulary) with each row's banned next tokens set to ``-inf``."""
    if size < 1:
        return logits
    for index, generated in enumerate(rows):
        banned = banned_tokens(generated, size)
        if banned:
            logits[index, sorted(banned)] = float("-inf")
    return logits


class ReplyNGramBlocker:
    """A transformers logits processor: :func:`block_repeats` over the tokens after the prompt."""

    def __init__(self, prompt_length: int, size: int = DEFAULT_NGRAM) -> None:
        """Guard the tokens from position ``prompt_length`` on (the prompt is not counted)."""
        self.prompt_length = prompt_length
        self.size = size

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        """Ban, per row, the tokens that would repeat an n-gram of the reply."""
        rows = [row[self.prompt_length :].tolist() for row in input_ids]
        return block_repeats(scores, rows, self.size)
