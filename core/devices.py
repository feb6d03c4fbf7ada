"""Where local models run, decided without importing torch when torch cannot reach a GPU.

``import torch`` costs about 2.4 s of a cold ``crag ask`` on two cores, and the default models
run on onnxruntime on a CPU, where torch is not needed at all. A CPU-only build of torch (the
wheel this project pins: ``torch.version.cuda`` and ``hip`` are ``None``) can never see a GPU, so
its build file is read as text instead of imported. Any other build is imported and asked.
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from pathlib import Path

_BUILD_FIELD = re.compile(r"^(cuda|hip|xpu)\s*(?::[^=]*)?=\s*(.+)$", re.MULTILINE)


def torch_build_has_gpu() -> bool:
    """Whether the installed torch was built for a GPU (CUDA, ROCm or XPU), not importing it.

    Reads ``torch/version.py``; True (ask torch) when it cannot be read or parsed, so an
    unknown build is never taken for a CPU one.
    """
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        text = version_file.read_text(encoding="utf-8")
    except OSError:
        return True
    fields = dict(_BUILD_FIELD.findall(text))
    if set(fields) != {"cuda", "hip", "xpu"}:
        return True
    return any(value.strip() != "None" for value in fields.values())


@lru_cache(maxsize=1)
def default_device() -> str:
    """``"cuda"`` when torch sees a CUDA device, else ``"cpu"`` (torch imported only if needed)."""
    if not torch_build_has_gpu():
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
