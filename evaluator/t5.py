"""The paper's retrieval evaluator: a fine-tuned T5 with a one-output regression head.

Yan et al. (2024) fine-tune T5-large as a ``T5ForSequenceClassification`` with
``num_labels=1`` on (question, passage) pairs labelled +1 (the passage comes from the page that
answers the question) or -1 (it does not), with a mean-squared-error loss. The head's single
logit is therefore already an estimate on the [-1, 1] label scale, and the paper's confidence
thresholds apply to it directly: the logit is clamped to [-1, 1] and never squashed
(a sigmoid or tanh would move the thresholds). The model input is ``question [SEP] passage``,
as in the paper's released code; the template is a parameter.

On a CPU, ``int8=True`` swaps the model's ``torch.nn.Linear`` layers for int8 dynamically
quantised ones after loading (:func:`crag.evaluator.cross_encoder.quantize_int8`): faster scoring at
the cost of a small drift in the scores.

torch and transformers are imported here only, so the rest of the package stays light.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer, T5ForSequenceClassification

from crag.evaluator.base import BatchedEvaluator, BatchScorer, EvaluatorError
from crag.evaluator.checkpoints import (
    architectures_of,
    check_single_output,
    first_line,
    load_config,
    resolve_checkpoint,
    resolve_device,
)
from crag.evaluator.cross_encoder import check_int8_device, quantize_int8

logger = logging.getLogger(__name__)

DEFAULT_TEMPLATE = "{question} [SEP] {passage}"
"""Input format of the paper's evaluator: question, ``" [SEP] "``, passage."""

TOKENIZER_FILES = ("tokenizer.json", "spiece.model")
"""A checkpoint needs at least one of these to rebuild its tokenizer."""

_EXPECTED = "a T5ForSequenceClassification checkpoint with num_labels=1 (the paper's evaluator)"


def _default_dtype(device: torch.device) -> torch.dtype:
    # T5 activations overflow in float16, so CUDA uses bfloat16 where the GPU has it.
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def _check_config(config: Any, source: str) -> None:
    model_type = getattr(config, "model_type", None)
    architectures = architectures_of(config)
    if model_type != "t5":
        raise EvaluatorError(
            f"checkpoint {source!r} has architecture {architectures} (model_type "
            f"{model_type!r}); the T5 evaluator needs {_EXPECTED}"
        )
    check_single_output(
        config, source, what="T5 evaluator", expected=_EXPECTED, output="regression"
    )


def _has_tokenizer_files(source: str, is_local: bool) -> bool:
    if is_local:
        return any((Path(source) / name).is_file() for name in TOKENIZER_FILES)
    from transformers.utils.hub import cached_file

    for name in TOKENIZER_FILES:
        try:
            found = cached_file(source, name, _raise_exceptions_for_missing_entries=False)
        except Exception as exc:
            raise EvaluatorError(
                f"could not load the tokenizer of T5 evaluator {source!r} from the hub "
                f"(offline?): {first_line(exc)}"
            ) from exc
        if found is not None:
            return True
    return False


def _load_tokenizer(source: str, is_local: bool) -> Any:
    # Without its files AutoTokenizer would quietly build an empty T5 vocabulary.
    if not _has_tokenizer_files(source, is_local):
        raise EvaluatorError(
            f"checkpoint {source!r} has no tokenizer files (one of {', '.join(TOKENIZER_FILES)}); "
            "save the tokenizer next to the model with tokenizer.save_pretrained()"
        )
    try:
        return AutoTokenizer.from_pretrained(source)
    except Exception as exc:
        raise EvaluatorError(
            f"could not load the tokenizer of T5 evaluator {source!r}: {first_line(exc)}"
        ) from exc


def _load_model(source: str, dtype: torch.dtype, config: Any) -> Any:
    try:
        loaded: Any = T5ForSequenceClassification.from_pretrained(
            source, dtype=dtype, output_loading_info=True
        )
    except Exception as exc:
        raise EvaluatorError(
            f"could not load the weights of T5 evaluator {source!r}: {first_line(exc)}"
        ) from exc
    model, info = loaded
    missing = sorted(str(key) for key in info.get("missing_keys", ()))
    head_missing = [key for key in missing if "classification_head" in key]
    if head_missing:
        architectures = architectures_of(config)
        raise EvaluatorError(
            f"checkpoint {source!r} ({architectures}) has no trained classification head "
            f"(missing {', '.join(head_missing)}); the T5 evaluator needs {_EXPECTED}"
        )
    if missing:
        logger.warning("T5 evaluator %s: weights missing from the checkpoint: %s", source, missing)
    return model


def _check_arguments(batch_size: int, max_length: int, template: str) -> None:
    if batch_size < 1:
        raise EvaluatorError(f"batch_size must be at least 1, got {batch_size}")
    if max_length < 2:
        raise EvaluatorError(f"max_length must be at least 2, got {max_length}")
    try:
        template.format(question="", passage="")
    except (KeyError, IndexError, ValueError) as exc:
        raise EvaluatorError(
            f"template {template!r} must be a format string with only the fields "
            "{question} and {passage}"
        ) from exc


def _special_ids(config: Any, tokenizer: Any, source: str) -> tuple[int, int]:
    """The end-of-sequence and padding token ids, the tokenizer's agreeing with the model's."""
    eos_id = getattr(config, "eos_token_id", None)
    if eos_id is None:
        eos_id = tokenizer.eos_token_id
    if eos_id is None or tokenizer.eos_token_id not in (None, eos_id):
        raise EvaluatorError(
            f"checkpoint {source!r}: the tokenizer's end-of-sequence id "
            f"({tokenizer.eos_token_id}) does not match the model's ({eos_id})"
        )
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        pad_id = getattr(config, "pad_token_id", None)
    return int(eos_id), int(pad_id) if pad_id is not None else 0


def _check_int8(device: torch.device, dtype: torch.dtype) -> None:
    check_int8_device(device)
    if dtype != torch.float32:
        raise EvaluatorError(
            "int8 quantisation needs float32 weights, not "
            f"{str(dtype).removeprefix('torch.')}; leave dtype unset"
        )


def _ready_model(
    source: str, config: Any, device: torch.device, dtype: torch.dtype, *, int8: bool
) -> Any:
    """The checkpoint's model on ``device``, in eval mode, int8-quantised if asked."""
    model = _load_model(source, dtype, config)
    try:
        model.to(device)
    except (RuntimeError, AssertionError) as exc:
        raise EvaluatorError(
            f"could not move the T5 evaluator to {device}: {first_line(exc)}"
        ) from exc
    model.eval()
    if int8:
        quantised = quantize_int8(model)
        logger.info("T5 evaluator %s: %d linear layers quantised to int8", source, quantised)
    return model


class T5Evaluator(BatchedEvaluator):
    """The paper's T5 retrieval evaluator: a regression score in [-1, 1] per passage.

    ``score`` encodes every pair, sorts them by token count and runs them in batches of
    ``batch_size`` (less padding); the score is the regression logit clamped to [-1, 1], and
    an empty or whitespace-only passage scores -1.0 without running the model
    (:class:`~crag.evaluator.base.BatchedEvaluator`).

    Attributes:
        name: Backend name, ``"t5"``.
        model_name_or_path: The checkpoint as given.
        device: Device the model runs on (chosen once, at load).
        dtype: Parameter dtype of the loaded model.
        batch_size: Pairs per forward pass.
        max_length: Token budget per pair, end-of-sequence token included.
        template: ``str.format`` template with ``{question}`` and ``{passage}`` fields.
        int8: Whether the Linear layers run int8 dynamically quantised (CPU only).

    With ``int8=True`` every ``torch.nn.Linear`` of the loaded model (attention and
    feed-forward projections of encoder and decoder, and the classification head) is replaced
    by an int8 dynamically quantised linear (:func:`crag.evaluator.cross_encoder.quantize_int8`);
    embeddings and layer norms stay float32. Scoring on a CPU gets faster and the scores drift
    slightly from the float model's, so thresholds calibrated on float scores apply roughly;
    recalibrate on int8 scores for exact figures.
    """

    def __init__(
        self,
        model_name_or_path: str,
        *,
        batch_size: int = 32,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        max_length: int = 512,
        template: str = DEFAULT_TEMPLATE,
        int8: bool = False,
    ) -> None:
        """Load the tokenizer and regression model.

        Args:
            model_name_or_path: Checkpoint directory (``config.json``, weights and tokenizer
                files, as ``save_pretrained`` writes them) or a hub id.
            batch_size: Pairs per forward pass.
            device: ``"cuda"``, ``"cpu"``, ...; default CUDA when available, else CPU.
            dtype: Model dtype; default bfloat16 on CUDA (float32 on GPUs without it) and
                float32 on CPU.
            max_length: Maximum tokens per pair; longer pairs are cut at the end.
            template: Input format with ``{question}`` and ``{passage}`` fields.
            int8: Quantise the Linear layers to int8 after loading (CPU and float32 only);
                faster, with a slight score drift.

        Raises:
            EvaluatorError: Bad arguments (``int8`` on a device other than the CPU or with a
                dtype other than float32 among them), or the checkpoint is missing,
                unreachable, of another architecture, not a one-output regression model, or
                lacks tokenizer files.
        """
        _check_arguments(batch_size, max_length, template)
        self.name: str = "t5"
        self.model_name_or_path = model_name_or_path
        self.batch_size = batch_size
        self.max_length = max_length
        self.template = template

        source, is_local = resolve_checkpoint(model_name_or_path, backend="t5", what="T5 evaluator")
        config = load_config(source, is_local, what="T5 evaluator")
        _check_config(config, source)
        self._tokenizer = _load_tokenizer(source, is_local)
        self._eos_id, self._pad_id = _special_ids(config, self._tokenizer, source)

        self.device: torch.device = resolve_device(device)
        self.dtype: torch.dtype = dtype if dtype is not None else _default_dtype(self.device)
        self.int8: bool = int8
        if int8:
            _check_int8(self.device, self.dtype)
        self._model = _ready_model(source, config, self.device, self.dtype, int8=int8)
        logger.info(
            "T5 evaluator %s loaded on %s (%s), batch size %d, max length %d",
            source,
            self.device,
            str(self.dtype).removeprefix("torch.") + (", int8 linear layers" if int8 else ""),
            batch_size,
            max_length,
        )

    def __repr__(self) -> str:
        int8 = ", int8=True" if self.int8 else ""
        return f"T5Evaluator({self.model_name_or_path!r}, device={str(self.device)!r}{int8})"

    def _encode(
        self, question: str, passages: Sequence[str], indices: Sequence[int]
    ) -> list[list[int]]:
        """Token ids per pair: one end-of-sequence token, last, within ``max_length``."""
        texts = [self.template.format(question=question, passage=passages[i]) for i in indices]
        encoded = self._tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
        pairs: list[list[int]] = []
        for index, ids in zip(indices, encoded, strict=True):
            # The head reads the hidden state at the (single) end-of-sequence token, so a
            # literal "</s>" in the text must not add a second one.
            body = [int(i) for i in ids if i != self._eos_id]
            if len(body) >= self.max_length:
                logger.debug(
                    "T5 evaluator: passage %d truncated from %d to %d tokens",
                    index,
                    len(body) + 1,
                    self.max_length,
                )
                body = body[: self.max_length - 1]
            pairs.append([*body, self._eos_id])
        return pairs

    def _forward(self, batch: list[list[int]]) -> list[float]:
        width = max(len(ids) for ids in batch)
        input_ids = torch.full((len(batch), width), self._pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, : len(ids)] = 1
        logits = self._model(
            input_ids=input_ids.to(self.device), attention_mask=attention_mask.to(self.device)
        ).logits
        values: list[float] = logits[:, 0].float().cpu().tolist()
        return values

    def _batch_scorer(
        self, question: str, passages: Sequence[str], indices: list[int]
    ) -> BatchScorer:
        """Encode every pair once; batches are cut by token count, longest first."""
        pairs = dict(zip(indices, self._encode(question, passages, indices), strict=True))

        def score(batch: list[int]) -> list[float]:
            with torch.inference_mode():
                return self._forward([pairs[i] for i in batch])

        return BatchScorer(score, sizes=[len(pairs[i]) for i in indices])
