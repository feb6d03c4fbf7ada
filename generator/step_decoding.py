"""Greedy decoding of a changing set of prompts over one key-value cache, a token per step.

Why not ``model.generate`` on a padded batch: on a CPU a decoding step of a small model costs
about the same for eight sequences as for one, so decoding pays off only when many rows share
each step; but a padded ``generate`` call admits rows only when it starts, so rows that arrive
a moment later wait for the whole batch, and prompts of different lengths padded to one length
cost what reading the longest does. Here every prompt is read alone (no padding), its keys and
values join the running batch's cache (left-padded to one length, the padding hidden by the
attention mask), and each step decodes one token for every row; a row leaves as soon as it
ends. Each row is continued as if alone, up to floating-point rounding in the batched matrix
products (identical in float32 in the tests).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from crag.core.cancellation import CancelToken
from crag.generator.batching import GenerationRequest
from crag.generator.decode_attention import use_decode_attention
from crag.generator.repetition import block_repeats


@dataclass(eq=False)
class _Row:
    request: GenerationRequest
    tokens: list[int]
    """New tokens so far; the last one is not yet in the cache."""
    length: int
    """Real (unpadded) positions of this row in the cache."""


def end_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """Tokens that end a reply: the model's end-of-sequence ids and the tokenizer's."""
    return generation_end_ids(model.generation_config.eos_token_id, tokenizer)


def generation_end_ids(configured: Any, tokenizer: Any) -> set[int]:
    """Tokens that end a reply: a generation config's end-of-sequence id(s) and the tokenizer's."""
    ids = set(configured if isinstance(configured, list) else [configured])
    return {int(i) for i in ids | {tokenizer.eos_token_id} if i is not None}


def _blocks(model: Any) -> list[Any]:
    """The model's repeated blocks (its decoder layers: its longest ``ModuleList``), else it."""
    import torch

    lists: list[list[Any]] = [
        list(module) for module in model.modules() if isinstance(module, torch.nn.ModuleList)
    ]
    return max(lists, key=len) if lists else [model]


@contextmanager
def stop_when_cancelled(model: Any, token: CancelToken | None) -> Iterator[None]:
    """Within the block, every forward pass of ``model`` checks ``token`` before each layer.

    A stopping criterion is only asked between tokens, and a prompt is read in one forward
    pass: a run cancelled while a long prompt was read kept the model until the read was over
    (a run started right after waited 8.6-9.2 s for SmolLM2 on 2 CPU cores). Checked before
    each of the model's layers, the token lets go within one layer's time; nothing is computed
    differently. The caller holds the model's lock: the check applies to whoever runs the
    model meanwhile.

    Raises:
        RunCancelledError: From the forward pass, once ``token`` is cancelled.
    """
    if token is None:
        yield
        return

    def check(module: Any, args: Any) -> None:
        token.raise_if_cancelled()

    handles = [block.register_forward_pre_hook(check) for block in _blocks(model)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _left_pad(tensor: Any, width: int) -> Any:
    """``tensor`` (batch, heads, positions, dim) with ``width`` zero positions in front."""
    import torch.nn.functional as F

    return F.pad(tensor, (0, 0, width, 0)) if width else tensor


class StepDecoder:
    """A batch of rows decoded together; rows join (:meth:`admit`) and leave between steps.

    Greedy, as :class:`crag.generator.local.LocalChatModel` decodes: the next token is the most
    likely one. A row ends at an end-of-sequence token (left out of its output), at its token
    limit, when its text contains one of its stop strings, or when its
    run is cancelled. Not thread-safe: one thread drives it at a time.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        decode_attention: bool = True,
        append_in_place: bool = True,
        no_repeat_ngram_size: int = 0,
    ) -> None:
        """Decode with ``model`` and ``tokenizer``.

        Args:
            model: A transformers causal LM.
            tokenizer: Its tokenizer (stop strings are matched on decoded text).
            decode_attention: Decode steps with :mod:`crag.generator.decode_attention` when the
            model
                runs SDPA attention (else with the model's own attention).
            append_in_place: With the decode attention, hold the cache in
                :class:`~crag.generator.appendable_cache.AppendableLayer` layers (a step writes its
                keys into spare room) rather than transformers' (a step copies the whole cache).
            no_repeat_ngram_size: A row never repeats an n-gram of its own new tokens this
                long (:mod:`crag.generator.repetition`); 0: off.
        """
        self._model = model
        self._tokenizer = tokenizer
        self._eos = end_token_ids(model, tokenizer)
        fast = decode_attention and use_decode_attention(model)
        self._decode_attention = fast
        self._append_in_place = fast and append_in_place
        self._no_repeat = no_repeat_ngram_size
        self._rows: list[_Row] = []
        self._cache: Any = None
        self._mask: Any = None
        """(rows, positions) attention mask of the cache: 1 real, 0 padding."""

    @property
    def size(self) -> int:
        """Rows decoding now."""
        return len(self._rows)

    def admit(self, request: GenerationRequest) -> None:
        """Read ``request``'s prompt alone and add it to the batch with its first new token.

        Raises:
            RunCancelledError: The request's run was cancelled while its prompt was read
                (:func:`stop_when_cancelled`); the batch is left as it was.
        """
        import torch
        from transformers import DynamicCache

        from crag.generator.appendable_cache import make_appendable

        device = self._model.device
        cache = DynamicCache(config=self._model.config)
        with torch.inference_mode(), stop_when_cancelled(self._model, request.token):
            ids = torch.tensor([request.input_ids], device=device)
            output = self._model(
                input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1
            )
        first = int(output.logits[0, -1].argmax())
        row = _Row(request, [first], len(request.input_ids))
        mask = torch.ones((1, row.length), dtype=torch.long, device=device)
        if self._cache is None:
            if self._append_in_place:  # only the decode attention reads appendable layers
                make_appendable(cache)
            self._cache, self._mask = cache, mask
        else:
            self._merge(cache, mask)
        self._rows.append(row)

    def _merge(self, cache: Any, mask: Any) -> None:
        """Append one row's cache to the batch's, left-padding the shorter to the other."""
        import torch

        from crag.generator.appendable_cache import set_layer

        width = self._mask.shape[1]
        grow, pad = max(0, mask.shape[1] - width), max(0, width - mask.shape[1])
        for batch_layer, row_layer in zip(self._cache.layers, cache.layers, strict=True):
            set_layer(
                batch_layer,
                torch.cat([_left_pad(batch_layer.keys, grow), _left_pad(row_layer.keys, pad)]),
                torch.cat([_left_pad(batch_layer.values, grow), _left_pad(row_layer.values, pad)]),
            )
        padded = torch.nn.functional.pad
        self._mask = torch.cat([padded(self._mask, (grow, 0)), padded(mask, (pad, 0))])

    def step(self) -> None:
        """Decode one more token for every row that has not ended."""
        import torch

        device = self._model.device
        ids = torch.tensor([[row.tokens[-1]] for row in self._rows], device=device)
        positions = torch.tensor([[row.length] for row in self._rows], device=device)
        ones = torch.ones((len(self._rows), 1), dtype=torch.long, device=device)
        mask = torch.cat([self._mask, ones], dim=1)
        with torch.inference_mode():
            output = self._model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=self._cache,
                use_cache=True,
                **({"decode_step": mask.shape[1]} if self._decode_attention else {}),
            )
            logits = block_repeats(
                output.logits[:, -1].float(), [row.tokens for row in self._rows], self._no_repeat
            )
            tokens = logits.argmax(dim=-1).tolist()
        self._mask = mask
        for row, token in zip(self._rows, tokens, strict=True):
            row.length += 1
            row.tokens.append(int(token))

    def take_finished(self) -> list[GenerationRequest]:
        """Remove the rows that have ended and return their requests, each with its output."""
        finished = [row for row in self._rows if self._has_ended(row)]
        if not finished:
            return []
        for row in finished:
            ended = row.tokens[-1] in self._eos
            row.request.output = row.tokens[:-1] if ended else row.tokens
        keep = [index for index, row in enumerate(self._rows) if row not in finished]
        self._rows = [self._rows[index] for index in keep]
        if not self._rows:
            self._cache = self._mask = None
        else:
            self._select(keep)
        return [row.request for row in finished]

    def _select(self, keep: list[int]) -> None:
        """Keep only rows ``keep`` of the cache, dropping padding columns no row needs."""
        import torch

        from crag.generator.appendable_cache import set_layer

        index = torch.tensor(keep, device=self._mask.device)
        mask = self._mask.index_select(0, index)
        start = int(mask.any(dim=0).int().argmax())  # first position some row uses
        self._mask = mask[:, start:]
        for layer in self._cache.layers:
            set_layer(
                layer,
                layer.keys.index_select(0, index)[:, :, start:],
                layer.values.index_select(0, index)[:, :, start:],
            )

    def fail_all(self) -> list[GenerationRequest]:
        """Drop every row (after an error) and return their requests."""
        requests = [row.request for row in self._rows]
        self._rows, self._cache, self._mask = [], None, None
        return requests

    def _has_ended(self, row: _Row) -> bool:
        request = row.request
        if request.token is not None and request.token.cancelled:
            return True
        if row.tokens[-1] in self._eos or len(row.tokens) >= request.max_new_tokens:
            return True
        if request.stop:
            text = self._tokenizer.decode(row.tokens, skip_special_tokens=True)
            return any(stop in text for stop in request.stop)
        return False
