"""The method's parameters: the action trigger, knowledge refinement, the web branch, ablations.

What Yan et al. (2024) tune and ablate, with the defaults calibrated for the shipped evaluator
(see the Benchmark in the README). They are set where a graph is built
(``build_graph(components, method=MethodConfig(...))``, the CLI's ``--set``, the benchmark's
experiments; for a served deployment the operator's ``CRAG_<NAME>`` environment variables,
:func:`operator_method`) and are the same for every run of that graph: a served caller cannot
change them (:mod:`crag.app.web.http` refuses them by name).
"""

from __future__ import annotations

import functools
import os
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from crag.settings.setting_checks import ENV_PREFIX, InvalidSettingError, Settings, env_name

PAPER_THRESHOLDS: tuple[float, float] = (0.59, -0.99)
"""The paper's action thresholds (upper, lower), set for its fine-tuned T5 on PopQA."""
EVALUATOR_THRESHOLDS: dict[str, tuple[float, float]] = {
    "embedding": (-0.4, -0.9),
    "cross-encoder": (0.59, -0.99),
}
"""Action thresholds calibrated on an evaluator's own score scale (the embedding evaluator's
passage map on the open-domain dev sets: above -0.4 nine questions in ten have an answer in
their passages, so Correct means "the store has it", and the share of Ambiguous runs falls
under half; the shipped cross-encoder's scores on the ``select`` split of the mined dev pairs);
an evaluator not named here takes the paper's. The
``cross-encoder`` entry is the shipped checkpoint's: a cross-encoder named by
``evaluator_model`` takes the paper's."""

READER_ABSTENTION: dict[str, float] = {"smollm2": -0.9}
"""Abstention thresholds of the generators that need one (an unset ``abstention_threshold``
follows the ``generator``); any other generator gets -1, only empty knowledge abstaining. On
300 dev questions SmolLM2 answered as many right at -1 as at -0.9, but from the 52 runs -0.9
abstained on it made up answers instead of abstaining (docs/benchmark.md, Abstention)."""

KnowledgeForm = Literal["strips", "passages"]

READER_KNOWLEDGE_FORM: dict[str, KnowledgeForm] = {"smollm2": "strips"}
"""Knowledge forms of the generators that need one (an unset ``knowledge_form`` follows the
``generator``); any other generator reads ``"passages"``. SmolLM2-135M answers more questions
from five short strips than from whole passages (docs/benchmark.md, Changes judged on dev); a
1.5B reader lost to standard RAG with the strips and was never worse than it with the passages
RAG would give, the web's best paragraphs taking the place of the weakest ones. Any reader
other than SmolLM2 gets the passages, never worse than RAG for the two measured; a 0.5B reader
answered more from the strips, so an operator with a small reader sets ``knowledge_form``
(docs/benchmark.md, Whole passages for a stronger reader)."""

Action = Literal["", "correct", "incorrect", "ambiguous"]


class MethodConfig(Settings):
    """The method's parameters (the paper's, and the ablations of its Tables 2 and 3)."""

    # Action trigger
    upper_threshold: float | None = Field(
        default=None,
        ge=-1,
        le=1,
        description="Correct if any passage scores above this. Unset (null): the "
        "evaluator's own: -0.4 for the default embedding evaluator (calibrated on the "
        "open-domain dev sets), the paper's 0.59 for 't5', 'cross-encoder' and 'llm'.",
    )
    lower_threshold: float | None = Field(
        default=None,
        ge=-1,
        le=1,
        description="Incorrect if every passage scores below this. Unset (null): the "
        "evaluator's own: -0.9 for the default embedding evaluator (P(relevant) = 0.05 on "
        "its scale, calibrated on the open-domain dev sets), the paper's -0.99 for 't5', "
        "'cross-encoder' and 'llm'.",
    )
    # Knowledge refinement
    strip_mode: Literal["sentences", "words", "passage"] = Field(
        default="sentences",
        description="How passages are decomposed into strips: groups of sentences, "
        "fixed-size word windows, or whole passages (no decomposition).",
    )
    strip_scoring: Literal["strip-map", "passage-map"] = Field(
        default="strip-map",
        description="How strips are scored: 'strip-map', with the evaluator's strip "
        "calibration where it has one (the embedding evaluator: cosine, heading and the "
        "question's words, fitted on strips that state the answer); 'passage-map', with the "
        "map used to grade whole passages.",
    )
    strip_size: int = Field(
        default=1,
        ge=1,
        le=1000,
        description="Sentences per strip ('sentences' mode) or words per strip "
        "('words' mode). A passage of at most two sentences stays one strip.",
    )
    strips_kept: int = Field(
        default=5,
        ge=1,
        le=100,
        description="Strips kept after filtering, best first (paper: top 5).",
    )
    strip_threshold: float = Field(
        default=-0.99,
        ge=-1,
        le=1,
        description="Strips scoring at or below this are dropped (paper: -0.5 on its "
        "T5's scale; -0.99 here, the lower threshold: the embedding evaluator scores single "
        "sentences lower than passages, and at -0.5 it dropped most answer-bearing strips).",
    )
    strip_margin: float = Field(
        default=1.0,
        ge=0,
        le=100,
        description="Strips whose logit (2 atanh(score)) is more than this below the "
        "best kept strip's are dropped too, store and web alike: distractors the reader "
        "would copy (1.0: more right answers on the dev sets, see Benchmark). 0: off.",
    )
    # External knowledge
    prefer_wikipedia: bool = Field(
        default=True,
        description="Bias the web query towards Wikipedia and rank Wikipedia pages first "
        "(as the paper does).",
    )
    fetch_pages: bool = Field(
        default=True,
        description="Read the pages of the top results and select their paragraphs "
        "(as the paper does); off: use the search snippets only (ablation).",
    )
    rewrite_for_search: bool = Field(
        default=False,
        description="Rewrite the question into at most three search keywords with the "
        "paper's few-shot prompt before searching; off (default): search for the question "
        "as asked, which found the answer more often on the dev sets and saves a generator "
        "call.",
    )
    select_web_knowledge: bool = Field(
        default=True,
        description="Score web paragraphs and keep the best; off: the first "
        "strips_kept paragraphs in result order, unscored (ablation).",
    )
    refine_web_knowledge: bool = Field(
        default=False,
        description="Off (default): whole web paragraphs are scored by the evaluator and "
        "the best strips_kept above strip_threshold kept (the relevant paragraphs), which "
        "answered more dev questions; on: they are refined as retrieved knowledge is "
        "(decomposed into strips, scored, the best kept), as the paper refines web "
        "knowledge.",
    )
    # Answering
    abstain_without_knowledge: bool = Field(
        default=True,
        description="When no knowledge passed the strip threshold (nothing kept from "
        "the store, and the web failed or gave nothing relevant), answer with a fixed "
        "sentence saying so, without asking the generator (abstained: true); off: the "
        "generator answers with no knowledge (crag graph only).",
    )
    abstention_threshold: float | None = Field(
        default=None,
        ge=-1,
        le=1,
        description="Abstain also when knowledge was kept but none of it scores above "
        "this (strips with no score always count); -1: only a run with no knowledge at "
        "all abstains, and the reader judges the rest. Unset (null): the reader's own: "
        "-0.9 for the shipped SmolLM2 (P(the strip states the answer) = 0.05 on the "
        "embedding evaluator's strip map; SmolLM2 answers from weak knowledge rather than "
        "say it lacks the answer), -1 for any other generator (abstaining on weak "
        "knowledge threw away answers a stronger reader got right).",
    )
    knowledge_form: KnowledgeForm | None = Field(
        default=None,
        description="What the reader is given: 'strips', the paper's refinement (the "
        "best strips_kept strips, recomposed); 'passages', whole passages within the words "
        "of the top_k retrieved passages (what standard RAG gives): a Correct run reads "
        "every retrieved passage, an Ambiguous one the best-scored of the passages and "
        "the web's paragraphs together, an Incorrect one the web's best paragraphs. Unset "
        "(null): the reader's own: 'strips' for the shipped SmolLM2 (it reads short "
        "knowledge better), 'passages' for any other generator (a stronger reader lost "
        "answers to the strips' lower recall).",
    )
    ambiguous_knowledge: Literal["both", "pooled"] = Field(
        default="pooled",
        description="What an Ambiguous run reads: 'pooled', the best strips_kept of "
        "the refined store strips and the selected web strips together; 'both', each "
        "branch's strips side by side (up to 2 x strips_kept), as the paper concatenates "
        "them.",
    )
    knowledge_order: Literal["original", "score"] = Field(
        default="original",
        description="Order of the knowledge in the generator's prompt: 'original', "
        "store strips then web strips, each in passage order, as the paper recomposes; "
        "'score', best-scored first (no better on the dev sets: +3 points on nq-dev, -4 "
        "on trivia-dev).",
    )
    number_knowledge: bool = Field(
        default=False,
        description="Number the knowledge in the generator's prompt ([1] ...) so the "
        "generator can cite entries itself (its valid [n] become the citations; without "
        "them citations come from word overlap). Off by default: SmolLM2-135M never "
        "cites and read numbered knowledge worse on the dev sets.",
    )
    # Ablations (the paper's Tables 2 and 3); the defaults run the full method
    force_action: Action = Field(
        default="",
        description="Take this action whatever the scores ('' : the action trigger "
        "decides). Ablation: CRAG with only one action.",
    )
    disable_action: Action = Field(
        default="",
        description="Remove one action, as the paper's Table 2 does: without correct or "
        "incorrect, that case becomes ambiguous; without ambiguous, one threshold halfway "
        "between lower_threshold and upper_threshold splits correct from incorrect.",
    )
    refine_knowledge: bool = Field(
        default=True,
        description="Decompose, filter and recompose the retrieved passages; off: the "
        "passages not judged irrelevant go to the generator whole (ablation).",
    )
    best_passage_whole: bool = Field(
        default=False,
        description="Refinement keeps the passage of the best-scored strip whole, in "
        "place of its strips (one entry among the strips_kept), so the generator reads the "
        "most relevant passage as written; off: strips only, as the paper refines.",
    )

    def thresholds_for(self, evaluator: str, evaluator_model: str = "") -> tuple[float, float]:
        """The action trigger's (upper, lower) thresholds: each as set, else the evaluator's.

        Thresholds belong to an evaluator's score scale, so an unset one follows the
        ``evaluator`` (:data:`EVALUATOR_THRESHOLDS`, else :data:`PAPER_THRESHOLDS`): an
        operator who switches to the paper's T5 gets the paper's thresholds without setting
        them, and a method that sets one keeps it whatever the evaluator.
        """
        name = evaluator.strip().lower()
        own = name != "cross-encoder" or not evaluator_model.strip()
        upper, lower = EVALUATOR_THRESHOLDS.get(name, PAPER_THRESHOLDS) if own else PAPER_THRESHOLDS
        return (
            upper if self.upper_threshold is None else self.upper_threshold,
            lower if self.lower_threshold is None else self.lower_threshold,
        )

    def abstention_for(self, generator: str) -> float:
        """The abstention threshold: as set, else the reader's (:data:`READER_ABSTENTION`).

        Whether weak knowledge should reach the reader depends on the reader: one that says
        when the knowledge lacks the answer should judge it; the shipped 135M model does not.
        """
        if self.abstention_threshold is not None:
            return self.abstention_threshold
        return READER_ABSTENTION.get(generator.strip().lower() or "smollm2", -1.0)

    def knowledge_form_for(self, generator: str) -> KnowledgeForm:
        """The knowledge form: as set, else the reader's (:data:`READER_KNOWLEDGE_FORM`)."""
        if self.knowledge_form is not None:
            return self.knowledge_form
        return READER_KNOWLEDGE_FORM.get(generator.strip().lower() or "smollm2", "passages")

    def check_thresholds(self, evaluator: str, evaluator_model: str = "") -> None:
        """Refuse a lower threshold above the upper one (an unset one: the evaluator's)."""
        upper, lower = self.thresholds_for(evaluator, evaluator_model)
        if lower <= upper:
            return
        unset = [
            name
            for name, value in (("upper", self.upper_threshold), ("lower", self.lower_threshold))
            if value is None
        ]
        origin = f" ({' and '.join(unset)}: the {evaluator} evaluator's default)" if unset else ""
        raise InvalidSettingError(
            f"setting lower_threshold ({lower:g}) must not be above upper_threshold "
            f"({upper:g}){origin}"
        )

    def check_together(self) -> None:
        """No action both forced and removed; thresholds in order where both are set."""
        if self.force_action and self.force_action == self.disable_action:
            raise InvalidSettingError(
                f"settings force_action and disable_action both name {self.force_action!r}: "
                "an action cannot be forced and removed at once"
            )
        if self.upper_threshold is not None and self.lower_threshold is not None:
            self.check_thresholds("embedding")


def _variable(name: str) -> str:
    return f"environment variable {env_name(name)}"


class _OperatorMethod(BaseSettings, MethodConfig):
    """The method read from ``CRAG_<NAME>`` by pydantic-settings, as the deployment settings are.

    Environment variables are text, so they are read in pydantic's lax mode (``on`` is true,
    ``0.5`` a number); an error names the variable.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_ignore_empty=True,
        extra="ignore",
        strict=False,
        str_strip_whitespace=True,
    )
    subject = _variable


@functools.lru_cache(maxsize=4)
def _method_under(environment: tuple[str | None, ...]) -> MethodConfig:
    """The method under one value of its environment variables (the cache key)."""
    del environment  # the key only: pydantic-settings reads os.environ itself
    read = _OperatorMethod()
    return MethodConfig(**{name: getattr(read, name) for name in MethodConfig.model_fields})


def operator_method() -> MethodConfig:
    """The operator's method: the defaults, each overridden by its ``CRAG_<NAME>`` variable.

    What the app's graphs (:mod:`crag.app.graphs`, the served ones) run with; read once per
    value of those variables and shared (read it, do not change it).

    Raises:
        InvalidSettingError: a variable is set to a value of the wrong type or out of bounds.
    """
    names = [env_name(name) for name in MethodConfig.model_fields]
    return _method_under(tuple(os.environ.get(name) for name in names))
