"""Make a local generator's cached models on first use beside the run, not after its retrieval.

On an empty cache the first answer of the default SmolLM2 waits for three things made once: the
embedder's ONNX export (about 13 s on two cores, when the run embeds its question), then, when
the run reaches ``generate``, the GGUF file's conversion (about 22 s) and the generator's ONNX
build (about 12 s), one after the other. A :class:`Preparation` starts the generator's two in a
child process as the run starts, so they go on while the run imports, retrieves and grades on
the other core; the run's own load then waits for the lock each holds
(:func:`crag.settings.model_cache.made_once`) and finds them made. A child, because converting
imports torch and transformers, which a second thread of the run's process must not import
while the run imports them.

``python -m crag.generator.prepare SPEC`` is that child: it makes the transformers folder of the
local spec and its ONNX model, and exits 0, or 1 with the reason on stderr.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

logger = logging.getLogger(__name__)


PREPARE_TIMEOUT_SECONDS = 1800
"""The child's limit: a GGUF conversion and a build of a large model take minutes."""


def is_prepared(spec: str) -> bool | None:
    """Whether ``spec``'s ONNX model is made; None when there is nothing to prepare.

    Nothing: not a local model (an API or a model server; a GGUF file that is not there), or
    its build failed before (its ``.failed`` note: the run reports it, no child would do
    better).
    """
    from crag.generator.factory import built_model_folder
    from crag.generator.onnx_build import MODEL_FILE, failure_note, onnx_folder

    folder = built_model_folder(spec)
    if folder is None:
        return None
    if not (folder / "config.json").is_file():
        return False
    target = onnx_folder(folder)
    if failure_note(target).is_file():
        return None
    return (target / MODEL_FILE).is_file()


class Preparation:
    """Making one spec's models in a child process, for one run; :meth:`stop` ends it."""

    def __init__(self, spec: str) -> None:
        """Nothing starts until :meth:`run`."""
        self.spec = spec
        self._lock = threading.Lock()
        self._child: subprocess.Popen[str] | None = None
        self._stopped = False

    def run(self) -> bool:
        """Make the models in a child process and wait for it; whether it made them.

        Called on a thread of its own (:meth:`crag.app.wiring.Components.preload_chat_model`).
        A failure is logged at debug level only: the run makes the models itself and reports
        why. Nothing starts once :meth:`stop` was called.
        """
        from crag.settings.model_cache import cache_dir

        env = {**os.environ, "CRAG_CACHE_DIR": str(cache_dir().parent)}
        command = [sys.executable, "-m", "crag.generator.prepare", self.spec]
        with self._lock:
            if self._stopped:
                return False
            logger.info("preparing the generator %s beside the run (once)", self.spec or "smollm2")
            try:
                child = subprocess.Popen(  # our own interpreter and arguments, no shell
                    command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
            except OSError as exc:
                logger.debug("preparing the generator failed (the run makes it): %s", exc)
                return False
            self._child = child
        try:
            _, err = child.communicate(timeout=PREPARE_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            err = f"it took more than {PREPARE_TIMEOUT_SECONDS} s"
        if child.returncode != 0:
            last = err.strip().splitlines()[-1:] or [f"exit code {child.returncode}"]
            logger.debug("preparing the generator failed (the run makes it): %s", last[0])
            return False
        return True

    def stop(self) -> None:
        """End the preparation (the run failed: no one waits for it), or keep it from starting.

        The child cleans up on SIGTERM (:func:`main`): the folder it was making is deleted and
        its lock let go, so the next run prepares afresh.
        """
        with self._lock:
            self._stopped = True
            child = self._child
        if child is not None and child.poll() is None:
            child.terminate()


def prepare(spec: str) -> Path:
    """The ONNX model of the local ``spec``, its folder converted and the model built if need be.

    Raises:
        ValueError: ``spec`` is not a local model, or it cannot be converted or built.
    """
    from crag.generator.factory import local_model_folder
    from crag.generator.onnx_build import ensure_onnx_model

    folder = local_model_folder(spec)
    if folder is None:
        raise ValueError(f"{spec!r} is not a local model: there is nothing to prepare")
    return ensure_onnx_model(Path(folder))


def _exit_on_terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    """The child: ``python -m crag.generator.prepare SPEC``."""
    # SIGTERM (Preparation.stop) unwinds like an exception: made_once deletes its partial folder
    # and a builder child of ours is killed by subprocess.run on the way out
    signal.signal(signal.SIGTERM, _exit_on_terminate)
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        sys.stderr.write("usage: python -m crag.generator.prepare SPEC\n")
        return 2
    try:
        sys.stdout.write(f"{prepare(args[0])}\n")
    except (ValueError, RuntimeError) as exc:
        sys.stderr.write(f"cannot prepare the generator {args[0]!r}: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
