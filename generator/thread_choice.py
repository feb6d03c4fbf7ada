"""Decode a lone reply on whichever is faster now: the process's torch threads or one thread.

Why: at batch 1 a SmolLM2-135M decoding step is some 450 small operations, many of them
parallel regions of torch's OpenMP team (two threads on a 2-core machine), and each region
ends at a barrier that waits for both threads. On a quiet machine two threads are faster (a
786-token prompt: prefill 0.53 s against 0.97 s, decoding 38 against 54 ms a token); but when
another process keeps the second core busy, every barrier waits for the scheduler to run the
sibling thread, and two threads become several times slower than one (1.9 s and 187 ms a
token against 0.97 s and 52 ms; bfloat16, 2026-12-02, ``bench/scripts/profile_generation.py
--busy``). A shared machine (a server, a developer's machine running tests) is often in the
second state. Neither count is right for both, so the decoder measures: it times every decoding
step, uses the count whose latest step was faster, and tries the other one every
:data:`PROBE_EVERY` steps, since load comes and goes. A prompt is read with the count that
decoded faster last.

Only where a change of thread count need not change a result, and only when asked for
(``LocalChatModel.choose_threads``): in bfloat16 on an AMD EPYC with AVX512-BF16 (oneDNN's
kernels) SmolLM2's logits were bit-for-bit the same with one thread and two, at every prompt
length tried (91 to 1,323 tokens, prefill and decoding); on an Intel Xeon with AMX they differ
from about 300 prompt tokens on (up to 0.4 in a logit), so the choice is off by default. In
float32 (MKL) they differ in the last bits (up to 4e-5), which could flip a close greedy choice,
so a float32 model always keeps the process's count. ``torch.set_num_threads`` applies to the
calling thread's OpenMP team (and is the count threads started meanwhile begin with):
:meth:`ThreadChoice.applied` is entered on the thread that runs the forward passes, and gives
that thread its count back on exit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

PROBE_EVERY = 32
"""Decoding steps between tries of the count that is not in use (about one a reply or two):
under load a try of two threads costs one slow step (about 140 ms more), on a quiet machine a
try of one thread about 16 ms."""


class ThreadChoice:
    """Which thread count runs the next forward pass: the one whose latest step was faster.

    One per model, used by one decoding call at a time (the model's lock). The step times it
    keeps carry over from reply to reply.
    """

    def __init__(
        self, probe_every: int = PROBE_EVERY, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        """Choose, trying the unused count every ``probe_every`` decoding steps.

        Raises:
            ValueError: ``probe_every`` is below 1.
        """
        if probe_every < 1:
            raise ValueError(f"probe_every must be at least 1, got {probe_every}")
        self.probe_every = probe_every
        self._clock = clock
        self._seconds: dict[int, float] = {}
        """The latest decoding step's seconds, by thread count."""
        self._since_probe = 0

    def step_threads(self, options: tuple[int, ...]) -> int:
        """The thread count for the next decoding step, out of ``options`` (first: the default).

        A count not yet timed is tried first; then the faster, and every ``probe_every``
        steps the slowest, whose time may be old.
        """
        untimed = [n for n in options if n not in self._seconds]
        if untimed:
            return untimed[0]
        self._since_probe += 1
        if self._since_probe >= self.probe_every:
            self._since_probe = 0
            return max(options, key=self._seconds.__getitem__)
        return self.prompt_threads(options)

    def prompt_threads(self, options: tuple[int, ...]) -> int:
        """The thread count for reading a prompt: the one that decoded faster, else the first."""
        timed = [n for n in options if n in self._seconds]
        return min(timed, key=self._seconds.__getitem__) if timed else options[0]

    def record(self, threads: int, seconds: float) -> None:
        """A decoding step on ``threads`` threads took ``seconds``."""
        self._seconds[threads] = seconds

    @contextmanager
    def applied(self, model: Any) -> Iterator[None]:
        """Within the block, each forward pass of ``model`` on this thread runs on its choice.

        A pass over one new token is a decoding step (timed and recorded); a longer one reads
        a prompt. Only for a model whose results do not depend on the count (the caller's
        check, :func:`crag.generator.local.thread_invariant`); nothing changes when torch
        already runs one thread. On exit the thread has its count back.
        """
        import torch

        before = torch.get_num_threads()
        if before < 2:
            yield
            return
        options = (before, 1)
        started: list[tuple[int, float]] = []

        def pre(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
            decoding = _new_positions(args, kwargs) == 1
            threads = self.step_threads(options) if decoding else self.prompt_threads(options)
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
            started[:] = [(threads, self._clock())] if decoding else []

        def post(module: Any, args: Any, output: Any) -> None:
            if started:
                threads, start = started.pop()
                self.record(threads, self._clock() - start)

        handles = [
            model.register_forward_pre_hook(pre, with_kwargs=True),
            model.register_forward_hook(post),
        ]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
            if torch.get_num_threads() != before:
                torch.set_num_threads(before)


def _new_positions(args: Any, kwargs: dict[str, Any]) -> int | None:
    """How many positions a causal LM's forward pass reads (``input_ids`` or embeddings)."""
    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is not None:
        return int(ids.shape[-1])
    embeds = kwargs.get("inputs_embeds")
    return None if embeds is None else int(embeds.shape[1])
