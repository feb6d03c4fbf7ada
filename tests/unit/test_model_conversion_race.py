"""Two processes converting one GGUF model at once, as two ``crag`` commands do on first use.

The first takes the folder's lock and converts into a folder of its own, moved into place in
one step; the other waits for the lock and uses that folder. Without the lock (a file system
that has none), each converts and the one that finds the folder already there uses it and
drops its own copy. The model is a tiny Llama written as a real GGUF file (float32 tensors, a
byte-level BPE tokenizer, a chat template), so that transformers reads, dequantises and saves
it as it does the shipped SmolLM2 file, in a second. The first process is held after reading
the file until the second has started, so that the second always arrives while it converts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from crag.generator.gguf import ensure_converted

ROOT = Path(__file__).resolve().parents[2]

HIDDEN, FEED_FORWARD, HEADS = 16, 32, 2
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PIECES = [chr(code) for code in range(ord("!"), ord("~") + 1)] + ["Ġ", "Ġt"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CONVERTER = """
import sys, time
from pathlib import Path
import transformers
from crag.generator.gguf import ensure_converted

gguf, target, mine, other = (Path(arg) for arg in sys.argv[1:5])
load = transformers.AutoModelForCausalLM.from_pretrained

def load_then_wait(*args, **kwargs):
    model = load(*args, **kwargs)
    mine.touch()
    deadline = time.monotonic() + 120
    while not other.with_suffix(".started").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(1.0)  # the other process is past its start: it reaches the lock meanwhile
    return model

transformers.AutoModelForCausalLM.from_pretrained = load_then_wait
mine.with_suffix(".started").touch()
print(ensure_converted(gguf, target))
"""
"""One process: says it has started, reads the GGUF file, waits until the other process has
started too, then converts (the wait replaces ``from_pretrained`` in that process only)."""


def write_tiny_gguf(path: Path) -> Path:
    """A one-layer Llama chat model as a GGUF file of about 20 kB, random float32 weights."""
    import gguf
    import numpy as np

    tokens = [*SPECIALS, *PIECES]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3] * len(SPECIALS) + [1] * len(PIECES))  # control, then normal
    writer.add_token_merges(["Ġ t"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_chat_template(CHAT_TEMPLATE)
    rng = np.random.default_rng(0)
    shapes = {
        "token_embd.weight": (len(tokens), HIDDEN),
        "blk.0.attn_q.weight": (HIDDEN, HIDDEN),
        "blk.0.attn_k.weight": (HIDDEN, HIDDEN),
        "blk.0.attn_v.weight": (HIDDEN, HIDDEN),
        "blk.0.attn_output.weight": (HIDDEN, HIDDEN),
        "blk.0.ffn_gate.weight": (FEED_FORWARD, HIDDEN),
        "blk.0.ffn_up.weight": (FEED_FORWARD, HIDDEN),
        "blk.0.ffn_down.weight": (HIDDEN, FEED_FORWARD),
    }
    for name, shape in shapes.items():
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))
    for norm in ("blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"):
        writer.add_tensor(norm, np.ones(HIDDEN, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def made_in(cache: Path) -> list[str]:
    """What ``cache`` holds beside the lock files (kept: deleting one would let a waiting
    process and a newcomer each hold a lock of their own)."""
    return sorted(path.name for path in cache.iterdir() if path.suffix != ".lock")


def assert_complete(folder: Path) -> None:
    """``folder`` holds the whole model: it loads and answers a chat prompt."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    names = {path.name for path in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names, names
    tokenizer: Any = AutoTokenizer.from_pretrained(folder)
    model: Any = AutoModelForCausalLM.from_pretrained(folder)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, return_tensors="pt"
    )
    ids = prompt["input_ids"]
    assert model.generate(ids, max_new_tokens=2, do_sample=False).shape[-1] == ids.shape[-1] + 2


def test_two_processes_wanting_one_conversion_convert_once_and_both_get_the_folder(
    tmp_path: Path,
) -> None:
    model = write_tiny_gguf(tmp_path / "Tiny-Chat.F32.gguf")
    cache = tmp_path / "cache"
    target = cache / "tiny-chat"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CRAG_CACHE_DIR": str(cache)}
    ready = [tmp_path / "first.read", tmp_path / "second.read"]
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", CONVERTER, str(model), str(target), str(mine), str(other)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for mine, other in (ready, ready[::-1])
    ]
    results = [process.communicate(timeout=300) for process in processes]
    for process, (out, err) in zip(processes, results, strict=True):
        assert process.returncode == 0, err[-3000:]
        assert out.strip() == str(target)
    assert sum(path.exists() for path in ready) == 1  # one converted, the other waited for it
    names = sorted(path.name for path in cache.iterdir())
    assert names == ["tiny-chat", "tiny-chat.lock"]  # no copy left behind
    assert_complete(target)


def test_a_conversion_that_finds_the_folder_made_meanwhile_uses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process (stood for by a copy made while this one converts) was first."""
    import transformers

    model = write_tiny_gguf(tmp_path / "Tiny-Chat.F32.gguf")
    winner = ensure_converted(model, tmp_path / "winner")
    (winner / "made-by").write_text("the other process")
    target = tmp_path / "cache" / "tiny-chat"
    load = transformers.AutoModelForCausalLM.from_pretrained

    def load_while_another_finishes(*args: Any, **kwargs: Any) -> Any:
        loaded = load(*args, **kwargs)
        if "gguf_file" in kwargs:  # the conversion's read, not the check's
            shutil.copytree(winner, target)
        return loaded

    monkeypatch.setattr(
        transformers.AutoModelForCausalLM, "from_pretrained", load_while_another_finishes
    )
    assert ensure_converted(model, target) == target
    assert (target / "made-by").read_text() == "the other process"
    assert made_in(target.parent) == ["tiny-chat"]
    assert_complete(target)


def test_a_model_that_cannot_be_read_leaves_no_folder(tmp_path: Path) -> None:
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("plain text, not a model", encoding="utf-8")
    cache = tmp_path / "cache"
    cache.mkdir()
    with pytest.raises(ValueError, match=r"cannot read .*notes\.gguf as a GGUF model"):
        ensure_converted(not_gguf, cache / "notes")
    assert made_in(cache) == []
