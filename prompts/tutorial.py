"""Prompts of the LangGraph tutorial's corrective RAG, the peer baseline of ``crag-bench eval``.

The tutorial ("Corrective RAG (CRAG)" in LangGraph's examples) grades each retrieved document
with an LLM yes/no question, rewrites the question for web search when any document is judged
irrelevant, and answers from the relevant documents plus the web results. Its grader and
re-writer prompts are reproduced here; its generation prompt is not: the baseline answers with
this project's generation prompt, so that only the pipeline differs.
"""

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

GRADER_SYSTEM = (
    "You are a grader assessing relevance of a retrieved document to a user question. \n"
    "    If the document contains keyword(s) or semantic meaning related to the question, "
    "grade it as relevant. \n"
    "    Give a binary score 'yes' or 'no' score to indicate whether the document is relevant "
    "to the question."
)
GRADER_HUMAN = "Retrieved document: \n\n {document} \n\n User question: {question}"

REWRITER_SYSTEM = (
    "You a question re-writer that converts an input question to a better version that is "
    "optimized \n     for web search. Look at the input and try to reason about the underlying "
    "semantic intent / meaning."
)
REWRITER_HUMAN = "Here is the initial question: \n\n {question} \n Formulate an improved question."


def grader_messages(question: str, document: str) -> list[BaseMessage]:
    """The tutorial's relevance-grading conversation for one document."""
    return [
        SystemMessage(GRADER_SYSTEM),
        HumanMessage(GRADER_HUMAN.format(document=document, question=question)),
    ]


def rewriter_messages(question: str) -> list[BaseMessage]:
    """The tutorial's question re-writing conversation."""
    return [SystemMessage(REWRITER_SYSTEM), HumanMessage(REWRITER_HUMAN.format(question=question))]
