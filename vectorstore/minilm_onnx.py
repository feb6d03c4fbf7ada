"""A mean-pooled sentence encoder run by onnxruntime, tokenised by ``tokenizers``: no torch.

The model is :mod:`crag.vectorstore.minilm_export`'s ONNX graph of the encoder. The tokenizer is
the model folder's ``tokenizer.json`` read by the ``tokenizers`` library, the one transformers'
fast tokenizer wraps, set per call as :class:`crag.vectorstore.minilm.MiniLMEmbeddings` calls
transformers' (truncation to the model's length, longest first; padding to the batch's longest
text), so the token ids are transformers' own (``tests/integration/test_minilm.py``). Pooling and
normalisation are sentence-transformers' steps in numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from crag.core.onnx_sessions import intra_op_threads, session_options
from crag.vectorstore.minilm_export import INPUT_NAMES, OUTPUT_NAME


class OnnxSentenceEncoder:
    """Vectors of one batch of texts: tokenise, run the encoder, mean-pool, L2-normalise.

    Not thread-safe (one tokenizer's padding state): the embedder's lock holds its callers.
    """

    def __init__(self, model_file: Path, model_dir: Path, max_length: int) -> None:
        """Open ``model_file`` and the tokenizer of ``model_dir``.

        Raises:
            ValueError: onnxruntime or ``tokenizers`` cannot load the files.
        """
        import onnxruntime as ort
        from tokenizers import Tokenizer

        try:
            self.session = ort.InferenceSession(
                str(model_file),
                session_options(intra_op_threads()),
                providers=["CPUExecutionProvider"],
            )
            tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        except Exception as exc:  # onnxruntime and tokenizers raise their own exception types
            raise ValueError(f"cannot open the ONNX encoder {model_file}: {exc}") from exc
        tokenizer.enable_truncation(max_length, strategy="longest_first")
        pad = _pad_token(model_dir)
        pad_id = tokenizer.token_to_id(pad)
        if pad_id is None:
            raise ValueError(f"the tokenizer of {model_dir} has no padding token {pad!r}")
        tokenizer.enable_padding(pad_id=pad_id, pad_token=pad)
        self.tokenizer = tokenizer

    def batch(self, texts: Sequence[str]) -> np.ndarray:
        """Normalised mean-pooled float32 vectors of ``texts`` (one padded batch), in order."""
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        feed = dict(zip(INPUT_NAMES, (ids, mask, types), strict=True))
        (tokens,) = self.session.run([OUTPUT_NAME], feed)
        weights = mask[..., None].astype(tokens.dtype)
        counts = np.maximum(weights.sum(axis=1), np.float32(1e-9))
        # normalised twice, as sentence-transformers does (its Normalize module, then encode's)
        return _normalised(_normalised((tokens * weights).sum(axis=1) / counts))


def _normalised(rows: np.ndarray) -> np.ndarray:
    """Rows divided by their L2 norm (at least 1e-12, as torch's ``normalize``)."""
    norms = np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), np.float32(1e-12))
    result: np.ndarray = (rows / norms).astype(np.float32)
    return result


def _pad_token(model_dir: Path) -> str:
    """The padding token the model's ``tokenizer_config.json`` names (``[PAD]`` when none)."""
    import json

    try:
        config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "[PAD]"
    pad = config.get("pad_token") if isinstance(config, dict) else None
    if isinstance(pad, dict):  # an AddedToken written out
        pad = pad.get("content")
    return pad if isinstance(pad, str) and pad else "[PAD]"
