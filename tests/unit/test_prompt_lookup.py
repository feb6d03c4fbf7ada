"""Drafted tokens (crag.generator.prompt_lookup) and the decoder's use of them.

The decoder's loop runs here over a fake model that copies like an induction head (after a
token it predicts what followed that token's previous occurrence) and keeps its context in
the cache it returns, so the test sees every cache the loop hands back: each must hold exactly
the prompt and the reply's tokens but the last, and every reply must be the one decoded a
token a call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from crag.generator.onnx_decoding import DecodingRules, OnnxDecoder
from crag.generator.prefix_cache import PrefixCache
from crag.generator.prompt_lookup import DRAFT_TOKENS, drafted_tokens

VOCABULARY = 50
END = 0


def test_drafts_follow_the_latest_longest_match_of_the_reply_end() -> None:
    prompt = [5, 6, 7, 8, 9, 1, 6, 7, 3, 4]
    assert drafted_tokens(prompt, [6, 7], limit=4) == [3, 4, 6, 7]  # the latest 2-token match
    assert drafted_tokens(prompt, [5, 6, 7], limit=2) == [8, 9]  # the 3-token match first
    assert drafted_tokens(prompt, [2, 7]) == []  # a single shared token is not a match
    assert drafted_tokens(prompt, [6, 7], limit=0) == []
    assert drafted_tokens([1, 2], [1, 2]) == [1, 2]  # the prompt's end joins the reply's start
    assert len(drafted_tokens(list(range(20)) * 2, [3, 4])) == DRAFT_TOKENS


def induction_logits(context: Sequence[int]) -> np.ndarray:
    """Logits of a model that continues the context as it went on after its last token's first
    occurrence (drafts follow the latest, so some are refused)."""
    logits = np.zeros(VOCABULARY, np.float32)
    last = context[-1]
    for start in range(len(context) - 1):
        if context[start] == last:
            logits[context[start + 1]] = 2.0
            break
    logits[(last * 7 + 3) % VOCABULARY] += 1.0  # otherwise a fixed successor
    return logits


def fake_decoder(checks_drafts: bool) -> tuple[OnnxDecoder, list[int]]:
    """An OnnxDecoder over :func:`induction_logits`; the list gets each call's token count."""
    decoder = object.__new__(OnnxDecoder)
    decoder._past_names = ["past_key_values.0.key"]
    decoder._heads, decoder._head_size = 1, 1
    decoder._prefixes = PrefixCache()
    decoder._returns_positions = True
    decoder.checks_drafts = checks_drafts
    calls: list[int] = []

    def run(
        tokens: Sequence[int], past: dict[str, Any], total: int, token: Any, positions: int = 1
    ) -> tuple[Any, dict[str, Any]]:
        held = past["past_key_values.0.key"][0, 0, :, 0].astype(int).tolist()
        assert len(held) + len(tokens) == total
        context = [*held, *tokens]
        calls.append(len(tokens))
        rows = [induction_logits(context[: len(held) + i + 1]) for i in range(len(tokens))]
        present = np.asarray(context, np.float32).reshape(1, 1, -1, 1)
        return np.stack(rows[-positions:]), {"past_key_values.0.key": present}

    decoder._run = run  # type: ignore[method-assign]
    return decoder, calls


def rules(limit: int, ngram: int = 0, **kwargs: Any) -> DecodingRules:
    return DecodingRules(
        max_new_tokens=limit, end_ids=frozenset({END}), no_repeat_ngram_size=ngram, **kwargs
    )


PROMPTS = (
    [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 11, 12],  # continues by copying
    [30, 31, 32, 30, 31, 33, 34, 30, 31],  # two continuations of one pair
    [5, 9, 40, 41, 42, 43, 9, 40, 44, 45, 9],
)


@pytest.mark.parametrize("ngram", [0, 2])
@pytest.mark.parametrize("limit", [1, 3, 30])
def test_drafted_replies_are_the_token_by_token_ones_and_the_cache_is_cut_right(
    ngram: int, limit: int
) -> None:
    plain, plain_calls = fake_decoder(checks_drafts=False)
    drafting, drafting_calls = fake_decoder(checks_drafts=True)
    for prompt in PROMPTS:
        streamed: list[int] = []
        want = plain.greedy(prompt, rules(limit, ngram))
        got = drafting.greedy(prompt, rules(limit, ngram, on_token=streamed.append))
        assert got == want and streamed == got
        assert len(got) <= limit
    if limit == 30 and ngram == 0:
        assert len(drafting_calls) < len(plain_calls)  # the copies were drafted


def test_an_end_token_or_a_stop_string_inside_the_drafts_ends_the_reply_there() -> None:
    prompt = [7, 8, 9, END, 7, 8]
    for checks in (False, True):
        decoder, _ = fake_decoder(checks)
        assert decoder.greedy(prompt, rules(20)) == [9]  # then the end token, drafted or not

    def text(ids: list[int]) -> str:
        return " ".join(map(str, ids))

    long = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 11, 12]
    stopped = [
        fake_decoder(checks)[0].greedy(long, rules(20, stop=("15",), decode=text))
        for checks in (False, True)
    ]
    assert stopped[0] == stopped[1] == [13, 14, 15]
