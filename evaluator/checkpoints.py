"""Where the model-backed evaluators (t5, cross-encoder) find their checkpoint and device.

A checkpoint is a local directory (as ``save_pretrained`` writes it) or a Hugging Face hub id;
both evaluators resolve and read it the same way, and name themselves in the errors
(``what``: ``"T5 evaluator"``, ``"cross-encoder"``). transformers is imported only when a
config is read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from crag.evaluator.base import EvaluatorError

_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def is_hub_id(name: str) -> bool:
    """Whether ``name`` can be a hub id: ``name`` or ``owner/name`` (no ``..``, ``--``)."""
    return (
        _HUB_ID.fullmatch(name) is not None
        and ".." not in name
        and "--" not in name
        and not name.endswith(".")
    )


def resolve_checkpoint(model_name_or_path: str, *, backend: str, what: str) -> tuple[str, bool]:
    """Return ``(source, is_local)`` for a checkpoint directory or hub id.

    Args:
        model_name_or_path: The checkpoint as given.
        backend: The evaluator's registry name, for the error on an empty name.
        what: How the errors name the evaluator.

    Raises:
        EvaluatorError: The name is empty, or names a local path that is missing (and is not
            a hub id) or not a directory.
    """
    name = model_name_or_path.strip()
    if not name:
        raise EvaluatorError(f"the {backend} evaluator needs a checkpoint path or hub id, got ''")
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path.resolve()), True
    if path.exists():
        raise EvaluatorError(f"{what} checkpoint {name!r} is a file, not a directory")
    if not is_hub_id(name):
        raise EvaluatorError(
            f"{what} checkpoint directory {name!r} does not exist (and it is not a hub id of the "
            "form 'owner/name')"
        )
    return name, False


def load_config(source: str, is_local: bool, *, what: str) -> Any:
    """The checkpoint's ``config.json`` (transformers' ``AutoConfig``).

    Raises:
        EvaluatorError: A local directory without a readable config, or a hub id that cannot
            be loaded (offline, unknown).
    """
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source)
    except Exception as exc:
        if is_local:
            raise EvaluatorError(
                f"{source!r} is not a model checkpoint: could not read its config.json "
                f"({first_line(exc)})"
            ) from exc
        raise EvaluatorError(
            f"could not load {what} {source!r} from the hub (offline?), and there is no local "
            f"directory of that name: {first_line(exc)}"
        ) from exc


def architectures_of(config: Any) -> str:
    """The architectures a checkpoint's config names, comma-separated (``unknown``: none)."""
    return ", ".join(getattr(config, "architectures", None) or []) or "unknown"


def check_single_output(config: Any, source: str, *, what: str, expected: str, output: str) -> None:
    """Refuse a checkpoint whose head does not have exactly one output (``num_labels=1``).

    Args:
        config: The checkpoint's config.
        source: The checkpoint, as the errors name it.
        what: How the error names the evaluator (``"T5 evaluator"``).
        expected: What the evaluator needs, in words.
        output: What the one output is (``"regression"``, ``"relevance"``).

    Raises:
        EvaluatorError: ``num_labels`` is not 1.
    """
    num_labels = getattr(config, "num_labels", None)
    if num_labels != 1:
        raise EvaluatorError(
            f"checkpoint {source!r} ({architectures_of(config)}) has num_labels={num_labels}; "
            f"the {what} needs {expected}: a single {output} output"
        )


def resolve_device(device: str | None) -> torch.device:
    """The device an evaluator runs on: ``device``, or CUDA when available, else the CPU.

    Raises:
        EvaluatorError: ``device`` is not a device torch knows.
    """
    if not device:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except RuntimeError as exc:
        raise EvaluatorError(f"unknown device {device!r}: {first_line(exc)}") from exc
