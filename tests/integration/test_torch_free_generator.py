"""The default generator on onnxruntime answers, streams and scores without importing torch or
transformers, with the token ids ``AutoTokenizer``'s tokenizer gives
(:mod:`crag.generator.model_files`, :mod:`crag.generator.chat_tokenizer`)."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crag.generator.chat_tokenizer import ChatTokenizer, chat_tokenizer_for
from crag.generator.model_files import generation_eos_token_id, load_tokenizer, model_config
from crag.generator.smollm2 import ensure_smollm2
from tests.fresh_python import run_python

CHATS = [
    [{"role": "user", "content": "Who painted the Mona Lisa?"}],
    [
        {"role": "system", "content": "Answer from the knowledge.\n\nKnowledge: [1] Ünïcödé 東京"},
        {"role": "user", "content": "  spaces\tand\nline breaks  "},
        {"role": "assistant", "content": "An earlier answer."},
        {"role": "user", "content": "And then?"},
    ],
    [{"role": "user", "content": "A question that writes <|im_end|> and <|im_start|>system"}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "{{ 7 * 7 }} {% raw %}"}],
]
TEXTS = [
    "Leonardo da Vinci painted it, <|im_end|> 東京 🙂",
    "  leading and trailing spaces  ",
    "\n\nline\r\nbreaks\tand tabs",
    "ÀÉÎÕÜ çñ ß ﬁ ½ — “quotes” 'single' `ticks`",
    "<repo_name><|endoftext|>plain",
    "",
]


def test_the_tokenizer_and_configs_are_those_of_the_auto_classes() -> None:
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    path = ensure_smollm2()
    ours, theirs = load_tokenizer(path), AutoTokenizer.from_pretrained(path)
    assert type(ours) is type(theirs)
    for chat in CHATS:
        expected = theirs.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
        got = ours.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
        assert got == expected
    text = "Leonardo da Vinci painted it, <|im_end|> 東京 🙂"
    ids = theirs.encode(text, add_special_tokens=False)
    assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(
        ids, skip_special_tokens=True
    )
    config = AutoConfig.from_pretrained(path)
    assert model_config(path).max_position_embeddings == config.max_position_embeddings
    expected_end = GenerationConfig.from_pretrained(path).eos_token_id
    assert generation_eos_token_id(path) == expected_end


def test_the_chat_tokenizer_gives_the_ids_and_texts_of_transformers() -> None:
    from transformers import AutoTokenizer

    path = ensure_smollm2()
    ours, theirs = chat_tokenizer_for(path), AutoTokenizer.from_pretrained(path)
    assert isinstance(ours, ChatTokenizer)
    assert (ours.eos_token_id, ours.pad_token_id) == (theirs.eos_token_id, theirs.pad_token_id)
    assert ours.model_max_length == theirs.model_max_length
    for chat in CHATS:
        for prompt in (True, False):
            rendered = theirs.apply_chat_template(
                chat, add_generation_prompt=prompt, tokenize=False
            )
            assert ours.apply_chat_template(chat, prompt, tokenize=False) == rendered
            expected: Any = theirs.apply_chat_template(
                chat, add_generation_prompt=prompt, return_tensors="np", return_dict=True
            )
            got = ours.apply_chat_template(chat, prompt, return_tensors="np")
            for key in ("input_ids", "attention_mask"):
                assert got[key].dtype == expected[key].dtype
                np.testing.assert_array_equal(got[key], expected[key])
            listed: Any = theirs.apply_chat_template(chat, add_generation_prompt=prompt)
            assert ours.apply_chat_template(chat, prompt)["input_ids"] == listed["input_ids"]
    with pytest.raises(ValueError, match="no message"):
        ours.apply_chat_template([], True)
    with pytest.raises(TypeError, match="not a string"):
        ours.apply_chat_template([{"role": "user", "content": b"bytes"}], True)  # type: ignore[dict-item]
    for text in TEXTS:
        ids = theirs.encode(text, add_special_tokens=False)
        assert ours.encode(text) == ids, text
        for skip in (True, False):
            assert ours.decode(ids, skip) == theirs.decode(ids, skip_special_tokens=skip), text
        assert ours.decode(ids[:1]) == theirs.decode(ids[:1])


def _copy_of(path: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(path, folder, ignore=shutil.ignore_patterns("*.safetensors", "*.onnx*"))
    return folder


@pytest.mark.parametrize(
    "change",
    [
        "a configuration key it does not know",
        "a special token not in tokenizer.json",
        "a template of transformers' generation tag",
        "two templates",
        "padding in tokenizer.json",
        "a tokenizer.json tokenizers cannot read",
        "an older special_tokens_map.json beside it",
        "an older added_tokens.json beside it",
        "an added token stripped by the configuration",
        "a generation tag written {%+",
        "a template jinja2 cannot compile",
    ],
)
def test_a_folder_transformers_would_read_otherwise_is_left_to_it(
    change: str, tmp_path: Path
) -> None:
    folder = _copy_of(ensure_smollm2(), tmp_path)
    assert isinstance(chat_tokenizer_for(folder), ChatTokenizer)
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    if change == "a configuration key it does not know":
        config["add_bos_token"] = True
    elif change == "a special token not in tokenizer.json":
        config["mask_token"] = "<mask>"
    elif change == "a template of transformers' generation tag":
        template = (folder / "chat_template.jinja").read_text()
        (folder / "chat_template.jinja").write_text(
            template + "{% generation %}{% endgeneration %}"
        )
    elif change == "two templates":
        config["chat_template"] = "{{ messages[0]['content'] }}"
    elif change == "an older special_tokens_map.json beside it":
        (folder / "special_tokens_map.json").write_text('{"eos_token": "<|endoftext|>"}')
    elif change == "an older added_tokens.json beside it":
        (folder / "added_tokens.json").write_text('{"<new_token>": 49152}')
    elif change == "an added token stripped by the configuration":
        end = {"content": "<|im_end|>", "lstrip": True, "rstrip": True, "special": True}
        config["added_tokens_decoder"] = {"2": end}
    elif change == "a generation tag written {%+":
        template = (folder / "chat_template.jinja").read_text()
        (folder / "chat_template.jinja").write_text(
            template + "{%+ generation %}{% endgeneration %}"
        )
    elif change == "a template jinja2 cannot compile":
        (folder / "chat_template.jinja").write_text("{% for message in messages %}")
    elif change == "a tokenizer.json tokenizers cannot read":
        (folder / "tokenizer.json").write_text('{"model": "not a model"}')
    else:
        data = json.loads((folder / "tokenizer.json").read_text())
        data["padding"] = {
            "strategy": {"Fixed": 64},
            "direction": "Right",
            "pad_to_multiple_of": None,
            "pad_id": 2,
            "pad_type_id": 0,
            "pad_token": "<|im_end|>",
        }
        (folder / "tokenizer.json").write_text(json.dumps(data))
    config_file.write_text(json.dumps(config))
    assert chat_tokenizer_for(folder) is None


def test_answering_streaming_and_scoring_import_no_torch() -> None:
    script = textwrap.dedent(
        """
        import sys
        from langchain_core.messages import HumanMessage
        from crag.generator.local import LocalChatModel
        from crag.generator.smollm2 import ensure_smollm2
        model = LocalChatModel(
            model_path=str(ensure_smollm2()), engine="onnxruntime", max_new_tokens=8
        )
        question = [HumanMessage("What is the capital of France?")]
        answer = model.invoke(question).text
        streamed = "".join(chunk.text for chunk in model.stream(question))
        scores = model.next_token_probabilities(question, ("yes", "no"))
        print(answer == streamed, 0 < sum(scores.values()) <= 2, model.decodes_on_onnxruntime)
        heavy = ("torch", "transformers")
        print(sorted(m for m in sys.modules if m.split(".")[0] in heavy))
        """
    )
    assert run_python(script).split() == ["True", "True", "True", "[]"]
