"""A chat model's tokenizer read by ``tokenizers`` itself, for onnxruntime's decoding.

Importing transformers costs a cold ``crag ask`` about 0.9 s on two cores (its lazy module
table and ``transformers.utils``: the largest import of the run), though onnxruntime decodes
without it. transformers' ``TokenizersBackend`` (what SmolLM2's folder names) wraps the
``tokenizers`` library's ``Tokenizer`` read from ``tokenizer.json``: :class:`ChatTokenizer`
reads the same file and does what the generator asks of that class with the same results:
``encode`` without special tokens, ``decode``, and ``apply_chat_template`` (the template
rendered as transformers renders it, :mod:`crag.generator.chat_template`, then encoded without
special tokens). ``tests/integration/test_torch_free_generator.py`` compares the two.

Only a folder where ``TokenizersBackend`` would add or change nothing is read this way
(:func:`chat_tokenizer_for`): its configuration holds only the keys listed in
:data:`PLAIN_CONFIG_KEYS`, its special tokens are already special tokens of ``tokenizer.json``
and its added tokens are the file's with the same properties, no older tokenizer file
(:data:`OLDER_TOKENIZER_FILES`) lies beside it, the file pads and truncates nothing, and its
one chat template, which jinja2 compiles, is in ``chat_template.jinja`` or the configuration.
Any other folder gets transformers' own class.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
from tokenizers import Tokenizer

from crag.generator.chat_template import compile_chat_template
from crag.generator.model_files import json_object

logger = logging.getLogger(__name__)

NAMED_SPECIAL_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
"""The special tokens a template sees by name (transformers' ``special_tokens_map``)."""

PLAIN_CONFIG_KEYS = frozenset(
    {
        "backend",
        "tokenizer_class",
        "is_local",
        "local_files_only",
        "model_max_length",
        "chat_template",
        "added_tokens_decoder",
        "clean_up_tokenization_spaces",
        "split_special_tokens",
        "add_prefix_space",
        "padding_side",
        "truncation_side",
        *NAMED_SPECIAL_TOKENS,
    }
)
"""``tokenizer_config.json`` keys whose effect :class:`ChatTokenizer` reproduces or that change
nothing it does; a folder with any other key is read by transformers."""

ADDED_TOKEN_FLAGS = ("special", "lstrip", "rstrip", "normalized", "single_word")
"""An added token's properties, each of which must be the file's where the configuration sets it."""

OLDER_TOKENIZER_FILES = ("special_tokens_map.json", "added_tokens.json")
"""Files transformers still reads where the configuration lists no added tokens (a folder
saved again by transformers 5 keeps them): a folder holding one is left to transformers."""

TOKENIZER_CLASS = "TokenizersBackend"
VERY_LARGE_INTEGER = int(1e30)
"""transformers' ``model_max_length`` when the configuration gives none."""


class ChatTokenizer:
    """``tokenizer.json`` and a chat template: what the onnxruntime generator reads prompts with."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        template: jinja2.Template,
        special_tokens: Mapping[str, str],
        model_max_length: Any,
    ) -> None:
        self._tokenizer = tokenizer
        self._template = template
        self.special_tokens_map = dict(special_tokens)
        self.model_max_length = model_max_length

    def _token_id(self, name: str) -> int | None:
        token = self.special_tokens_map.get(name)
        return None if token is None else self._tokenizer.token_to_id(token)

    @property
    def eos_token_id(self) -> int | None:
        """The end-of-sequence token's id (None: the folder names none)."""
        return self._token_id("eos_token")

    @property
    def pad_token_id(self) -> int | None:
        """The padding token's id (None: the folder names none)."""
        return self._token_id("pad_token")

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """``text``'s token ids; special tokens added only by the file's post-processor."""
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """The text of ``ids`` (``TokenizersBackend`` cleans up no spaces for these folders)."""
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def apply_chat_template(
        self,
        chat: Sequence[Mapping[str, str]],
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        return_tensors: str | None = None,
        return_dict: bool = True,
    ) -> Any:
        """The chat rendered (``tokenize=False``), or its ids as transformers returns them.

        With ``tokenize`` the result is ``{"input_ids", "attention_mask"}``, one row of numpy
        int64 arrays with ``return_tensors="np"``, else lists; ``return_dict=False``: the ids.
        """
        if not chat:
            raise ValueError("the chat has no message")
        messages = [_plain_message(m) for m in chat]
        text = self._template.render(
            messages=messages,
            tools=None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **self.special_tokens_map,
        )
        if not tokenize:
            return text
        ids = self.encode(text)
        if return_tensors not in (None, "np"):
            raise ValueError(f"return_tensors={return_tensors!r}: only 'np' or None")
        if not return_dict:
            return np.array([ids], dtype=np.int64) if return_tensors else ids
        if return_tensors:
            row = np.array([ids], dtype=np.int64)
            return {"input_ids": row, "attention_mask": np.ones_like(row)}
        return {"input_ids": ids, "attention_mask": [1] * len(ids)}


def _plain_message(message: Mapping[str, Any]) -> dict[str, str]:
    """A message of plain strings, its None fields left out (as transformers leaves them out).

    transformers rebuilds what a template sees from plain JSON types; the generator's messages
    are strings (a role and a text), so anything else is refused rather than shown differently.

    Raises:
        TypeError: A field is neither a string nor None.
    """
    plain: dict[str, str] = {}
    for key, value in message.items():
        if value is None:
            continue
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"chat message field {key!r} is not a string: {type(value).__name__}")
        plain[str.__str__(key)] = str.__str__(value)
    return plain


def _template_source(path: Path, config: Mapping[str, Any]) -> str | None:
    """The folder's one chat template, or None where transformers would choose among several."""
    jinja_file = path / "chat_template.jinja"
    in_config = config.get("chat_template")
    if (path / "chat_template.json").exists() or (path / "additional_chat_templates").exists():
        return None
    if jinja_file.is_file():
        return None if in_config is not None else jinja_file.read_text(encoding="utf-8")
    return in_config if isinstance(in_config, str) else None


def _special_tokens(tokenizer: Tokenizer, config: Mapping[str, Any]) -> dict[str, str] | None:
    """The named special tokens; None if one is not a string or not special in the file."""
    special = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}
    named: dict[str, str] = {}
    for name in NAMED_SPECIAL_TOKENS:
        value = config.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or value not in special:
            return None
        named[name] = value
    return named


def _added_tokens_agree(tokenizer: Tokenizer, config: Mapping[str, Any]) -> bool:
    """Whether the configuration's added tokens are the file's, each as special as there."""
    declared = config.get("added_tokens_decoder") or {}
    if not isinstance(declared, dict):
        return False
    present = tokenizer.get_added_tokens_decoder()
    for index, token in declared.items():
        if not isinstance(token, dict) or not str(index).isdigit():
            return False
        have = present.get(int(index))
        if have is None or have.content != token.get("content"):
            return False
        for flag in ADDED_TOKEN_FLAGS:  # transformers applies the configuration's flags
            if flag in token and bool(getattr(have, flag)) != bool(token[flag]):
                return False
    return True


def _plain_config(config: Mapping[str, Any]) -> bool:
    """Whether ``TokenizersBackend`` would read ``config`` without changing the tokenizer."""
    return (
        config.get("tokenizer_class") == TOKENIZER_CLASS
        and set(config) <= PLAIN_CONFIG_KEYS
        and not config.get("split_special_tokens")
        and not config.get("clean_up_tokenization_spaces")
    )


def chat_tokenizer_for(path: Path) -> ChatTokenizer | None:
    """The folder's :class:`ChatTokenizer`, or None where transformers must read it."""
    try:
        config = json_object(path / "tokenizer_config.json")
    except (OSError, ValueError):  # transformers reads it again and says what is wrong
        return None
    if not _plain_config(config) or not (path / "tokenizer.json").is_file():
        return None
    if any((path / name).exists() for name in OLDER_TOKENIZER_FILES):
        return None
    source = _template_source(path, config)
    template = None if source is None else compile_chat_template(source)
    if template is None:
        return None
    try:
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    except Exception:  # noqa: BLE001 - transformers reads it again and says what is wrong
        return None
    if tokenizer.truncation is not None or tokenizer.padding is not None:
        return None
    if tokenizer.get_vocab_size() > 100_000:  # transformers may patch such a file's regex
        return None
    special = _special_tokens(tokenizer, config)
    if special is None or not _added_tokens_agree(tokenizer, config):
        return None
    limit = config.get("model_max_length")
    logger.debug("tokenizer of %s read by tokenizers", path.name)
    return ChatTokenizer(
        tokenizer, template, special, VERY_LARGE_INTEGER if limit is None else limit
    )
