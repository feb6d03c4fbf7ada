"""Batch the generation requests that arrive together into one padded ``generate`` call.

On a CPU, decoding one sequence leaves most of the arithmetic units idle: a decoding step
costs about as much for eight sequences as for one (SmolLM2-135M on 2 cores: 100-token
prompts, 24 new tokens: 1.06 s for one, 2.04 s for eight). When runs overlap (a LangGraph
server answering several users, ``crag eval --workers N``), the requests that queue while the
model is busy are decoded together.

No request waits for company: the first caller to find the model idle becomes the leader and
runs whatever is queued at that moment (its own request at least), then hands over; callers
that arrive meanwhile wait and form the next batch. A lone request therefore runs at once, as
a batch of one, exactly as without batching. Requests are grouped by their decoding settings
(token limit, stop strings), since one ``generate`` call has one of each, and by prompt
length, since padding a short prompt to a long one's length costs what reading a long one
does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from graph.cancellation import CancelToken


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
    def key(self) -> tuple[int, tuple[str, ...]]:
        """Requests with equal keys can share one ``generate`` call."""
        return (self.max_new_tokens, self.stop)


PADDING_ALLOWANCE = 1.25
"""Most padded prompt tokens a batch may read per real prompt token."""

BatchRunner = Callable[[Sequence[GenerationRequest]], list[list[int]]]
"""Generates a batch of requests with equal keys; returns each one's new token ids, in order."""


class GenerationBatcher:
    """Runs concurrent requests through ``run_batch``, up to ``max_batch_size`` at a time."""

    def __init__(self, run_batch: BatchRunner, max_batch_size: int = 8) -> None:
        """Batch calls to ``run_batch``.

        Raises:
            ValueError: ``max_batch_size`` is below 1.
        """
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        self._run_batch = run_batch
        self.max_batch_size = max_batch_size
        self._pending: list[GenerationRequest] = []
        self._running = False
        self._condition = threading.Condition()
        self.batch_sizes: list[int] = []
        """Size of every batch run so far (for benchmarks and tests)."""

    def generate(self, request: GenerationRequest) -> list[int]:
        """Generate ``request`` (in a batch with whatever else is waiting) and return its tokens.

        Raises:
            BaseException: Whatever generating its batch raised.
        """
        with self._condition:
            self._pending.append(request)
        while True:
            with self._condition:
                while not request.done and self._running:
                    self._condition.wait()
                if request.done:
                    break
                self._running = True
                batch = self._take_batch()
            try:
                self._run(batch)
            finally:
                with self._condition:
                    self._running = False
                    self._condition.notify_all()
        if request.error is not None:
            raise request.error
        assert request.output is not None
        return request.output

    def _take_batch(self) -> list[GenerationRequest]:
        """The oldest waiting request and the waiting ones that fit with it.

        They fit when they have its key and a prompt of a similar length: the batch's prompts
        are padded to the longest, and reading a prompt costs in proportion to its padded
        length, so a 60-token prompt batched with a 1,300-token one would cost as much as a
        second long one. Candidates closest in length join first, while the padded tokens stay
        within :data:`PADDING_ALLOWANCE` times the real ones.
        """
        first = self._pending[0]
        candidates = sorted(
            (r for r in self._pending[1:] if r.key == first.key),
            key=lambda r: abs(len(r.input_ids) - len(first.input_ids)),
        )
        batch = [first]
        longest, tokens = len(first.input_ids), len(first.input_ids)
        for request in candidates:
            if len(batch) >= self.max_batch_size:
                break
            padded_longest = max(longest, len(request.input_ids))
            real = tokens + len(request.input_ids)
            if padded_longest * (len(batch) + 1) <= PADDING_ALLOWANCE * real:
                batch.append(request)
                longest, tokens = padded_longest, real
        taken = set(map(id, batch))
        self._pending = [r for r in self._pending if id(r) not in taken]
        self.batch_sizes.append(len(batch))
        return batch

    def _run(self, batch: list[GenerationRequest]) -> None:
        try:
            outputs = self._run_batch(batch)
        except BaseException as exc:  # noqa: BLE001 - handed to every caller, re-raised there
            for request in batch:
                request.error = exc
        else:
            for request, output in zip(batch, outputs, strict=True):
                request.output = output
        with self._condition:
            for request in batch:
                request.done = True
