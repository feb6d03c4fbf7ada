"""The prefix cache of the onnxruntime decoder (crag.generator.prefix_cache), on plain arrays."""

from __future__ import annotations

import numpy as np

from crag.generator.prefix_cache import MAX_ENTRIES, MIN_SHARED_TOKENS, PrefixCache


def past_of(tokens: list[int]) -> dict[str, np.ndarray]:
    """A cache whose position i holds token i, shaped (batch, heads, positions, head size)."""
    values = np.asarray(tokens, np.float32).reshape(1, 1, -1, 1)
    return {"past_key_values.0.key": np.repeat(values, 2, axis=3)}


def test_the_longest_shared_start_is_given_cut_there_and_contiguous() -> None:
    cache = PrefixCache()
    start = list(range(100, 100 + MIN_SHARED_TOKENS + 4))
    cache.keep([*start, 1, 2], past_of([*start, 1, 2]))
    cache.keep([*start[:-2], 7], past_of([*start[:-2], 7]))
    length, past = cache.shared_start([*start, 1, 9, 9])
    assert length == len(start) + 1
    assert past is not None
    array = past["past_key_values.0.key"]
    assert array.shape == (1, 1, length, 2) and array.flags["C_CONTIGUOUS"]
    assert array[0, 0, :, 0].tolist() == [*start, 1]


def test_the_last_token_is_always_left_to_read_and_a_short_share_is_not_used() -> None:
    cache = PrefixCache()
    prompt = list(range(MIN_SHARED_TOKENS + 3))
    cache.keep(prompt, past_of(prompt))
    assert cache.shared_start(prompt)[0] == len(prompt) - 1
    assert cache.shared_start([*prompt[: MIN_SHARED_TOKENS - 1], 999, 998]) == (0, None)
    assert cache.shared_start([5, *prompt]) == (0, None)


def test_the_budget_and_the_entry_count_drop_the_least_recently_used() -> None:
    prompts = [[n] * 20 for n in range(3)]
    one = sum(a.nbytes for a in past_of(prompts[0]).values())
    cache = PrefixCache(budget_bytes=2 * one)
    for prompt in prompts[:2]:
        cache.keep(prompt, past_of(prompt))
    assert cache.shared_start(prompts[0])[0] == 19  # used: now the most recent
    cache.keep(prompts[2], past_of(prompts[2]))  # over budget: prompts[1] goes
    assert cache.kept_bytes == 2 * one
    assert cache.shared_start(prompts[1]) == (0, None)
    assert cache.shared_start(prompts[0])[0] == 19
    cache.keep(list(range(200)), past_of(list(range(200))))  # larger than the budget: not kept
    assert cache.shared_start(list(range(200))) == (0, None)
    many = PrefixCache()
    for n in range(MAX_ENTRIES + 2):
        many.keep([n] * 10, past_of([n] * 10))
    assert many.shared_start([0] * 10) == (0, None)
    assert many.shared_start([MAX_ENTRIES + 1] * 10)[0] == 9
