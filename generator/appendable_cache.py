"""A key-value cache layer that appends a decoding step's keys in place, without copying the rest.

Why: transformers' ``DynamicLayer`` appends with ``torch.cat``, which copies the whole cache of
the layer every step. For the step decoder's batches (5 to 8 rows over ~1,400 cached positions
of SmolLM2-135M) that copy was the largest single cost of a step: 39% of its CPU time, more
than the model's matrix products. Here the keys and values live in buffers with room for
:data:`HEADROOM` more positions; a step writes its one position into the room, and the layer's
``keys`` / ``values`` are views of the filled part. Only when the room runs out, or when rows
join or leave the batch (:meth:`AppendableLayer.replace`), are the buffers copied.
"""

from __future__ import annotations

from typing import Any

from transformers.cache_utils import DynamicLayer

HEADROOM = 64
"""Positions allocated beyond those filled: a buffer is copied once per this many steps at most
(answers average about 27 tokens, so most rows leave before it fills)."""


class AppendableLayer(DynamicLayer):  # type: ignore[no-untyped-call]  # untyped upstream
    """A full-attention cache layer of (rows, heads, positions, dim) with room to append.

    Used where transformers uses a ``DynamicLayer``, for the step decoder's steps only:
    ``update`` returns the whole buffers, the positions so far (now including the new ones)
    followed by zeros, for :func:`crag.generator.decode_attention._decode_attention`, which attends
    only the positions the attention mask covers. ``keys`` / ``values`` are views of the filled
    part (their length is the cache's length), valid until the next ``update`` or
    :meth:`replace`.
    """

    def __init__(self, keys: Any, values: Any, headroom: int | None = None) -> None:
        """Hold a copy of ``keys`` and ``values`` with free positions after them.

        ``headroom``: how many (default :data:`HEADROOM`).

        Raises:
            ValueError: ``headroom`` is below 1.
        """
        super().__init__()  # type: ignore[no-untyped-call]  # untyped upstream
        headroom = HEADROOM if headroom is None else headroom
        if headroom < 1:
            raise ValueError(f"headroom must be at least 1, got {headroom}")
        self.headroom = headroom
        self._key_buffer: Any = None
        self._value_buffer: Any = None
        self._length = 0
        self.replace(keys, values)

    @property
    def capacity(self) -> int:
        """Positions the buffers hold, filled or not."""
        return int(self._key_buffer.shape[2])

    def replace(self, keys: Any, values: Any, room: int = 0) -> None:
        """Hold a copy of ``keys`` and ``values`` in fresh buffers (rows joined or left).

        The buffers get at least ``room`` free positions, and never fewer than ``headroom``.
        Free positions are zero: masked positions must hold finite numbers, since a masked
        weight of 0 times a NaN is still a NaN.
        """
        rows, heads, length, _ = keys.shape
        spare = max(room, self.headroom)
        self._key_buffer = keys.new_zeros((rows, heads, length + spare, keys.shape[3]))
        self._value_buffer = values.new_zeros(
            (rows, values.shape[1], length + spare, values.shape[3])
        )
        self._key_buffer[:, :, :length] = keys
        self._value_buffer[:, :, :length] = values
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True
        self._views(length)

    def _views(self, length: int) -> None:
        self._length = length
        self.keys = self._key_buffer[:, :, :length]
        self.values = self._value_buffer[:, :, :length]

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
        """Append the new positions in place (copying into larger buffers when full).

        Returns:
            The whole key and value buffers (filled positions first, then zeros).
        """
        start = self._length
        end = start + key_states.shape[2]
        if end > self.capacity:
            self.replace(
                self._key_buffer[:, :, :start],
                self._value_buffer[:, :, :start],
                room=end - start + self.headroom,
            )
        self._key_buffer[:, :, start:end] = key_states
        self._value_buffer[:, :, start:end] = value_states
        self._views(end)
        return self._key_buffer, self._value_buffer


def make_appendable(cache: Any, headroom: int | None = None) -> bool:
    """Give ``cache`` (a ``DynamicCache``) appendable layers in place; say whether it has them.

    Only filled full-attention ``DynamicLayer`` layers are held this way; a cache with any other
    (a sliding window keeps only its last positions, say) is left as it is and ``False``
    returned: it then appends as transformers does.
    """
    layers = getattr(cache, "layers", None)
    if not layers:
        return False
    if all(isinstance(layer, AppendableLayer) for layer in layers):
        return True
    if not all(type(layer) is DynamicLayer and layer.is_initialized for layer in layers):
        return False
    cache.layers = [AppendableLayer(layer.keys, layer.values, headroom) for layer in layers]
    return True


def set_layer(layer: Any, keys: Any, values: Any) -> None:
    """Make ``layer`` hold ``keys`` and ``values`` (copied into an appendable layer's buffers)."""
    if isinstance(layer, AppendableLayer):
        layer.replace(keys, values)
    else:
        layer.keys, layer.values = keys, values
