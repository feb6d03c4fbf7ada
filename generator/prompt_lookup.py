"""Drafted reply tokens from the prompt: prompt lookup (Saxena, 2023), for greedy decoding.

A reply grounded in retrieved knowledge copies much of it ("The Mona Lisa is a half-length
portrait painting by the Italian artist Leonardo da Vinci"). When the reply's last few tokens
also occur in the prompt, the tokens that followed them there are a cheap guess at what comes
next. The decoder reads the guesses with the last chosen token in one model call and keeps the
longest run of them that greedy decoding would have chosen anyway, plus the token the model
chose after that run: every kept token is the model's own greedy choice, so the reply is the
one decoded token by token, in fewer calls. On a CPU one call costs about the same for one
token as for a few: reading the 540 MB of weights is the cost, not the arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence

DRAFT_TOKENS = 3
"""Tokens drafted at most per call (3 and 5 about alike on 31 nq-dev prompts, 2 slower:
docs/models.md)."""

MATCH_SIZES = (3, 2)
"""The reply-end lengths looked up in the prompt, longest first. A single token matches too
often where it does not continue the same way, and a failed draft costs a wider call."""


def drafted_tokens(
    prompt: Sequence[int], reply: Sequence[int], limit: int = DRAFT_TOKENS
) -> list[int]:
    """Up to ``limit`` tokens that followed the reply's last tokens where they last occur.

    The reply's last :data:`MATCH_SIZES` tokens (the prompt's end joined to the reply, so a
    reply's first tokens can match too) are looked for in the prompt and the reply before them,
    the latest occurrence first; the tokens after it are the draft. Empty when nothing matches.
    """
    if limit < 1:
        return []
    context = [*prompt, *reply]
    for size in MATCH_SIZES:
        if len(context) <= size:
            continue
        tail = context[-size:]
        for start in range(len(context) - size - 1, -1, -1):
            if context[start : start + size] == tail:
                follow = context[start + size : start + size + limit]
                if follow:
                    return follow
    return []
