"""The paper's few-shot prompt that turns a question into web-search keywords.

Yan et al. (2024), appendix "Task Prompts": at most three keywords, separated by commas.
"""

REWRITE_INSTRUCTION = (
    "Extract at most three keywords separated by comma from the following dialogues and "
    "questions as queries for the web search, including topic background within dialogues "
    "and main intent within questions."
)

REWRITE_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("What is Henry Feilden's occupation?", "Henry Feilden, occupation"),
    ("In what city was Billy Carlson born?", "city, Billy Carlson, born"),
    ("What is the religion of John Gwynn?", "religion of John Gwynn"),
    (
        "What sport does Kiribati men's national basketball team play?",
        "sport, Kiribati men's national basketball team play",
    ),
)


def rewrite_turns(question: str) -> list[tuple[str, str]]:
    """The same prompt as chat turns: the instruction, each example as a user/assistant pair.

    Chat models, small ones especially, follow examples given as turns far better than
    examples pasted into one message. Roles are ``system``, ``human`` and ``ai``.
    """
    turns = [("system", REWRITE_INSTRUCTION)]
    for q, a in REWRITE_EXAMPLES:
        turns += [("human", f"question: {q}"), ("ai", f"query: {a}")]
    turns.append(("human", f"question: {question}"))
    return turns
