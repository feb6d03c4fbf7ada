"""The bundled all-MiniLM-L6-v2 on transformers alone, as sentence-transformers runs it.

Why not ``HuggingFaceEmbeddings`` here: importing sentence-transformers cost a cold ``crag ask``
about a second on two cores (scikit-learn and SciPy for its similarity utilities, its
model-card and training code), for a model that is a BERT encoder, a mean over its tokens and
an L2 normalisation. This module does those three steps with the transformers classes
sentence-transformers itself calls (the same tokenizer, ``AutoModel``, the same batches in the
same order), so the vectors are the library's: on the shipped corpus's 10,483 chunks and 500
questions they were equal to the last bit (``bench/scripts/compare_minilm.py``,
``tests/integration/test_minilm.py``; docs/cli.md). sentence-transformers stays the embedder
of every other model and of the benchmark's scripts.

**onnxruntime on a CPU.** On a CPU the calls of up to :data:`ONNX_MOST_TEXTS` texts (a question,
a run's strips and web paragraphs, a small file's chunks) run on an ONNX export of the same
encoder (:mod:`crag.vectorstore.minilm_onnx`), and torch and transformers' modelling code are
never imported: a cold ``crag ask`` saves their imports (about 5 s on two cores), and one
question embeds in 5-7 ms, not 13-30 ms. The vectors differ from torch's by at most 2.1e-7 on
corpus chunks (torch's own batches differ from each other by 1.9e-7). Larger calls (a big
ingestion) load the torch model the first time: there the two engines are within about 10% of
each other (64 texts of 256 tokens: 3.2-3.7 s in onnxruntime, 3.3-3.4 s in torch, from sitting
to sitting; docs/models.md), and torch's vectors are sentence-transformers' to the last bit, as
the shipped corpus's are. Without the export (it failed; a GPU) torch does all.

**Vectors remembered.** onnxruntime's vector of a text does not depend on the batch it is
embedded in (its padding, its neighbours, its size: 823 corpus sentences and strips alone and in
batches of 2, 7, 16 and 64 gave the same vectors to the last bit; ``tests/integration/
test_minilm.py``), so the encoder keeps the last :data:`REMEMBERED_TEXTS` texts' onnxruntime
vectors and embeds only the texts it does not hold. A run's strips are cut from the passages it
retrieved, and related questions retrieve the same passages: their strips are embedded once.
torch's vectors do depend on the batch, so its calls neither read nor fill the memo.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from langchain_core.embeddings import Embeddings

from crag.vectorstore.vector_memo import VectorMemo

if TYPE_CHECKING:
    import torch

    from crag.vectorstore.minilm_onnx import OnnxSentenceEncoder

logger = logging.getLogger(__name__)

ONNX_MOST_TEXTS = 64
"""The most texts a call embeds on onnxruntime; a larger one runs in torch (the module's
docstring: onnxruntime is 2-6 times faster on one short text, within 10% of torch on long
batches)."""

MODULES = (
    "sentence_transformers.models.Transformer",
    "sentence_transformers.models.Pooling",
    "sentence_transformers.models.Normalize",
)
"""The sentence-transformers pipeline this module reproduces (the model's ``modules.json``)."""

REMEMBERED_TEXTS = 4096
"""onnxruntime vectors an encoder keeps (1.5 KB each: about 6 MB): a run's 20-40 strips and its
question, for a hundred runs or more."""


def is_mean_pooled_encoder(path: Path) -> bool:
    """Whether the model folder is an encoder, a mean over tokens and a normalisation, only."""
    try:
        modules = json.loads((path / "modules.json").read_text(encoding="utf-8"))
        types = tuple(module["type"] for module in modules)
        pooling_file = path / modules[1]["path"] / "config.json"
        pooling = json.loads(pooling_file.read_text(encoding="utf-8"))
    except (OSError, ValueError, LookupError, TypeError):
        return False
    modes = {key for key, value in pooling.items() if key.startswith("pooling_mode") and value}
    return types == MODULES and modes == {"pooling_mode_mean_tokens"}


def max_sequence_length(path: Path) -> int:
    """The tokens per text the model keeps (``sentence_bert_config.json``; 256 for MiniLM)."""
    config = json.loads((path / "sentence_bert_config.json").read_text(encoding="utf-8"))
    return int(config["max_seq_length"])


class MiniLMEmbeddings(Embeddings):
    """A mean-pooled, normalised sentence encoder run by transformers (the bundled MiniLM).

    Attributes:
        model_name: The model folder (as ``HuggingFaceEmbeddings`` names it, for
            :func:`crag.vectorstore.corpus.check_embedder`).
        encode_kwargs: ``normalize_embeddings`` (always true) and ``batch_size``.
    """

    def __init__(self, path: Path, device: str, batch_size: int) -> None:
        """Open the encoder of ``path`` for ``device``: onnxruntime on a CPU, else torch.

        On a CPU the ONNX export is made at the first small call
        (:mod:`crag.vectorstore.minilm_export`) and torch loads only when a call is too large for
        onnxruntime; an export that fails leaves torch to do everything, with a warning.
        """
        self.model_name = str(path)
        self.path = path
        self.encode_kwargs: dict[str, Any] = {
            "normalize_embeddings": True,
            "batch_size": batch_size,
        }
        self.max_length = max_sequence_length(path)
        self.device = device
        self.onnx: OnnxSentenceEncoder | None = None
        self.onnx_tried = device != "cpu"
        self.remembered = VectorMemo(REMEMBERED_TEXTS)
        """Texts' onnxruntime vectors (see the module's docstring: exact, whatever the batch)."""
        self.tokenizer: Any = None
        self.model: Any = None
        if self.onnx_tried:
            self._load_torch()

    def onnx_encoder(self) -> OnnxSentenceEncoder | None:
        """The onnxruntime encoder, opened (and exported) at the first call that needs it.

        Not in ``__init__``: a server that opens a store only to read its records (the file
        route of a citation) must not wait for an export it never uses. None (logged once) if
        the export cannot be made.
        """
        from crag.vectorstore.minilm_export import ensure_encoder_onnx
        from crag.vectorstore.minilm_onnx import OnnxSentenceEncoder

        if self.onnx_tried:
            return self.onnx
        self.onnx_tried = True
        if not (self.path / "tokenizer.json").is_file():
            return None
        try:
            self.onnx = OnnxSentenceEncoder(
                ensure_encoder_onnx(self.path), self.path, self.max_length
            )
        except (ValueError, ImportError) as exc:
            logger.warning("embedder %s runs in torch: %s", self.path.name, exc)
        return self.onnx

    def _load_torch(self) -> None:
        """Load transformers' tokenizer and encoder onto ``device`` (once)."""
        from transformers import AutoModel, AutoTokenizer

        if self.model is not None:
            return
        tokenizer: Any = AutoTokenizer.from_pretrained(str(self.path))
        tokenizer.model_max_length = self.max_length
        model: Any = AutoModel.from_pretrained(str(self.path)).to(self.device)
        self.tokenizer, self.model = tokenizer, model.eval()
        logger.info("embedder %s loaded in torch on %s", self.path.name, self.device)

    def _batch(self, texts: Sequence[str]) -> torch.Tensor:
        """Normalised mean-pooled vectors of one batch (padded to its longest text)."""
        import torch

        features = self.tokenizer(
            list(texts),
            padding=True,
            truncation="longest_first",
            max_length=self.max_length,
            return_tensors="pt",
        ).to(self.device)
        tokens = self.model(**features, return_dict=True).last_hidden_state
        mask = features["attention_mask"].unsqueeze(-1).to(tokens.dtype)
        summed = (tokens * mask).sum(dim=1, dtype=tokens.dtype)
        counts = torch.clamp(mask.sum(dim=1, dtype=tokens.dtype), min=1e-9)
        # normalised twice, as sentence-transformers does: its Normalize module, then encode's
        # normalize_embeddings (the second pass changes the last bit of some rows: 25 of 64)
        once = torch.nn.functional.normalize(summed / counts, p=2, dim=-1)
        return torch.nn.functional.normalize(once, p=2, dim=1).cpu()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 vectors of ``texts``, one row each, in order.

        On onnxruntime when there is its encoder and at most :data:`ONNX_MOST_TEXTS` texts: the
        texts the memo holds are read from it, the rest embedded and remembered. In torch
        otherwise, longest first in batches of ``batch_size``, as sentence-transformers orders
        them (the same ``argsort``): a torch batch's padding changes the last bits of its
        vectors.
        """
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        onnx = self.onnx_encoder() if len(texts) <= ONNX_MOST_TEXTS else None
        if onnx is None:
            return self._sorted_rows(texts, self.torch_rows)
        found = self.remembered.recall(texts)
        missing = list(dict.fromkeys(t for t, v in zip(texts, found, strict=True) if v is None))
        computed: dict[str, np.ndarray] = {}
        if missing:
            embedded = self._sorted_rows(
                missing, lambda batches: np.concatenate([onnx.batch(b) for b in batches])
            )
            computed = dict(zip(missing, embedded, strict=True))
            self.remembered.remember(missing, list(embedded))
        rows = [computed[t] if v is None else v for t, v in zip(texts, found, strict=True)]
        return np.stack(rows)  # float32: the encoder's rows and the memo's copies of them

    def _sorted_rows(
        self, texts: Sequence[str], rows_of: Callable[[list[list[str]]], np.ndarray]
    ) -> np.ndarray:
        """The vectors of ``texts`` by ``rows_of`` on longest-first batches, in their order."""
        order = np.argsort([-len(text) for text in texts])
        ordered = [texts[index] for index in order]
        size = int(self.encode_kwargs["batch_size"])
        batches = [ordered[start : start + size] for start in range(0, len(ordered), size)]
        restored: np.ndarray = rows_of(batches)[np.argsort(order)]
        return restored

    def torch_rows(self, batches: Sequence[Sequence[str]]) -> np.ndarray:
        """The batches' vectors from the torch encoder (loaded the first time), stacked."""
        import torch

        self._load_torch()
        with torch.inference_mode():
            return torch.cat([self._batch(batch) for batch in batches]).numpy()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Vectors of ``texts`` (line breaks read as spaces, as ``HuggingFaceEmbeddings`` does)."""
        vectors: list[list[float]] = self.encode([t.replace("\n", " ") for t in texts]).tolist()
        return vectors

    def embed_query(self, text: str) -> list[float]:
        """The vector of one query."""
        return self.embed_documents([text])[0]
