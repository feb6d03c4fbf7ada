"""The step decoder's cache layers append in place and read as transformers' layers do.

Checked directly (appends within the room and past it, rows replaced, the zeros of the room
never attended) and through the step decoder: rows decoded past the room of their buffers get
exactly the tokens ``generate`` gives each alone (float32), and a cache of any other layer type
is left to transformers.
"""

from __future__ import annotations

from typing import Any

import pytest

from crag.generator import appendable_cache
from crag.generator.appendable_cache import AppendableLayer, make_appendable, set_layer
from crag.generator.batching import GenerationRequest
from crag.generator.decode_attention import _decode_attention
from crag.generator.local import LocalChatModel
from crag.generator.step_decoding import StepDecoder
from tests.tiny_causal_lm import build_tiny_causal_lm


def _plain_layer() -> Any:
    """transformers' own full-attention layer, empty."""
    from transformers.cache_utils import DynamicLayer

    return DynamicLayer()  # type: ignore[no-untyped-call]  # untyped upstream


def test_appends_fill_the_room_in_place_and_grow_past_it() -> None:
    import torch

    keys, values = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)
    layer = AppendableLayer(keys, values, headroom=2)
    assert layer.capacity == 7 and layer.get_seq_length() == 5
    buffer = layer._key_buffer
    new = [(torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 4)) for _ in range(3)]
    whole_keys, _ = layer.update(*new[0])
    assert whole_keys is buffer, "within the room nothing is copied"
    assert torch.equal(whole_keys[:, :, 6:], torch.zeros(2, 3, 1, 4))  # the room is zeros
    layer.update(*new[1])
    assert layer._key_buffer is buffer and layer.get_seq_length() == 7
    layer.update(*new[2])  # full: copied into a larger buffer
    assert layer._key_buffer is not buffer and layer.capacity == 8 + 2
    expected_keys = torch.cat([keys] + [k for k, _ in new], dim=2)
    expected_values = torch.cat([values] + [v for _, v in new], dim=2)
    assert layer.keys is not None and layer.values is not None
    assert torch.equal(layer.keys, expected_keys) and torch.equal(layer.values, expected_values)
    with pytest.raises(ValueError, match="headroom"):
        AppendableLayer(keys, values, headroom=0)


def test_replaced_rows_are_copied_and_set_layer_sets_a_plain_layer_too() -> None:
    import torch

    layer = AppendableLayer(torch.randn(2, 1, 3, 2), torch.randn(2, 1, 3, 2))
    keys, values = torch.randn(3, 1, 4, 2), torch.randn(3, 1, 4, 2)
    set_layer(layer, keys, values)
    assert layer.keys is not None
    assert torch.equal(layer.keys, keys) and layer.keys.data_ptr() != keys.data_ptr()
    assert layer.capacity == 4 + appendable_cache.HEADROOM
    plain = _plain_layer()
    plain.lazy_initialization(keys, values)
    set_layer(plain, keys, values)
    assert plain.keys is keys and plain.values is values


def test_the_decode_attention_reads_only_the_filled_positions_of_a_buffer() -> None:
    import torch

    torch.manual_seed(0)
    query = torch.randn(2, 4, 1, 8)
    keys, values = torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[1, :, :, :2] = False
    exact = _decode_attention(query, keys, values, mask, 0.3, 6)
    padded_keys = torch.nn.functional.pad(keys, (0, 0, 0, 5), value=1e4)  # finite junk in the room
    padded_values = torch.nn.functional.pad(values, (0, 0, 0, 5), value=1e4)
    read = _decode_attention(query, padded_keys, padded_values, mask, 0.3, 6)
    assert torch.allclose(read, exact, atol=1e-6)
    unmasked = _decode_attention(query, padded_keys, padded_values, None, 0.3, 6)
    assert torch.allclose(unmasked[0], exact[0], atol=1e-6)  # row 0 has no padding


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> LocalChatModel:
    path = build_tiny_causal_lm(tmp_path_factory.mktemp("tiny_lm"))
    return LocalChatModel(model_path=str(path), max_new_tokens=12, dtype="float32")


def test_rows_decoded_past_the_room_get_the_tokens_they_get_alone(
    model: LocalChatModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(appendable_cache, "HEADROOM", 3)  # the room fills every few steps
    prompts = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16], [17]]
    alone = [model._generate_alone(GenerationRequest(ids, 12)) for ids in prompts]
    decoder = StepDecoder(model._model, model._tokenizer, no_repeat_ngram_size=4)
    requests = [GenerationRequest(ids, 12) for ids in prompts]
    waiting = list(requests)
    grown = False
    while waiting or decoder.size:
        if waiting:
            decoder.admit(waiting.pop(0))
        if decoder.size:
            layers = decoder._cache.layers
            assert all(isinstance(layer, AppendableLayer) for layer in layers)
            before = layers[0]._key_buffer
            decoder.step()
            grown = grown or layers[0]._key_buffer is not before
            decoder.take_finished()
    assert grown
    assert [r.output for r in requests] == alone


def test_a_cache_of_other_layers_is_left_as_it_is() -> None:
    import torch
    from transformers.cache_utils import DynamicSlidingWindowLayer

    class Cache:
        layers: list[object]

    empty = Cache()
    empty.layers = [_plain_layer()]
    assert not make_appendable(empty)  # nothing read yet
    sliding = Cache()
    window = DynamicSlidingWindowLayer(sliding_window=4)
    window.lazy_initialization(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2))
    sliding.layers = [window]
    assert not make_appendable(sliding) and sliding.layers == [window]
    full = Cache()
    plain = _plain_layer()
    plain.update(torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2))
    full.layers = [plain]
    assert make_appendable(full) and isinstance(full.layers[0], AppendableLayer)
    assert make_appendable(full)  # already appendable


def test_without_append_in_place_the_cache_keeps_transformers_layers(
    model: LocalChatModel,
) -> None:
    prompts = [[5, 6, 7], [8, 9]]
    alone = [model._generate_alone(GenerationRequest(ids, 5)) for ids in prompts]
    decoder = StepDecoder(
        model._model, model._tokenizer, append_in_place=False, no_repeat_ngram_size=4
    )
    requests = [GenerationRequest(ids, 5) for ids in prompts]
    for request in requests:
        decoder.admit(request)
    assert not any(isinstance(layer, AppendableLayer) for layer in decoder._cache.layers)
    while decoder.size:
        decoder.step()
        decoder.take_finished()
    assert [r.output for r in requests] == alone
