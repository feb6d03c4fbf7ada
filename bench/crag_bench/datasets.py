"""The open-domain QA sets bundled for ``crag-bench eval --dataset NAME``.

Each set is a PopQA-format JSONL file in ``bench/crag_bench/data/open_domain`` (built by
``bench/scripts/build_open_domain_sets.py``); its name is the file's stem. Sets named ``*-dev`` are
for tuning; ``*-test`` sets are for acceptance runs only. Listing the sets is cheap (the CLI's
parser does it); reading one imports the question reader.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crag_bench.questions import EvalQuestion

DATA_DIR = Path(__file__).resolve().parent / "data" / "open_domain"


class UnknownDatasetError(ValueError):
    """No bundled set has the name asked for; the message lists the valid names."""


def dataset_names(folder: Path = DATA_DIR) -> list[str]:
    """The names of the bundled sets, dev sets first, each group sorted."""
    names = [path.stem for path in folder.glob("*.jsonl")]
    return sorted(names, key=lambda name: (not is_dev(name), name))


def is_dev(name: str) -> bool:
    """Whether a set is for tuning (``*-dev``) rather than acceptance runs."""
    return name.endswith("-dev")


def dataset_path(name: str, folder: Path = DATA_DIR) -> Path:
    """The file of the set called ``name``.

    Raises:
        UnknownDatasetError: no such set (the message lists the valid names).
    """
    names = dataset_names(folder)
    if name not in names:
        valid = ", ".join(names) or f"none (no .jsonl files in {folder})"
        raise UnknownDatasetError(f"unknown dataset {name!r}; valid: {valid}")
    return folder / f"{name}.jsonl"


def load_dataset(name: str, folder: Path = DATA_DIR) -> list[EvalQuestion]:
    """The questions of the set called ``name``, in file order.

    Raises:
        UnknownDatasetError: no such set.
        QuestionFileError: its file is malformed.
    """
    from crag_bench.questions import read_popqa  # loads the corpus module: slow, so not at import

    return read_popqa(dataset_path(name, folder))
