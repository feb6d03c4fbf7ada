"""Decode concurrent generation requests together, rows joining and leaving between steps.

On a CPU, decoding one sequence leaves most of the arithmetic units idle: a decoding step
costs about as much for eight sequences as for one (SmolLM2-135M on 2 cores: 100-token
prompts, 24 new tokens: 1.06 s for one, 2.04 s for eight). When runs overlap (a LangGraph
server answering several users, ``crag-bench eval --workers N``), their requests are decoded as one
batch that changes as it goes (continuous batching): a request that arrives while others are
decoding has its prompt read and joins at the next step, and a row that ends leaves at once,
so nobody waits for a batch to drain and no prompt is padded to another's length
(:mod:`crag.generator.step_decoding` does the tensor work).

No request waits for company: one decoding thread, started by the first request and ending
when no row or request is left, admits what is queued, decodes a step and hands out what
ended, over and over; callers wait for their own request. A lone request therefore runs at
once.

Why not transformers' continuous batching (``generate_batch``): docs/benchmark.md, "Continuous
batching: crag's against transformers'" (``bench/scripts/batching_vs_transformers.py``). It
cannot apply the reply n-gram blocker (its ``no_repeat_ngram_size`` fails the batch), so one
of 16 float32 answers differed from its lone answer (this batcher's: 16 of 16 equal); a
cancelled row gets no result back; and on 16 of the generate node's prompts it took 1.35-3.4x
this batcher's time on 2 shared CPU cores (8 prompts in float32: about even). On long prompts
(157-1,646 tokens, the blocker off) the library took 5x this batcher's time ("Our continuous
batching against transformers'", ``bench/scripts/bench_continuous_batching.py``).
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Protocol

from crag.core.cancellation import CancelToken, RunCancelledError


@dataclass(eq=False)
class GenerationRequest:
    """One prompt to continue, with its decoding settings."""

    input_ids: list[int]
    """The chat-templated prompt's token ids."""
    max_new_tokens: int
    stop: tuple[str, ...] = ()
    """Stop strings (none: stop at the end-of-sequence token or the token limit)."""
    token: CancelToken | None = None
    """The run's cancellation token: its row stops at the next token once cancelled."""
    output: list[int] | None = field(default=None, init=False)
    """The new token ids, once generated."""
    error: BaseException | None = field(default=None, init=False)
    done: bool = field(default=False, init=False)

    @property
    def cancelled(self) -> bool:
        """Whether the run this request works for was cancelled."""
        return self.token is not None and self.token.cancelled


class RowDecoder(Protocol):
    """A batch of rows decoded a step at a time (a :class:`~.step_decoding.StepDecoder`)."""

    @property
    def size(self) -> int:
        """Rows decoding now."""
        ...

    def admit(self, request: GenerationRequest) -> None:
        """Read the request's prompt and add its row.

        Raises:
            RunCancelledError: The request's run was cancelled meanwhile (no row added).
        """
        ...

    def step(self) -> None:
        """Decode one token for every row."""
        ...

    def take_finished(self) -> list[GenerationRequest]:
        """Remove the rows that ended and return their requests, outputs set."""
        ...

    def fail_all(self) -> list[GenerationRequest]:
        """Drop every row and return their requests."""
        ...


class GenerationBatcher:
    """Runs concurrent requests through one :class:`RowDecoder`, ``max_batch_size`` rows at most."""

    def __init__(
        self,
        decoder: RowDecoder,
        max_batch_size: int = 8,
        model_lock: threading.Lock | None = None,
    ) -> None:
        """Batch requests through ``decoder``.

        Args:
            decoder: Does the decoding.
            max_batch_size: Most rows decoded at once.
            model_lock: Held around every use of the decoder, so that other users of the same
                model (a lone ``generate``, streaming) never run at the same time.

        Raises:
            ValueError: ``max_batch_size`` is below 1.
        """
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        self._decoder = decoder
        self.max_batch_size = max_batch_size
        self._model_lock: AbstractContextManager[object] = model_lock or nullcontext()
        self._pending: list[GenerationRequest] = []
        self._driver: threading.Thread | None = None
        self._condition = threading.Condition()
        self.step_sizes: list[int] = []
        """Rows decoded by every step so far (for benchmarks and tests)."""

    def generate(self, request: GenerationRequest) -> list[int]:
        """Generate ``request`` (decoded together with whatever else is running) and return it.

        Raises:
            BaseException: Whatever decoding raised while the request was in the batch.
        """
        with self._condition:
            self._pending.append(request)
            if self._driver is None:
                self._driver = threading.Thread(
                    target=self._drive, name="crag-generation", daemon=True
                )
                self._driver.start()
            while not request.done:
                self._condition.wait()
        if request.error is not None:
            raise request.error
        assert request.output is not None
        return request.output

    def _drive(self) -> None:
        """The decoding thread: admit, decode a step, hand out what ended; while work remains.

        One thread does all the decoding, rather than whichever caller is waiting: the
        batch's cache is reallocated at every step, and glibc serves each thread from its own
        memory arena, so a decoding role passed between threads spread those allocations over
        up to 16 arenas that do not share freed memory (a 1,000-question `crag-bench eval --workers
        16` grew past 24 GB and was killed; one thread: about 2-3 GB).
        """
        try:
            while self._has_work():
                self._step_once()
        except BaseException as exc:  # noqa: BLE001 - no caller may be left waiting
            with self._condition:
                pending, self._pending = self._pending, []
                rows = self._decoder.fail_all()
                self._driver = None
            self._fail([*pending, *rows], exc)

    def _has_work(self) -> bool:
        """Whether rows or requests remain; if not, the decoding thread ends (atomically)."""
        with self._condition:
            if self._pending or self._decoder.size:
                return True
            self._driver = None
            return False

    def _step_once(self) -> None:
        """Admit what fits, decode one step and hand out the rows that ended."""
        admitted = self._take_pending()
        try:
            with self._model_lock:
                while admitted:
                    self._admit(admitted[0])
                    admitted.pop(0)
                self._finish(self._decoder.take_finished())
                if self._decoder.size:
                    self.step_sizes.append(self._decoder.size)
                    self._decoder.step()
                    self._finish(self._decoder.take_finished())
        except BaseException as exc:  # noqa: BLE001 - handed to every caller, re-raised there
            self._fail([*admitted, *self._decoder.fail_all()], exc)

    def _admit(self, request: GenerationRequest) -> None:
        """Read ``request``'s prompt into the batch; cancelled meanwhile, it ends alone."""
        try:
            self._decoder.admit(request)
        except RunCancelledError:
            request.output = []
            self._finish([request])

    def _take_pending(self) -> list[GenerationRequest]:
        """The oldest waiting requests that fit in the batch; cancelled ones end at once."""
        with self._condition:
            room = self.max_batch_size - self._decoder.size
            taken = self._pending[: max(room, 0)]
            del self._pending[: len(taken)]
        admitted: list[GenerationRequest] = []
        cancelled: list[GenerationRequest] = []
        for request in taken:
            (cancelled if request.cancelled else admitted).append(request)
        for request in cancelled:
            request.output = []
        self._finish(cancelled)
        return admitted

    def _finish(self, requests: list[GenerationRequest]) -> None:
        if not requests:
            return
        with self._condition:
            for request in requests:
                request.done = True
            self._condition.notify_all()

    def _fail(self, requests: list[GenerationRequest], exc: BaseException) -> None:
        for request in requests:
            request.error = exc
        self._finish(requests)
