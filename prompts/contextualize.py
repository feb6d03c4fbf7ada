"""The prompt that turns a follow-up question into a standalone one, as chat turns.

Small chat models follow examples given as user/assistant turns far better than rules, so the
instruction is short and two worked examples show the expected output: one question, the
references replaced by what they name, nothing answered.
"""

from __future__ import annotations

from collections.abc import Sequence

CONTEXTUALIZE_INSTRUCTION = (
    "Rewrite the follow-up question so that it can be understood without the conversation: "
    "replace words such as it, he, she, they and there with what they refer to. Do not answer "
    "it. Reply with the rewritten question only."
)

CONTEXTUALIZE_EXAMPLES: tuple[tuple[tuple[tuple[str, str], ...], str, str], ...] = (
    (
        (("Who wrote Hamlet?", "William Shakespeare wrote Hamlet."),),
        "When was he born?",
        "When was William Shakespeare born?",
    ),
    (
        (("What is the capital of Kenya?", "Nairobi is the capital of Kenya."),),
        "How many people live there?",
        "How many people live in Nairobi?",
    ),
)
"""(earlier turns, follow-up, standalone question) worked examples."""


def render_request(turns: Sequence[tuple[str, str]], follow_up: str) -> str:
    """One user turn: the conversation so far, then the follow-up question."""
    lines = ["Conversation:"]
    for question, answer in turns:
        lines += [f"Q: {question}", f"A: {answer}"]
    lines.append(f"Follow-up question: {follow_up}")
    return "\n".join(lines)


def contextualize_turns(turns: Sequence[tuple[str, str]], follow_up: str) -> list[tuple[str, str]]:
    """The prompt as chat turns (roles ``system``, ``human``, ``ai``)."""
    messages = [("system", CONTEXTUALIZE_INSTRUCTION)]
    for example_turns, example_follow_up, standalone in CONTEXTUALIZE_EXAMPLES:
        messages += [
            ("human", render_request(example_turns, example_follow_up)),
            ("ai", standalone),
        ]
    messages.append(("human", render_request(turns, follow_up)))
    return messages
