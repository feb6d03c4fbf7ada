"""An LLM as the retrieval evaluator: the paper's few-shot yes/no prompt (its Table 8).

Yan et al. (2024) compare their fine-tuned T5 with ChatGPT prompted to answer whether a
document "has exact information to answer the question". This back end asks any LangChain chat
model the same question, one prompt per (question, passage) pair, and turns the answer into a
score in [-1, 1]:

* Where the model exposes next-token probabilities, the score is the expected +1/-1 label
  given that the answer is yes or no: ``2 * P(yes) / (P(yes) + P(no)) - 1``. Local models
  (:class:`crag.generator.local.LocalChatModel`) give them through ``next_token_probabilities``;
  other chat models are asked for OpenAI-style log-probabilities
  (``bind(logprobs=True, top_logprobs=5)``, read from
  ``response_metadata["logprobs"]["content"][0]["top_logprobs"]``).
* Otherwise the answer text is parsed: yes -> +1.0, no -> -1.0, anything else -> 0.0.
"""

from __future__ import annotations

import contextvars
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage

from crag.evaluator.base import BatchedEvaluator, BatchScorer, EvaluatorError
from crag.generator.reply_cap import reply_cap
from crag.prompts.evaluator import EVALUATOR_ANSWERS, evaluator_prompt

logger = logging.getLogger(__name__)

TOP_LOGPROBS = 5
"""Alternatives per token asked of chat models with OpenAI-style log-probabilities."""

ANSWER_TOKENS = 8
"""Longest yes/no answer asked of a model that reads it as text (a model server's)."""

_ANSWER = re.compile(r"^\W*(?:answer\W*)?(yes|no)\b", re.IGNORECASE)


@runtime_checkable
class SupportsNextTokenProbabilities(Protocol):
    """A chat model that reports the probability of each candidate first reply token."""

    def next_token_probabilities(
        self, messages: list[BaseMessage], candidates: Sequence[str]
    ) -> dict[str, float]:
        """Return ``{candidate: probability}`` for the first token of the reply."""
        ...


def probabilities_to_score(p_yes: float, p_no: float) -> float | None:
    """Expected +1/-1 label given the answer is yes or no: ``2 * p_yes / (p_yes + p_no) - 1``.

    Args:
        p_yes: Probability (or unnormalised mass) of answering yes.
        p_no: Probability (or unnormalised mass) of answering no.

    Returns:
        The score in [-1, 1], or None where neither answer has positive, finite mass.
    """
    total = p_yes + p_no
    if not (math.isfinite(total) and total > 0.0) or p_yes < 0.0 or p_no < 0.0:
        return None
    return min(1.0, max(-1.0, 2.0 * p_yes / total - 1.0))


def answer_to_score(text: str) -> float:
    """Score an answer text: starts with yes -> +1.0, with no -> -1.0, else 0.0.

    Leading punctuation, markup and an ``Answer:`` prefix are skipped; case is ignored.
    """
    match = _ANSWER.match(text)
    if match is None:
        logger.debug("llm evaluator: answer %r is neither yes nor no; scoring 0", text[:80])
        return 0.0
    return 1.0 if match.group(1).lower() == "yes" else -1.0


def top_logprob_probabilities(metadata: Mapping[str, Any]) -> tuple[float, float] | None:
    """``(P(yes), P(no))`` of the first reply token from OpenAI-style log-probabilities.

    Sums the probabilities of the first token's top alternatives that read yes or no once
    stripped of spaces and punctuation, in any case.

    Args:
        metadata: A reply's ``response_metadata``.

    Returns:
        The two probabilities, or None where the metadata holds no usable log-probabilities.
    """
    try:
        alternatives = metadata["logprobs"]["content"][0]["top_logprobs"]
        mass = {"yes": 0.0, "no": 0.0}
        for alternative in alternatives:
            word = re.sub(r"\W", "", str(alternative["token"])).lower()
            if word in mass:
                mass[word] += math.exp(float(alternative["logprob"]))
    except (KeyError, IndexError, TypeError, ValueError, OverflowError):
        return None
    return mass["yes"], mass["no"]


def paper_prompt(question: str, passage: str) -> list[BaseMessage]:
    """The paper's few-shot yes/no prompt (its Table 8) as one user turn."""
    return [HumanMessage(evaluator_prompt(question, passage))]


class LLMEvaluator(BatchedEvaluator):
    """Scores passages by asking a chat model the paper's few-shot yes/no question.

    ``score`` asks one prompt per non-empty passage, in order (chat models have no batch
    scoring here), reusing the same model; a cancelled run stops before the next prompt, and
    an empty or whitespace-only passage scores -1.0 without a call
    (:class:`~crag.evaluator.base.BatchedEvaluator`). A failing chat model is an
    :class:`~crag.evaluator.base.EvaluatorError`.

    Attributes:
        name: Backend name for logs and reports.
        chat_model: The chat model asked, one prompt per non-empty passage.
    """

    batch_size = 1
    """Prompts in flight at once: one, or a model server's parallel requests
    (``parallel_requests``, the in-flight limit), one prompt per passage either way."""

    def __init__(
        self,
        chat_model: BaseChatModel,
        *,
        name: str = "llm",
        prompt: Callable[[str, str], list[BaseMessage]] | None = None,
    ) -> None:
        """Wrap a chat model.

        Args:
            chat_model: Any LangChain chat model; a ``LocalChatModel`` gives probabilities.
            name: Backend name for logs and reports.
            prompt: Builds the conversation for one (question, passage) pair; it must ask for
                a yes/no answer. Default: the paper's few-shot prompt as one user turn.
        """
        self.chat_model = chat_model
        self.batch_size = max(1, int(getattr(chat_model, "parallel_requests", 1)))
        self.name: str = name
        self._prompt = prompt or paper_prompt
        self._logprobs_supported: bool | None = None

    def __repr__(self) -> str:
        return f"LLMEvaluator({type(self.chat_model).__name__}, name={self.name!r})"

    def _ask(self, messages: list[BaseMessage], **bind: Any) -> BaseMessage:
        bind = {**reply_cap(self.chat_model, ANSWER_TOKENS), **bind}
        model: Any = self.chat_model.bind(**bind) if bind else self.chat_model
        reply: BaseMessage = model.invoke(messages)
        return reply

    def _text_score(self, messages: list[BaseMessage]) -> float:
        try:
            reply = self._ask(messages)
        except Exception as exc:
            raise EvaluatorError(f"the llm evaluator's chat model failed: {exc}") from exc
        return answer_to_score(reply.text)

    def _logprob_score(self, messages: list[BaseMessage]) -> float:
        if self._logprobs_supported is False:
            return self._text_score(messages)
        try:
            reply = self._ask(messages, logprobs=True, top_logprobs=TOP_LOGPROBS)
        except Exception as exc:  # noqa: BLE001 - any provider error: parse yes/no instead
            logger.warning(
                "llm evaluator: %s does not take logprobs (%s); parsing yes/no answers instead",
                type(self.chat_model).__name__,
                exc,
            )
            self._logprobs_supported = False
            return self._text_score(messages)
        probabilities = top_logprob_probabilities(reply.response_metadata)
        if probabilities is None:
            if self._logprobs_supported is None:
                logger.info(
                    "llm evaluator: %s returned no log-probabilities; parsing yes/no answers",
                    type(self.chat_model).__name__,
                )
            self._logprobs_supported = False
            return answer_to_score(reply.text)
        self._logprobs_supported = True
        score = probabilities_to_score(*probabilities)
        return answer_to_score(reply.text) if score is None else score

    def score_one(self, question: str, passage: str) -> float:
        """Score one passage (no empty-passage shortcut); see :meth:`score`."""
        messages = self._prompt(question, passage)
        model: Any = self.chat_model
        if isinstance(model, SupportsNextTokenProbabilities):
            yes, no = EVALUATOR_ANSWERS
            try:
                probabilities = model.next_token_probabilities(messages, EVALUATOR_ANSWERS)
            except Exception as exc:
                raise EvaluatorError(f"the llm evaluator's chat model failed: {exc}") from exc
            score = probabilities_to_score(probabilities.get(yes, 0.0), probabilities.get(no, 0.0))
            if score is not None:
                return score
            logger.debug("llm evaluator: P(yes) and P(no) are both 0; parsing the answer")
            return self._text_score(messages)
        return self._logprob_score(messages)

    def _batch_scorer(
        self, question: str, passages: Sequence[str], indices: list[int]
    ) -> BatchScorer:
        """One prompt per passage; a batch's prompts are sent at once to a model server."""
        if self.batch_size == 1:
            return BatchScorer(lambda batch: [self.score_one(question, passages[i]) for i in batch])

        def at_once(batch: list[int]) -> list[float]:
            # each thread runs in a copy of this one's context: the run's cancellation token
            with ThreadPoolExecutor(len(batch), thread_name_prefix="crag-llm-grader") as pool:
                futures = [
                    pool.submit(
                        contextvars.copy_context().run, self.score_one, question, passages[i]
                    )
                    for i in batch
                ]
                return [future.result() for future in futures]

        return BatchScorer(at_once)
