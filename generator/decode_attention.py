"""Attention for one new token per row over a long, padded key-value cache, without copies.

Why: a decoding step of the step decoder (:mod:`crag.generator.step_decoding`) reads one query per
row against every cached position, with padding masked. PyTorch's CPU scaled-dot-product
kernel handles that shape badly: for eight rows over 1,300 cached positions it took two thirds
of a SmolLM2-135M step (about 5.8 ms per layer, 235 ms a step), and transformers repeats the
grouped key and value heads for every query head before calling it whenever a mask is given.
Here the query heads of a group attend their shared key head with two matrix products (no
repeated heads), the softmax in float32.

Only the step decoder asks for it, per call (``decode_step=N``: attend the first ``N`` cached
positions, all of them with ``True``); every other call (prompts,
``generate``) goes to transformers' own SDPA attention unchanged, so batching-off answers stay
what they were.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

IMPLEMENTATION = "crag_sdpa"
"""The attention implementation name a local generator model is set to."""


def _decode_attention(
    query: Any, key: Any, value: Any, attention_mask: Any, scaling: float, positions: int
) -> Any:
    """Attention of one query position per row over the first ``positions`` cached positions.

    Returns (rows, 1, query heads, head dim). ``key`` and ``value`` may run past ``positions``
    (an :class:`~crag.generator.appendable_cache.AppendableLayer` passes its whole buffers, whose
    unfilled room is zeros): whole buffers because a matrix product over a view of their filled
    part is several times slower in bfloat16 on a CPU (it is copied first). The mask, when
    given, covers the last ``positions`` (transformers leaves it out for an unpadded batch).
    """
    import torch
    import torch.nn.functional as F

    rows, heads, _, dim = query.shape
    capacity = key.shape[2]
    groups = heads // key.shape[1]
    grouped = query.reshape(rows, key.shape[1], groups, dim)  # query heads by shared key head
    scores = torch.matmul(grouped, key.transpose(-1, -2))[..., :positions].float() * scaling
    if attention_mask is not None:
        mask = attention_mask[:, :, -1:, -positions:]  # (rows, 1, 1, positions)
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.float()
    weights = torch.softmax(scores, dim=-1).to(value.dtype)
    if capacity > positions:
        weights = F.pad(weights, (0, capacity - positions))
    output = torch.matmul(weights, value)  # (rows, key heads, groups, dim)
    return output.reshape(rows, heads, 1, dim).transpose(1, 2)


def crag_sdpa_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Any, None]:
    """SDPA attention, with :func:`_decode_attention` for the step decoder's steps."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    positions = kwargs.pop("decode_step", None)
    if positions is not None and query.shape[2] == 1:
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        count = key.shape[2] if positions is True else int(positions)
        return _decode_attention(query, key, value, attention_mask, scale, count), None
    output, weights = sdpa_attention_forward(
        module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
    )
    return output, weights


def use_decode_attention(model: Any) -> bool:
    """Set ``model`` to this implementation if it runs SDPA attention now; say whether it does.

    A model on another implementation (eager, flash) is left as it is: the step decoder then
    decodes with that one.
    """
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    current = model.config._attn_implementation
    if current == IMPLEMENTATION:
        return True
    if current != "sdpa":
        logger.info("step decoding keeps the model's %s attention", current)
        return False
    AttentionInterface.register(IMPLEMENTATION, crag_sdpa_attention)
    AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)
    model.set_attn_implementation(IMPLEMENTATION)
    return True
