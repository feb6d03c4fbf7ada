"""An ONNX model of a BERT sentence encoder (the bundled MiniLM), exported once into the cache.

Why: onnxruntime runs the encoder without torch and transformers' modelling code, whose imports
cost a cold ``crag ask`` about 5 s on two cores, and it embeds one short text (a question) in
5 ms where torch takes 20-30 ms (``docs/models.md``). The export runs in a child process
(torch's ONNX exporter, then onnxruntime's transformer optimizer fusing attention, layer norms
and GELU), so the calling process never imports torch; it takes about 10 s, once per model and
version of torch and onnxruntime. The folder goes under the user's cache
(:mod:`crag.settings.model_cache`), named after the model and what identifies its weights. An
export that fails is remembered beside the folder (delete the ``.failed`` file to try again),
and the encoder then runs in torch.

Usage (what the parent runs): ``python -m crag.vectorstore.minilm_export SOURCE OUT``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from crag.settings.model_cache import cache_dir, made_once

logger = logging.getLogger(__name__)

MODEL_FILE = "encoder.onnx"
EXPORT_FORMAT = "bert-eager-fused-1"
"""What the export does, in the folder's digest: a changed export makes the model anew."""
EXPORT_TIMEOUT_SECONDS = 600
"""The child's limit; MiniLM-L6 takes about 10 s on two cores."""
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "last_hidden_state"
OPSET = 17


class EncoderExportError(ValueError):
    """The encoder cannot be exported to ONNX (now, or at an earlier try)."""


def encoder_onnx_folder(model_dir: Path) -> Path:
    """The cache folder of ``model_dir``'s ONNX encoder: its name and a digest.

    The digest covers the folder's resolved path, each file's name, size and modification time,
    the versions of torch and onnxruntime (read without importing them) and
    :data:`EXPORT_FORMAT`.
    """
    from importlib.metadata import version

    source = model_dir.resolve()
    parts = [str(source), version("torch"), version("onnxruntime"), EXPORT_FORMAT]
    for path in sorted(source.iterdir()):
        if path.is_file():
            stat = path.stat()
            parts.append(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}")
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return cache_dir() / "onnx" / f"{source.name.lower()}-encoder-{digest}"


def _failure_note(target: Path) -> Path:
    return target.with_name(target.name + ".failed")


def _run_child(model_dir: Path, folder: Path) -> None:
    """Export in a child process into the empty ``folder``.

    Raises:
        EncoderExportError: The child failed; its last lines of output are in the message.
        ValueError: It did not finish in time (not remembered: a busy machine may be slow).
    """
    command = [sys.executable, "-m", __name__, str(model_dir), str(folder)]
    try:
        done = subprocess.run(  # our own interpreter and arguments, no shell
            command, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_SECONDS, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise ValueError(
            f"the encoder's ONNX export did not finish within {EXPORT_TIMEOUT_SECONDS} s"
        ) from exc
    if done.returncode != 0 or not (folder / MODEL_FILE).is_file():
        lines = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise EncoderExportError(
            f"cannot export the encoder {model_dir} to ONNX: "
            + " / ".join(line.strip() for line in lines)
        )


def ensure_encoder_onnx(model_dir: Path) -> Path:
    """The ONNX encoder file of the BERT folder ``model_dir``, exported the first time.

    Raises:
        EncoderExportError: The export fails, now or at an earlier try (the reason is kept in a
            ``.failed`` file beside the folder).
        ValueError: The folder cannot be written, or the export did not finish in time.
    """
    target = encoder_onnx_folder(model_dir)
    note = _failure_note(target)
    if note.is_file():
        raise EncoderExportError(note.read_text(encoding="utf-8"))

    def export_into(folder: Path) -> None:
        logger.info("exporting %s to ONNX (once, about 10 s)", model_dir.name)
        try:
            _run_child(model_dir, folder)
        except EncoderExportError as exc:
            note.parent.mkdir(parents=True, exist_ok=True)
            note.write_text(str(exc), encoding="utf-8")
            raise

    return made_once(target, MODEL_FILE, export_into) / MODEL_FILE


def export(model_dir: Path, out: Path) -> None:
    """Export ``model_dir``'s encoder to ``out/MODEL_FILE``: torch's exporter, then fusion.

    The encoder is loaded with eager attention, whose graph onnxruntime's optimizer recognises
    and fuses into its ``Attention`` operator (about 10% faster on 64 texts of 256 tokens than
    the unfused graph of scaled-dot-product attention).
    """
    import torch
    from onnxruntime.transformers import optimizer
    from transformers import AutoModel

    class LastHiddenState(torch.nn.Module):
        def __init__(self, encoder: torch.nn.Module) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(
            self,
            input_ids: torch.Tensor,
            attention_mask: torch.Tensor,
            token_type_ids: torch.Tensor,
        ) -> torch.Tensor:
            output = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )
            hidden: torch.Tensor = output.last_hidden_state
            return hidden

    encoder = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()
    example = tuple(torch.ones(2, 8, dtype=torch.long) for _ in INPUT_NAMES)
    raw = out / "raw.onnx"
    axes = {name: {0: "batch", 1: "tokens"} for name in (*INPUT_NAMES, OUTPUT_NAME)}
    with torch.inference_mode():
        torch.onnx.export(
            LastHiddenState(encoder),
            example,
            str(raw),
            input_names=list(INPUT_NAMES),
            output_names=[OUTPUT_NAME],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    fused = optimizer.optimize_model(
        str(raw),
        model_type="bert",
        num_heads=int(config["num_attention_heads"]),
        hidden_size=int(config["hidden_size"]),
        opt_level=0,
    )
    fused.save_model_to_file(str(out / MODEL_FILE))
    raw.unlink()


def main(argv: Sequence[str] | None = None) -> int:
    """The child's entry point: ``SOURCE OUT``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="the model folder (transformers BERT)")
    parser.add_argument("out", type=Path, help="an empty folder for the ONNX encoder")
    args = parser.parse_args(argv)
    export(args.source, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
