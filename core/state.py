"""The graph's state: what callers send, what nodes share, and what a run returns.

Every field is JSON-serialisable (plain ``TypedDict`` values, and LangChain messages, which the
server and the checkpointers serialise) so that the same state travels through ``invoke``, the
LangGraph server and ``crag ask --json`` unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,
    Required,
    cast,
    get_args,
    get_origin,
    get_type_hints,
)

from langchain_core.messages import AnyMessage
from langgraph.graph.message import Messages, add_messages
from langgraph.types import Overwrite
from typing_extensions import TypedDict

from crag.core.question_channel import QuestionChannel
from crag.core.validation import chat_messages

Action = Literal["correct", "incorrect", "ambiguous"]
"""The action trigger's verdict on the retrieved passages (the paper's three actions)."""


class RetrievedPassage(TypedDict):
    """One passage returned by the vector store, with the evaluator's score once graded."""

    text: str
    """The passage text as stored."""
    source: str
    """The document it came from (file path or corpus title)."""
    chunk: int
    """Index of the chunk within its document."""
    score: float | None
    """Retrieval evaluator score in [-1, 1]; ``None`` before grading."""
    location: NotRequired[str]
    """Where the chunk is in its document, for citations ("p. 12", "slide 3", "sheet Sales,
    rows 2-40", "Method > Evaluator"); absent when the document's format says nothing."""
    writer: NotRequired[str]
    """Who stored the passage when it is not the operator: ``"served"`` (a run of the served
    ``ingest`` graph, whoever could reach the server); absent for the operator's."""


class KnowledgeStrip(TypedDict):
    """One piece of knowledge handed to the generator."""

    text: str
    """The strip text."""
    source: str
    """Where it came from: a document for internal knowledge, a URL for external knowledge."""
    chunk: int | None
    """The chunk index within ``source`` for internal knowledge; ``None`` for web knowledge."""
    origin: Literal["internal", "external"]
    """``internal`` (refined retrieved passages) or ``external`` (web search)."""
    score: float | None
    """Evaluator score of the strip against the question; ``None`` when it was not scored
    (baselines and ablations that skip the evaluator)."""
    location: NotRequired[str]
    """Where the strip's passage is in its document ("p. 12"), as ``RetrievedPassage``'s."""
    writer: NotRequired[str]
    """Who stored the strip's passage when it is not the operator, as ``RetrievedPassage``'s."""


class ActionDecision(TypedDict):
    """The typed outcome of the action trigger."""

    action: Action
    """The chosen action."""
    max_score: float | None
    """Highest passage score (``None`` when nothing was retrieved)."""
    reason: str
    """One sentence on why this action was taken."""


def merge_notes(left: list[str] | None, right: list[str] | None) -> list[str]:
    """Append notes from parallel branches, dropping exact repeats.

    A node that must start a fresh list (the first node of a run) returns
    ``langgraph.types.Overwrite([])``.
    """
    merged = list(left or [])
    for note in right or []:
        if note not in merged:
            merged.append(note)
    return merged


def add_chat_messages(left: Messages, right: Messages) -> Messages:
    """LangGraph's ``add_messages``, with a malformed message refused in one line.

    The ``messages`` channel's reducer: what a caller sends is checked first
    (:func:`~crag.core.validation.chat_messages`: an unknown role is an ``InvalidQuestionError``
    naming the message's index and the roles allowed, not LangChain's raw ``ValueError``).
    """
    return add_messages(left, cast("Messages", chat_messages(right)))


class InputState(TypedDict):
    """What a caller sends."""

    question: str
    """The user's question."""


class OutputState(TypedDict, total=False):
    """What a run returns (also what ``crag ask --json`` prints)."""

    answer: str
    """The generator's answer."""
    action: Action
    """``correct`` | ``incorrect`` | ``ambiguous``."""
    documents: list[RetrievedPassage]
    """Every retrieved passage with its score and source."""
    knowledge: list[KnowledgeStrip]
    """The strips given to the generator, each with its source, numbered from 1 in the prompt
    (the numbers ``citations`` and the answer's ``[n]`` refer to)."""
    citations: list[int]
    """The ``knowledge`` entries (1-based) the answer draws on: the valid ``[n]`` the generator
    wrote, else the entries sharing the most content words with the answer; empty when none
    does, or when the answer is a refusal or an abstention."""
    abstained: bool
    """True when no knowledge was found and the generator was not asked (the answer is the
    fixed abstention sentence; ``notes`` say which sources gave nothing)."""
    notes: Annotated[list[str], merge_notes]
    """What was degraded or skipped during the run (e.g. web search unreachable)."""


class ChatInputState(TypedDict, total=False):
    """What a caller of the ``crag`` graph sends: a question, or chat messages, or both.

    Chat front-ends send ``messages`` (the new user turn; the thread keeps the rest). When only
    ``messages`` is given, the question is the last human message's text.
    """

    question: str
    """The user's question."""
    messages: Annotated[list[AnyMessage], add_chat_messages]
    """Chat turns (LangChain messages or their JSON dicts), appended to the thread's."""


class ChatOutputState(OutputState, total=False):
    """What a ``crag`` run returns: the output state, the standalone question and the chat."""

    standalone_question: str
    """The question as answered: a follow-up rewritten from the thread's earlier turns. Set
    when the run was contextualised (a thread with earlier turns, or ``messages`` input)."""
    messages: Annotated[list[AnyMessage], add_chat_messages]
    """The thread's chat: each run appends its answer as an AI message whose
    ``additional_kwargs`` carry ``sources``, ``action`` and the ``question`` it answered."""


class State(ChatOutputState, total=False):
    """Everything the nodes share during a run."""

    question: Required[Annotated[str, QuestionChannel(str)]]
    """The user's question (see :mod:`crag.core.question_channel` for how a run tells its own
    from one an earlier run left on the thread)."""

    decision: ActionDecision
    """The action trigger's full decision."""
    internal_knowledge: list[KnowledgeStrip]
    """Refined strips from the retrieved passages (Correct and Ambiguous)."""
    search_query: str
    """The rewritten web-search query (Incorrect and Ambiguous)."""
    external_knowledge: list[KnowledgeStrip]
    """Strips selected from web results (Incorrect and Ambiguous)."""
    input_notes: list[str]
    """Notes on the run's input (earlier chat turns left out or cut), written by contextualize.
    It runs before the reset at ``retrieve`` clears ``notes``, so it leaves them here and
    ``retrieve`` (as the chat graphs add it) moves them into ``notes``."""
    web_reason: str
    """Why the web search gave no knowledge, in the words of its note ("web search unavailable:
    ...", "web search found nothing usable for ...", "web search returned 5 results but none
    scored above -0.99"); empty when it gave some, or did not run. ``abstain`` names it."""
    graded_by: str
    """The evaluator that scored this run's passages and strips when it is not the configured
    one: ``embedding`` after the configured evaluator failed (a model server that is down);
    empty otherwise. Later scoring and the action thresholds follow it."""
    answerable: bool
    """Whether the run's knowledge supports an answer (a strip scores above
    ``abstention_threshold``, or ``abstain_without_knowledge`` is off): written by
    ``decide_answer`` where the branches join; ``route_answer`` sends the run to ``generate``
    when it is, to ``abstain`` when not."""


class StateUpdate(TypedDict, total=False):
    """What a node returns: some of :class:`State`'s fields (mypy checks the keys and types).

    The same fields as :class:`State` (a test keeps the two in step), all optional, and
    ``notes`` may be an ``Overwrite`` (a node that starts a run's list afresh).
    """

    question: str
    answer: str
    action: Action
    documents: list[RetrievedPassage]
    knowledge: list[KnowledgeStrip]
    citations: list[int]
    abstained: bool
    notes: list[str] | Overwrite
    standalone_question: str
    messages: list[AnyMessage]
    decision: ActionDecision
    internal_knowledge: list[KnowledgeStrip]
    search_query: str
    external_knowledge: list[KnowledgeStrip]
    input_notes: list[str]
    web_reason: str
    graded_by: str
    answerable: bool


NOT_RESET: Mapping[str, str] = {
    "question": "the run's input",
    "messages": "the thread's chat: carried across runs, the new turn is the run's input",
    "standalone_question": "written by contextualize, which runs before the reset",
    "input_notes": "written by contextualize, which runs before the reset; retrieve moves it "
    "into notes and empties it",
    "action": "no empty value: the action trigger writes it before anything reads it",
    "decision": "no empty value: the action trigger writes it before anything reads it",
}
"""The :class:`State` fields a run does not clear when it starts, each with the reason.

A thread keeps its state between runs, so every other field is cleared by the first node that
retrieves (:func:`run_reset`); a new field is cleared too unless it is listed here.
"""


def _empty_value(name: str, declared: Any) -> Callable[[], Any]:
    """A factory of the value that clears field ``name`` of type ``declared`` for a new run."""
    if get_origin(declared) is Annotated:
        base, *extras = get_args(declared)
        if any(callable(extra) for extra in extras):  # a reducer would merge into the old list
            inner = _empty_value(name, base)
            return lambda: Overwrite(inner())
        declared = base
    kind = get_origin(declared) or declared
    if kind in (list, str, bool):
        return kind  # type: ignore[no-any-return]
    raise TypeError(
        f"State field {name!r} ({declared}) has no empty value to start a run with: list it in "
        "NOT_RESET with the reason it need not be cleared"
    )


def _reset_factories() -> dict[str, Callable[[], Any]]:
    hints = get_type_hints(State, include_extras=True)
    return {
        name: _empty_value(name, declared)
        for name, declared in hints.items()
        if name not in NOT_RESET
    }


_RESET = _reset_factories()


def run_reset() -> StateUpdate:
    """The update that clears everything an earlier run on the thread left (fresh values).

    Derived from :class:`State`: every field not in :data:`NOT_RESET` gets its empty value
    (``[]``, ``""``, ``False``; ``Overwrite([])`` for a field with a reducer, ``notes``).
    """
    return cast("StateUpdate", {name: factory() for name, factory in _RESET.items()})
