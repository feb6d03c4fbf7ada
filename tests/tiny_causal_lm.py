"""Build a tiny, randomly initialised chat model folder, offline, in about a second.

A ``LlamaForCausalLM`` of two small layers with a WordLevel tokenizer and a chat template, saved
as ``save_pretrained`` writes it, so that :class:`crag.generator.local.LocalChatModel` loads it like
any local model. It has no end-of-sequence token configured: greedy decoding always runs to
``max_new_tokens``, which makes generation length (and, with a slow forward hook, its
duration) predictable.

Usage in tests::

    from tests.tiny_causal_lm import build_tiny_causal_lm

    path = build_tiny_causal_lm(tmp_path_factory.mktemp("tiny_lm"))
"""

from __future__ import annotations

from pathlib import Path

WORDS = (
    "who painted the mona lisa leonardo da vinci paris louvre question answer knowledge "
    "is a an of in on and to by was were it this that"
).split()
CHAT_TEMPLATE = (
    "{% for message in messages %}<{{ message['role'] }}> {{ message['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<assistant> {% endif %}"
)


def build_tiny_causal_lm(path: Path, *, seed: int = 0, for_onnx: bool = False) -> Path:
    """Save a tiny causal LM and its tokenizer (with a chat template) in ``path``.

    ``for_onnx``: a model onnxruntime-genai's builder takes (:mod:`crag.generator.onnx_build`):
    heads of 16 (its attention kernel's smallest) and an end-of-sequence id in the model's
    config, which the builder requires; generation still has none, so decoding runs to
    ``max_new_tokens`` as with the default model.
    """
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    specials = ["<pad>", "<unk>", "<system>", "<user>", "<assistant>"]
    vocab = {token: index for index, token in enumerate([*specials, *WORDS])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # untyped upstream
        tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=64 if for_onnx else 32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=0 if for_onnx else None,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = None
    model.generation_config.bos_token_id = None
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
