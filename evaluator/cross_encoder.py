"""A sentence-transformers cross-encoder as the retrieval evaluator.

Any ``*ForSequenceClassification`` checkpoint with a single output (``num_labels=1``) that
``sentence_transformers.CrossEncoder`` loads can grade (question, passage) pairs: a model
fine-tuned here on the paper's +1/-1 labels, or an off-the-shelf reranker such as
``cross-encoder/ms-marco-MiniLM-L6-v2``. The evaluator always reads the raw head output (identity
activation) and maps it to [-1, 1] according to how the model was trained:

``"regression"``
    Trained by mean-squared error onto the labels +1/-1 with an identity activation, like the
    paper's T5: the output already estimates the label, so it is clamped to [-1, 1].
``"logit"``
    Trained with binary cross-entropy (ms-marco-style rerankers): the output is a logit of
    P(relevant), and the score is the expected +1/-1 label,
    ``2 * sigmoid(logit) - 1 = tanh(logit / 2)``.

Which mapping applies is part of the checkpoint, recorded by our training command in
:data:`METADATA_FILE` (``crag_evaluator.json``) next to ``config.json``::

    {"backend": "cross-encoder", "output": "regression", ...}

Other keys are allowed and ignored. An explicit ``output`` argument wins over the file; a
checkpoint without the file is treated as ``"logit"`` (every public reranker). See
:func:`write_metadata` and :func:`read_metadata`.

On a CPU, ``int8=True`` swaps the model's ``torch.nn.Linear`` layers for int8 dynamically
quantised ones after loading (:func:`quantize_int8`): faster scoring (about 2x for MiniLM-L6
on two cores), at the cost of a small drift in the scores. :func:`quantize_int8` and
:func:`check_int8_device` are shared with the T5 evaluator.

torch is imported here and sentence-transformers only when a model is loaded, so the rest of
the package stays light.
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, cast, get_args

import torch

from crag.evaluator.base import BatchedEvaluator, BatchScorer, EvaluatorError
from crag.evaluator.checkpoints import (
    check_single_output,
    first_line,
    load_config,
    resolve_checkpoint,
    resolve_device,
)

logger = logging.getLogger(__name__)

OutputKind = Literal["regression", "logit"]
"""How a checkpoint's raw output maps to [-1, 1]; see the module docstring."""

OUTPUT_KINDS: tuple[OutputKind, ...] = get_args(OutputKind)
"""Valid values of ``output``: ``("regression", "logit")``."""

DEFAULT_OUTPUT: OutputKind = "logit"
"""The mapping for checkpoints without :data:`METADATA_FILE`: public rerankers are BCE-trained."""

METADATA_FILE = "crag_evaluator.json"
"""File in a checkpoint directory that records the backend and the output mapping."""

BACKEND = "cross-encoder"
"""Value of the ``"backend"`` key in :data:`METADATA_FILE` for cross-encoder checkpoints."""

_EXPECTED = "a *ForSequenceClassification checkpoint with num_labels=1 (a cross-encoder)"


def output_to_score(raw: float, output: OutputKind) -> float:
    """Map one raw model output to a score in [-1, 1].

    Args:
        raw: The head's output with identity activation.
        output: ``"regression"`` clamps ``raw`` to [-1, 1]; ``"logit"`` returns
            ``tanh(raw / 2)`` (``= 2 * sigmoid(raw) - 1``).

    Returns:
        The score; NaN maps to -1.0.

    Raises:
        EvaluatorError: ``output`` is not one of :data:`OUTPUT_KINDS`.
    """
    if output not in OUTPUT_KINDS:
        raise EvaluatorError(f"unknown output {output!r}; valid: {', '.join(OUTPUT_KINDS)}")
    if math.isnan(raw):
        return -1.0
    if output == "regression":
        return min(1.0, max(-1.0, float(raw)))
    return math.tanh(float(raw) / 2.0)


def write_metadata(directory: str | Path, *, output: OutputKind, **extra: Any) -> Path:
    """Write :data:`METADATA_FILE` into a checkpoint directory.

    Args:
        directory: The checkpoint directory (must exist).
        output: The mapping the checkpoint was trained for.
        **extra: More JSON-serialisable keys to record (base model, loss, data, ...).

    Returns:
        The path of the written file.

    Raises:
        EvaluatorError: ``output`` is not one of :data:`OUTPUT_KINDS`.
    """
    if output not in OUTPUT_KINDS:
        raise EvaluatorError(f"unknown output {output!r}; valid: {', '.join(OUTPUT_KINDS)}")
    path = Path(directory) / METADATA_FILE
    content = {**extra, "backend": BACKEND, "output": output}
    path.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def _parse_metadata(text: str, where: str) -> dict[str, Any]:
    try:
        content = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvaluatorError(f"{where} is not valid JSON: {exc}") from exc
    if not isinstance(content, dict):
        raise EvaluatorError(f"{where} must hold a JSON object, not {type(content).__name__}")
    backend = content.get("backend", BACKEND)
    if backend != BACKEND:
        raise EvaluatorError(
            f"{where} says this checkpoint is for the {backend!r} evaluator, not {BACKEND!r}"
        )
    output = content.get("output")
    if output is not None and output not in OUTPUT_KINDS:
        raise EvaluatorError(
            f"{where} has output {output!r}; valid values: {', '.join(OUTPUT_KINDS)}"
        )
    return cast(dict[str, Any], content)


def read_metadata(model_name_or_path: str | Path) -> dict[str, Any] | None:
    """Read :data:`METADATA_FILE` of a checkpoint directory or (cached) hub repository.

    Args:
        model_name_or_path: Checkpoint directory or hub id.

    Returns:
        The file's content, or None where the checkpoint has no such file.

    Raises:
        EvaluatorError: The file is not a JSON object, names another backend or an unknown
            output.
    """
    path = Path(model_name_or_path).expanduser()
    if path.is_dir():
        file = path / METADATA_FILE
        if not file.is_file():
            return None
        return _parse_metadata(file.read_text(encoding="utf-8"), str(file))
    from transformers.utils.hub import cached_file

    try:
        found = cached_file(
            str(model_name_or_path), METADATA_FILE, _raise_exceptions_for_missing_entries=False
        )
    except Exception as exc:  # noqa: BLE001 - any hub/cache failure: no metadata file
        logger.debug("cross-encoder %s: no %s (%s)", model_name_or_path, METADATA_FILE, exc)
        return None
    if found is None:
        return None
    text = Path(found).read_text(encoding="utf-8")
    return _parse_metadata(text, f"{METADATA_FILE} of {model_name_or_path}")


def _check_config(config: Any, source: str, is_local: bool) -> None:
    model_type = getattr(config, "model_type", None)
    names = list(getattr(config, "architectures", None) or [])
    architectures = ", ".join(names) or "unknown"
    if model_type == "t5" or getattr(config, "is_encoder_decoder", False):
        raise EvaluatorError(
            f"checkpoint {source!r} is an encoder-decoder ({architectures}, model_type "
            f"{model_type!r}); use the 't5' evaluator for the paper's T5 checkpoints. The "
            f"cross-encoder evaluator needs {_EXPECTED}"
        )
    if not any(name.endswith("ForSequenceClassification") for name in names):
        hint = ""
        if is_local and (Path(source) / "modules.json").is_file():
            hint = " It looks like a sentence-transformers bi-encoder (an embedding model)."
        raise EvaluatorError(
            f"checkpoint {source!r} has architecture {architectures} (model_type "
            f"{model_type!r}), with no sequence-classification head.{hint} The cross-encoder "
            f"evaluator needs {_EXPECTED}"
        )
    check_single_output(
        config, source, what="cross-encoder evaluator", expected=_EXPECTED, output="relevance"
    )


def _check_arguments(batch_size: int, max_length: int, output: OutputKind | None) -> None:
    if batch_size < 1:
        raise EvaluatorError(f"batch_size must be at least 1, got {batch_size}")
    if max_length < 4:
        raise EvaluatorError(f"max_length must be at least 4, got {max_length}")
    if output is not None and output not in OUTPUT_KINDS:
        raise EvaluatorError(f"unknown output {output!r}; valid: {', '.join(OUTPUT_KINDS)}")


def _output_kind(
    source: str, output: OutputKind | None, metadata: dict[str, Any] | None
) -> OutputKind:
    """The output mapping: ``output`` if given, else the checkpoint's record, else the default."""
    recorded = (metadata or {}).get("output")
    if output is not None and recorded not in (None, output):
        logger.warning(
            "cross-encoder %s: using output=%r, although %s records %r",
            source,
            output,
            METADATA_FILE,
            recorded,
        )
    kind: OutputKind = output or recorded or DEFAULT_OUTPUT
    return kind


def check_int8_device(device: torch.device | str) -> None:
    """Refuse int8 quantisation anywhere but on the CPU.

    Args:
        device: The device the evaluator runs on.

    Raises:
        EvaluatorError: ``device`` is not a CPU (on CUDA the evaluators run in bf16 already).
    """
    kind = torch.device(device).type
    if kind == "cuda":
        raise EvaluatorError(
            "int8 quantisation is for CPU; on CUDA the evaluator already runs in bf16"
        )
    if kind != "cpu":
        raise EvaluatorError(f"int8 quantisation is for CPU, not {kind}")


def quantize_int8(module: torch.nn.Module) -> int:
    """Swap a CPU model's ``torch.nn.Linear`` layers for int8 dynamically quantised ones.

    Weights are stored as int8 with one scale per output channel; activations are quantised
    on the fly per batch, so scores drift slightly from the float model's. Embeddings and layer
    norms stay float32. The module is changed in place
    (``torch.ao.quantization.quantize_dynamic``, whose deprecation warnings are silenced here).

    Per-channel weight scales (``per_channel_dynamic_qconfig``) rather than one scale per
    tensor (``quantize_dynamic``'s default for ``dtype=torch.qint8``): at the same speed they
    halved the drift of a trained MiniLM cross-encoder on 740 dev pairs (mean absolute score
    difference 0.025 against 0.051, largest 0.097 against 0.22; ROC AUC 0.716 against 0.690,
    float 0.726).

    Args:
        module: A float32 model on the CPU.

    Returns:
        The number of layers quantised.

    Raises:
        EvaluatorError: The model is not float32 on the CPU, or the quantisation fails.
    """
    for layer in module.modules():
        if not isinstance(layer, torch.nn.Linear):
            continue
        weight = layer.weight
        if weight.device.type != "cpu" or weight.dtype != torch.float32:
            raise EvaluatorError(
                "int8 quantisation needs a float32 model on the CPU, got "
                f"{str(weight.dtype).removeprefix('torch.')} on {weight.device}"
            )
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="torch.ao.quantization is deprecated", category=DeprecationWarning
        )
        warnings.filterwarnings("ignore", message="torch.quantize_per_tensor", category=UserWarning)
        try:
            torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]
                module,
                {torch.nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig},
                dtype=torch.qint8,
                inplace=True,
            )
        except (RuntimeError, AssertionError) as exc:
            raise EvaluatorError(f"int8 quantisation failed: {first_line(exc)}") from exc
    quantised = torch.ao.nn.quantized.dynamic.Linear
    return sum(1 for layer in module.modules() if isinstance(layer, quantised))


def _default_dtype(device: torch.device) -> torch.dtype:
    if device.type != "cuda":
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


class CrossEncoderEvaluator(BatchedEvaluator):
    """A cross-encoder retrieval evaluator: one forward pass per (question, passage) pair.

    ``score`` sorts the pairs by character length (longest first, as ``CrossEncoder.predict``
    sorts them) and scores one batch of ``batch_size`` per ``predict`` call under
    ``torch.inference_mode``, so that a cancelled run stops before the next batch; each raw
    output is mapped with :func:`output_to_score`, and an empty or whitespace-only passage
    scores -1.0 without running the model (:class:`~crag.evaluator.base.BatchedEvaluator`).

    Attributes:
        name: Backend name, ``"cross-encoder"``.
        model_name_or_path: The checkpoint as given.
        output: The output mapping in use (``"regression"`` or ``"logit"``).
        device: Device the model runs on (chosen once, at load).
        dtype: Parameter dtype of the loaded model.
        batch_size: Pairs per forward pass.
        max_length: Token budget per pair, special tokens included (at most the model's).
        metadata: Content of the checkpoint's ``crag_evaluator.json``, or None.
        int8: Whether the Linear layers run int8 dynamically quantised (CPU only).

    With ``int8=True`` every ``torch.nn.Linear`` of the loaded model (the transformer's
    attention and feed-forward projections and the head) is replaced by an int8 dynamically
    quantised linear (:func:`quantize_int8`): about twice the pairs per second of float32
    batched scoring of MiniLM-L6 on two CPU cores. Scores drift slightly from the float
    model's (a trained MiniLM cross-encoder: mean 0.025, at most ~0.1 on 740 dev pairs, ROC
    AUC 0.716 against 0.726), so thresholds calibrated on float scores still apply roughly;
    recalibrate on int8 scores (``crag-bench evaluator calibrate --int8``) for exact figures.
    """

    def __init__(
        self,
        model_name_or_path: str,
        *,
        batch_size: int = 32,
        device: str | None = None,
        max_length: int = 512,
        output: OutputKind | None = None,
        int8: bool = False,
    ) -> None:
        """Load the cross-encoder.

        Args:
            model_name_or_path: Checkpoint directory (as ``save_pretrained`` writes it, from
                transformers or sentence-transformers) or a hub id.
            batch_size: Pairs per forward pass.
            device: ``"cuda"``, ``"cpu"``, ...; default CUDA when available, else CPU.
            max_length: Maximum tokens per pair; longer pairs are truncated (the longer of
                question and passage first). Capped at the model's own limit.
            output: ``"regression"`` or ``"logit"``; default: the ``output`` recorded in the
                checkpoint's ``crag_evaluator.json``, else ``"logit"``.
            int8: Quantise the Linear layers to int8 after loading (CPU only); faster, with a
                slight score drift.

        Raises:
            EvaluatorError: Bad arguments (``int8`` on a device other than the CPU among
                them), or the checkpoint is missing, unreachable, not a one-output sequence
                classifier, or fails to load.
        """
        _check_arguments(batch_size, max_length, output)
        self.name: str = "cross-encoder"
        self.model_name_or_path = model_name_or_path
        self.batch_size = batch_size

        source, is_local = resolve_checkpoint(
            model_name_or_path, backend=BACKEND, what="cross-encoder"
        )
        config = load_config(source, is_local, what="cross-encoder")
        _check_config(config, source, is_local)
        self.metadata: dict[str, Any] | None = read_metadata(source)
        self.output: OutputKind = _output_kind(source, output, self.metadata)

        self.device: torch.device = resolve_device(device)
        self.int8: bool = int8
        if int8:
            check_int8_device(self.device)
        self.dtype: torch.dtype = _default_dtype(self.device)
        self._model = self._load(source, int8=int8, max_length=max_length)
        self.max_length: int = self._model.max_seq_length
        self._identity = torch.nn.Identity()
        logger.info(
            "cross-encoder evaluator %s loaded on %s (%s), output %s, batch size %d, max length %d",
            source,
            self.device,
            str(self.dtype).removeprefix("torch.") + (", int8 linear layers" if int8 else ""),
            self.output,
            batch_size,
            self.max_length,
        )

    def _load(self, source: str, *, int8: bool, max_length: int) -> Any:
        """The checkpoint as a ``CrossEncoder`` in eval mode, int8-quantised if asked.

        It reads at most ``max_length`` tokens per pair, and no more than the model's own limit.
        """
        from sentence_transformers import CrossEncoder

        try:
            model = CrossEncoder(
                source,
                device=str(self.device),
                model_kwargs={"dtype": self.dtype},
                activation_fn=torch.nn.Identity(),
            )
        except Exception as exc:
            raise EvaluatorError(
                f"could not load cross-encoder {source!r} on {self.device}: {first_line(exc)}"
            ) from exc
        if model.num_labels != 1:
            raise EvaluatorError(
                f"cross-encoder {source!r} loaded with {model.num_labels} outputs; the "
                f"cross-encoder evaluator needs {_EXPECTED}"
            )
        if model.tokenizer is None:
            raise EvaluatorError(f"cross-encoder {source!r} has no tokenizer")
        model.eval()
        limit = model.max_seq_length
        model.max_seq_length = min(max_length, limit) if limit else max_length
        if int8:
            quantised = quantize_int8(model)
            logger.info("cross-encoder %s: %d linear layers quantised to int8", source, quantised)
        return model

    def __repr__(self) -> str:
        return (
            f"CrossEncoderEvaluator({self.model_name_or_path!r}, output={self.output!r}, "
            f"device={str(self.device)!r}{', int8=True' if self.int8 else ''})"
        )

    def _log_truncation(self, question: str, passages: Sequence[str], todo: list[int]) -> None:
        tokenizer = self._model.tokenizer
        encoded = tokenizer(
            [question] * len(todo),
            [passages[i] for i in todo],
            truncation=False,
            verbose=False,
        )["input_ids"]
        for i, ids in zip(todo, encoded, strict=True):
            if len(ids) > self.max_length:
                logger.debug(
                    "cross-encoder: passage %d truncated from %d to %d tokens",
                    i,
                    len(ids),
                    self.max_length,
                )

    def _mapped(self, raw: float) -> float:
        """The score of a raw output; a NaN stays NaN (the base class warns and scores -1)."""
        return raw if math.isnan(raw) else output_to_score(raw, self.output)

    def _batch_scorer(
        self, question: str, passages: Sequence[str], indices: list[int]
    ) -> BatchScorer:
        """Batches cut by character length, longest first (as ``CrossEncoder.predict`` sorts)."""
        if logger.isEnabledFor(logging.DEBUG):
            self._log_truncation(question, passages, indices)

        def score(batch: list[int]) -> list[float]:
            raw = self.raw_outputs(question, [passages[i] for i in batch])
            return [self._mapped(float(v)) for v in raw]

        return BatchScorer(score, sizes=[len(passages[i]) for i in indices])

    def raw_outputs(self, question: str, texts: Sequence[str]) -> list[float]:
        """The head's raw outputs (identity activation) for ``(question, text)`` pairs, in order."""
        with torch.inference_mode():
            values = self._model.predict(
                [(question, text) for text in texts],
                batch_size=self.batch_size,
                activation_fn=self._identity,
                show_progress_bar=False,
                convert_to_numpy=True,
            )
        return [float(v) for v in values.reshape(-1).tolist()]
