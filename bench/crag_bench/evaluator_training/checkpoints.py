"""Resumable training checkpoints, saved atomically.

Layout of ``out_dir/checkpoint/``::

    config.json, model.safetensors      the model, as save_pretrained writes it
    tokenizer.json, tokenizer_config.json, ...
    optimizer.pt                        optimizer, scheduler and RNG states (torch.save)
    trainer_state.json                  step, epoch, position, losses, run settings

A checkpoint is written into a fresh temporary folder ``out_dir/.checkpoint-*`` and then
renamed into place; the previous one is first moved to ``checkpoint.old`` and deleted after
the rename, so at any moment one complete checkpoint exists. ``trainer_state.json`` is written
last: a folder without it is incomplete and ignored.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from crag_bench.evaluator_training.backends import Backend, save_model
from crag_bench.evaluator_training.errors import TrainingError

logger = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoint"
"""Name of the checkpoint folder inside the output folder."""

STATE_FILE = "trainer_state.json"
"""Progress and settings of the run (JSON), written last."""

OPTIMIZER_FILE = "optimizer.pt"
"""Optimizer, scheduler and RNG states."""

_OLD_SUFFIX = ".old"
_TMP_PREFIX = ".checkpoint-"


@dataclass
class TrainerState:
    """Where a run is, and the settings it must be resumed with.

    Attributes:
        step: Optimizer steps done.
        epoch: Epoch of the next step (0-based).
        position: Pairs of that epoch's shuffled order already trained on.
        total_steps: Steps of the whole run.
        settings: Run settings (kind, base model, hyperparameters, pairs digest); a resume
            with other settings would not reproduce the run, so it is refused.
        epoch_loss_sum: Sum of the step losses of the current epoch so far.
        epoch_loss_steps: Steps of the current epoch so far.
        epoch_losses: Mean step loss of every finished epoch.
    """

    step: int
    epoch: int
    position: int
    total_steps: int
    settings: dict[str, Any]
    epoch_loss_sum: float = 0.0
    epoch_loss_steps: int = 0
    epoch_losses: list[float] = field(default_factory=list)

    def to_json(self) -> str:
        """Serialise as indented JSON."""
        return json.dumps(asdict(self), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> TrainerState:
        """Parse :meth:`to_json` output."""
        data = json.loads(text)
        return cls(
            step=int(data["step"]),
            epoch=int(data["epoch"]),
            position=int(data["position"]),
            total_steps=int(data["total_steps"]),
            settings=dict(data["settings"]),
            epoch_loss_sum=float(data.get("epoch_loss_sum", 0.0)),
            epoch_loss_steps=int(data.get("epoch_loss_steps", 0)),
            epoch_losses=[float(x) for x in data.get("epoch_losses", [])],
        )


def capture_rng() -> dict[str, Any]:
    """The states of Python's, NumPy's and torch's (CPU and CUDA) random generators.

    Only plain containers, numbers and tensors, so ``torch.load(weights_only=True)`` reads it.
    """
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": [str(name), [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Restore the generators from :func:`capture_rng` output."""
    version, internal, gauss = state["python"]
    random.setstate((int(version), tuple(int(x) for x in internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state(
        (str(name), np.asarray(keys, dtype=np.uint32), int(pos), int(has_gauss), float(cached))
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def remove_stale(out_dir: Path) -> None:
    """Delete temporary folders left by checkpoint saves that were interrupted."""
    if out_dir.is_dir():
        for path in out_dir.glob(_TMP_PREFIX + "*"):
            shutil.rmtree(path, ignore_errors=True)


def find_checkpoint(out_dir: Path) -> Path | None:
    """The complete checkpoint in ``out_dir``, or ``None``.

    A save interrupted between its two renames leaves only ``checkpoint.old``, which is
    then the latest complete one.
    """
    for name in (CHECKPOINT_DIR, CHECKPOINT_DIR + _OLD_SUFFIX):
        path = out_dir / name
        if (path / STATE_FILE).is_file() and (path / OPTIMIZER_FILE).is_file():
            return path
    return None


def remove_checkpoint(out_dir: Path) -> None:
    """Delete the checkpoint (and any leftover of one) from ``out_dir``."""
    for name in (CHECKPOINT_DIR, CHECKPOINT_DIR + _OLD_SUFFIX):
        shutil.rmtree(out_dir / name, ignore_errors=True)
    remove_stale(out_dir)


def save_checkpoint(
    out_dir: Path,
    backend: Backend,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: TrainerState,
) -> Path:
    """Atomically replace ``out_dir/checkpoint`` with the current training state.

    Returns:
        The checkpoint folder.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=out_dir))
    final = out_dir / CHECKPOINT_DIR
    old = out_dir / (CHECKPOINT_DIR + _OLD_SUFFIX)
    try:
        save_model(backend, tmp)
        torch.save(
            {
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": capture_rng(),
            },
            tmp / OPTIMIZER_FILE,
        )
        (tmp / STATE_FILE).write_text(state.to_json(), encoding="utf-8")
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
            final.rename(old)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    logger.info("checkpoint at step %d saved to %s", state.step, final)
    return final


def read_state(checkpoint: Path) -> TrainerState:
    """Read a checkpoint's ``trainer_state.json``.

    Raises:
        TrainingError: The file is unreadable or malformed.
    """
    try:
        return TrainerState.from_json((checkpoint / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TrainingError(
            f"checkpoint {checkpoint} is damaged ({STATE_FILE}: {exc}); delete it or pass "
            "resume=False"
        ) from exc


def load_optimizer_state(checkpoint: Path) -> dict[str, Any]:
    """Read a checkpoint's optimizer, scheduler and RNG states.

    Raises:
        TrainingError: The file is unreadable.
    """
    try:
        loaded: dict[str, Any] = torch.load(
            checkpoint / OPTIMIZER_FILE, map_location="cpu", weights_only=True
        )
    except Exception as exc:
        raise TrainingError(
            f"checkpoint {checkpoint} is damaged ({OPTIMIZER_FILE}: {exc}); delete it or pass "
            "resume=False"
        ) from exc
    return loaded
