"""The ``question`` channel: it tells this run's question from one an earlier run left.

A thread keeps its state between runs, ``question`` included (``get_state``, ``crag history``
and the server's thread state show it). So a run whose input holds only chat ``messages``
still finds a ``question`` in the state: the one an earlier run was sent. When that run failed
before answering, nothing else marks the question as old, and it would win over the new human
message (and fail again). The input step writes ``question`` only when the caller sent one, so
the channel knows: a value restored from the thread's checkpoint and not written since reads
back as :class:`CarriedQuestion`, a ``str`` that says it came from an earlier run.
"""

from __future__ import annotations

from typing import Any, Self

from langgraph.channels.last_value import LastValue


class CarriedQuestion(str):
    """A question restored from the thread's state: an earlier run's, not this run's input."""

    __slots__ = ()


class QuestionChannel(LastValue[str]):
    """``LastValue`` whose value, restored from a checkpoint and not written since, is carried.

    The checkpoint stores a plain ``str``; only the run that restores it sees the mark.
    """

    def from_checkpoint(self, checkpoint: Any) -> Self:
        """The channel of a new run (or a state read): a stored question reads as carried."""
        channel = super().from_checkpoint(checkpoint)
        if isinstance(channel.value, str):
            channel.value = CarriedQuestion(channel.value)
        return channel

    def checkpoint(self) -> Any:
        """The value to store: always a plain ``str``."""
        value = self.value
        return str(value) if isinstance(value, CarriedQuestion) else value
