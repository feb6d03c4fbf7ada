"""The default generator on onnxruntime answers, streams and scores without importing torch, with
the tokenizer ``AutoTokenizer`` would build (:mod:`crag.generator.model_files`)."""

from __future__ import annotations

import textwrap

from crag.generator.model_files import generation_config, load_tokenizer, model_config
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
    assert generation_config(path).eos_token_id == expected_end


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
        print(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
        """
    )
    assert run_python(script).split() == ["True", "True", "True", "[]"]
