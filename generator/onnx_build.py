"""Make an ONNX model of a local transformers folder, once, with onnxruntime-genai's builder.

The builder (``onnxruntime_genai.models.builder``, the ONNX Runtime team's model builder for
Llama, Qwen, Phi, Gemma, Mistral and other decoder architectures) writes the graph from the
weights directly, with fused attention (``GroupQueryAttention``) and a key-value cache, in
about 11 s for SmolLM2-135M on 2 cores. ``prune_lm_head`` makes a prompt's read compute only
its last position's logits. The folder goes under the user's cache
(:mod:`crag.settings.model_cache`), named after the model folder and what identifies its
weights, so a changed model is built anew. A model the builder cannot take (an architecture it
does not know) is remembered beside that folder, so later processes do not try again.

The builder runs in a child process: it prints a progress bar per tensor and holds about
1.2 GB while it works, neither of which the calling process should keep.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import sys
from pathlib import Path

from crag.generator.onnx_positions import return_last_positions
from crag.settings.model_cache import cache_dir, made_once

logger = logging.getLogger(__name__)

MODEL_FILE = "model.onnx"
BUILD_TIMEOUT_SECONDS = 900
"""The builder's limit; SmolLM2-135M takes about 11 s, a 1.5B model a few minutes."""


MODEL_FORMAT = "last-positions-1"
"""What crag does to the builder's model (:mod:`crag.generator.onnx_positions`), in the cache
folder's digest: a model built before a change is built again."""


class OnnxBuildError(ValueError):
    """The builder cannot make an ONNX model of this folder (or could not earlier)."""


def onnx_folder(model_dir: Path) -> Path:
    """The cache folder of ``model_dir``'s ONNX model: its name and a digest of its weights.

    The digest covers the folder's resolved path and each file's name, size and modification
    time (not the bytes: reading 540 MB at every start would cost a second), and the builder's
    version.
    """
    from importlib.metadata import version

    source = model_dir.resolve()
    parts = [str(source), version("onnxruntime-genai"), MODEL_FORMAT]
    for path in sorted(source.iterdir()):
        if path.is_file():
            stat = path.stat()
            parts.append(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}")
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return cache_dir() / "onnx" / f"{source.name.lower()}-{digest}"


def failure_note(target: Path) -> Path:
    """The file beside ``target`` that says why its build failed (later ones are not tried)."""
    return target.with_name(target.name + ".failed")


def _build(model_dir: Path, folder: Path) -> None:
    """Run the builder from ``model_dir`` into the empty ``folder`` (float32, CPU).

    Raises:
        OnnxBuildError: The builder failed; its last lines of output are in the message.
        ValueError: It did not finish in time.
    """
    command = [
        sys.executable,
        "-m",
        "onnxruntime_genai.models.builder",
        "--input",
        str(model_dir),
        "--output",
        str(folder),
        "--precision",
        "fp32",
        "--execution_provider",
        "cpu",
        "--cache_dir",
        str(folder / "builder-cache"),
        "--extra_options",
        "prune_lm_head=true",
    ]
    try:
        done = subprocess.run(  # our own interpreter and arguments, no shell
            command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECONDS, check=False
        )
    except subprocess.TimeoutExpired as exc:  # not remembered: a busy machine may be slow
        raise ValueError(
            f"onnxruntime-genai's builder did not finish within {BUILD_TIMEOUT_SECONDS} s"
        ) from exc
    if done.returncode != 0 or not (folder / MODEL_FILE).is_file():
        lines = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise OnnxBuildError(
            f"onnxruntime-genai's builder cannot make an ONNX model of {model_dir}: "
            + " / ".join(line.strip() for line in lines)
        )
    shutil.rmtree(folder / "builder-cache", ignore_errors=True)
    return_last_positions(folder / MODEL_FILE)


def ensure_onnx_model(model_dir: Path) -> Path:
    """The ONNX model file of the transformers folder ``model_dir``, built the first time.

    Raises:
        OnnxBuildError: The builder cannot take this model, now or at an earlier try (the
            reason is kept in a ``.failed`` file beside the folder; delete it to try again).
        ValueError: The folder cannot be written, or the builder did not finish in time.
    """
    target = onnx_folder(model_dir)
    note = failure_note(target)
    if note.is_file():
        raise OnnxBuildError(note.read_text(encoding="utf-8"))

    def build(folder: Path) -> None:
        logger.info("building an ONNX model of %s (once, about 11 s for SmolLM2)", model_dir.name)
        try:
            _build(model_dir, folder)
        except OnnxBuildError as exc:
            note.parent.mkdir(parents=True, exist_ok=True)
            note.write_text(str(exc), encoding="utf-8")
            raise

    return made_once(target, MODEL_FILE, build) / MODEL_FILE
