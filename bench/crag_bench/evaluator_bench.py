"""Measure evaluator throughput: batched scoring against one pair per call, float and int8.

The paper's released code scores (question, passage) pairs one at a time; the evaluators here
score all passages of a call in batched forward passes and, on a CPU, can run int8.
:func:`run_bench` times four modes on the same model in the same process:

* batched: one ``score(question, passages)`` call per question, with all its passages;
* per pair: a loop of ``score(question, [passage])`` calls, one per pair;
* the paper's way: what its released code does (``select_relevants`` in its
  ``scripts/utils.py``): one pair per forward pass, ``question [SEP] passage`` padded to
  ``max_length`` 512, under ``torch.no_grad``. The headline ratio is batched against this;
* batched int8: batched, on a deep copy of the model whose ``torch.nn.Linear`` layers are int8
  dynamically quantised (:func:`crag.evaluator.cross_encoder.quantize_int8`, what the evaluators'
  ``int8=True`` does), so the other modes keep the float model. The result also gives the
  largest score difference between int8 and float batched scores.

Batched, per pair and batched int8 alternate round by round, so they see the same machine load.

Pairs are realistic: FanOutQA ``train`` leaf questions, each with bundled Wikipedia summaries
cut to the store's chunk size (1,000 characters, at a word boundary; the gold page first when it
is in the corpus). Two models are known:

``minilm``
    A cross-encoder made from the shipped all-MiniLM-L6-v2 encoder
    (``BertForSequenceClassification``, ``num_labels=1``, new random head), saved to a temporary
    folder and scored by :class:`crag.evaluator.cross_encoder.CrossEncoderEvaluator` (by a minimal
    local batched scorer, :class:`LocalCrossEncoderScorer`, where that module is missing).
``t5-large``
    ``T5ForSequenceClassification`` in T5-large's shape (24+24 layers, d_model 1024,
    ~740M parameters) with random weights, built in memory. :class:`crag.evaluator.t5.T5Evaluator`
    loads only from a checkpoint folder (saving one takes ~3 GB), so a local scorer does
    exactly what it does: the ``question [SEP] passage`` template, one end-of-sequence token,
    sort by length, pad per batch, ``torch.inference_mode``, one forward pass per batch. Its
    tokenizer is the MiniLM WordPiece tokenizer (ids below 30,522, inside T5's 32,128): no
    SentencePiece model ships offline; the token counts are close to T5's.

Speed does not depend on the weights, so random heads and random T5 weights time the real
thing. The int8 score difference does depend on them: it is only a rough guide here (a trained
MiniLM cross-encoder drifted up to ~0.1 on real pairs; see
:func:`crag.evaluator.cross_encoder.quantize_int8`). Everything runs on the CPU.
"""

from __future__ import annotations

import copy
import logging
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from crag.evaluator.base import EvaluatorError, RetrievalEvaluator

logger = logging.getLogger(__name__)

MODELS: tuple[str, ...] = ("minilm", "t5-large")
"""Models :func:`run_bench` knows."""

DEFAULT_PAIRS: dict[str, int] = {"minilm": 64, "t5-large": 16}
"""Default number of pairs per model (T5-large is slow on a few CPU cores)."""

DEFAULT_REPEATS: dict[str, int] = {"minilm": 3, "t5-large": 1}
"""Default rounds per model; each mode keeps its fastest round."""

PASSAGE_CHARS = 1000
"""Passage length cap, in characters: the store's chunk size."""

T5_TEMPLATE = "{question} [SEP] {passage}"
"""The paper's T5 input format (as :data:`crag.evaluator.t5.DEFAULT_TEMPLATE`)."""


@dataclass(frozen=True)
class BenchResult:
    """Throughput of one model: batched, one pair per call, the paper's way and batched int8."""

    model: str
    scorer: str
    """What scored the pairs (class name)."""
    parameters: int
    device: str
    torch_threads: int
    pairs: int
    passages_per_question: int
    batch_size: int
    repeats: int
    """Rounds of the timed modes; the timings are each mode's fastest round (the paper's way
    runs once)."""
    mean_tokens: float
    """Mean tokens per (question, passage) pair, as the scorer's tokenizer counts them."""
    build_seconds: float
    batched_seconds: float
    per_pair_seconds: float
    batched_pairs_per_s: float
    per_pair_pairs_per_s: float
    speedup: float
    """``batched_pairs_per_s / per_pair_pairs_per_s``."""
    paper_way_seconds: float
    paper_way_pairs_per_s: float
    speedup_vs_paper_way: float
    """``batched_pairs_per_s / paper_way_pairs_per_s``: against the released code's loop."""
    max_score_difference: float
    """Largest difference between a pair's batched and one-at-a-time score (padding check)."""
    int8_build_seconds: float
    """Time to copy the model and quantise the copy's Linear layers to int8."""
    batched_int8_seconds: float
    batched_int8_pairs_per_s: float
    speedup_int8_vs_batched: float
    """``batched_int8_pairs_per_s / batched_pairs_per_s``: int8 against float, both batched."""
    speedup_int8_vs_paper_way: float
    """``batched_int8_pairs_per_s / paper_way_pairs_per_s``."""
    max_int8_score_difference: float
    """Largest difference between a pair's int8 and float batched score (quantisation drift)."""
    load_average: float
    """The machine's 1-minute load average when the run started (other work skews timings)."""

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-ready dict."""
        return asdict(self)


def bench_pairs(n: int, passages_per_question: int = 0, seed: int = 0) -> list[tuple[str, str]]:
    """Build ``n`` realistic (question, passage) pairs, grouped by question.

    Args:
        n: Number of pairs.
        passages_per_question: Passages per question (0: all ``n`` for one question).
        seed: Seed for the choice of non-gold passages.

    Returns:
        Pairs, each question's passages together (gold page first when in the corpus).

    Raises:
        ValueError: ``n`` is below 1 or ``passages_per_question`` is negative.
    """
    from crag.vectorstore.corpus import load_corpus
    from crag_bench.evaluator_report import read_split
    from crag_bench.fanoutqa import leaf_questions

    if n < 1:
        raise ValueError(f"the number of pairs must be at least 1, got {n}")
    if passages_per_question < 0:
        raise ValueError(f"passages per question must be 0 or more, got {passages_per_question}")
    group = passages_per_question or n
    rng = random.Random(seed)
    docs = load_corpus()
    by_title = {doc.title: doc.text for doc in docs}
    questions = leaf_questions(read_split()["train"])
    rng.shuffle(questions)

    def cut(text: str) -> str:
        if len(text) <= PASSAGE_CHARS:
            return text
        head = text[:PASSAGE_CHARS]
        return head[: head.rfind(" ")] if " " in head else head

    pairs: list[tuple[str, str]] = []
    for number, leaf in enumerate(questions * (n // max(1, len(questions)) + 1)):
        if len(pairs) >= n:
            break
        gold = by_title.get(leaf.gold_title)
        passages = [gold] if gold else []
        passages += [doc.text for doc in rng.sample(docs, min(group, len(docs)))]
        take = min(group, n - len(pairs))
        pairs += [(leaf.question, cut(text)) for text in passages[:take]]
        logger.debug("bench question %d: %s", number, leaf.question)
    return pairs


def _group(pairs: Sequence[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    groups: list[tuple[str, list[str]]] = []
    for question, passage in pairs:
        if groups and groups[-1][0] == question:
            groups[-1][1].append(passage)
        else:
            groups.append((question, [passage]))
    return groups


class LocalCrossEncoderScorer:
    """A minimal batched cross-encoder scorer (used when the cross-encoder back end is absent).

    Sorts pairs by length, pads per batch, runs one forward pass per batch in inference mode
    and clamps the single output to [-1, 1].
    """

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int, max_length: int = 512):
        """Wrap a one-output sequence classifier and its tokenizer."""
        self.name = "local-cross-encoder"
        self._model = model.eval()
        self._tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        """Return one score in [-1, 1] per passage, in order."""
        order = sorted(range(len(passages)), key=lambda i: len(passages[i]), reverse=True)
        scores = [-1.0] * len(passages)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                encoded = self._tokenizer(
                    [question] * len(chunk),
                    [passages[i] for i in chunk],
                    padding=True,
                    truncation="longest_first",
                    max_length=self.max_length,
                    return_tensors="pt",
                )
                logits = self._model(**encoded).logits[:, 0].clamp(-1.0, 1.0).tolist()
                for i, value in zip(chunk, logits, strict=True):
                    scores[i] = float(value)
        return scores


class LocalT5Scorer:
    """Scores pairs exactly as :class:`crag.evaluator.t5.T5Evaluator` does, on an in-memory model.

    ``question [SEP] passage`` without special tokens, end-of-sequence tokens removed, cut to
    ``max_length - 1`` and one end-of-sequence token appended; pairs sorted by token count
    (longest first), padded per batch, one forward pass per batch under inference mode, the
    logit clamped to [-1, 1].
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        eos_id: int,
        pad_id: int,
        batch_size: int,
        max_length: int = 512,
    ) -> None:
        """Wrap a ``T5ForSequenceClassification`` (``num_labels=1``) and a tokenizer."""
        self.name = "local-t5"
        self._model = model.eval()
        self._tokenizer = tokenizer
        self._eos_id = eos_id
        self._pad_id = pad_id
        self.batch_size = batch_size
        self.max_length = max_length

    def encode(self, question: str, passages: Sequence[str]) -> list[list[int]]:
        """Token ids per pair, ending in one end-of-sequence token."""
        texts = [T5_TEMPLATE.format(question=question, passage=p) for p in passages]
        encoded = self._tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
        pairs = []
        for ids in encoded:
            body = [int(i) for i in ids if i != self._eos_id][: self.max_length - 1]
            pairs.append([*body, self._eos_id])
        return pairs

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        """Return one score in [-1, 1] per passage, in order."""
        pairs = self.encode(question, passages)
        order = sorted(range(len(pairs)), key=lambda k: len(pairs[k]), reverse=True)
        scores = [-1.0] * len(passages)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                width = max(len(pairs[k]) for k in chunk)
                input_ids = torch.full((len(chunk), width), self._pad_id, dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for row, k in enumerate(chunk):
                    input_ids[row, : len(pairs[k])] = torch.tensor(pairs[k], dtype=torch.long)
                    mask[row, : len(pairs[k])] = 1
                logits = self._model(input_ids=input_ids, attention_mask=mask).logits
                for k, value in zip(chunk, logits[:, 0].clamp(-1.0, 1.0).tolist(), strict=True):
                    scores[k] = float(value)
        return scores


def paper_way(model: Any, tokenizer: Any, pairs: Sequence[tuple[str, str]]) -> list[float]:
    """Score pairs as the paper's released code does: one at a time, padded to 512 tokens."""
    scores = []
    for question, passage in pairs:
        inputs = tokenizer(
            question + " [SEP] " + passage,
            return_tensors="pt",
            padding="max_length",
            truncation=True,
            max_length=PAPER_MAX_LENGTH,
        )
        with torch.no_grad():
            outputs = model(inputs["input_ids"], attention_mask=inputs["attention_mask"])
        scores.append(float(outputs.logits[0, 0]))
    return scores


PAPER_MAX_LENGTH = 512
"""The released code pads every pair to this many tokens."""


def paper_way_t5(scorer: LocalT5Scorer, pairs: Sequence[tuple[str, str]]) -> list[float]:
    """:func:`paper_way` for T5: the same ids as the batched scorer, padded to 512, one by one.

    T5's own tokenizer ends every input with an end-of-sequence token, which the
    classification head needs; the bench's stand-in tokenizer does not, so the ids come from
    :meth:`LocalT5Scorer.encode` (which appends it) and are padded here.
    """
    scores = []
    for question, passage in pairs:
        (ids,) = scorer.encode(question, [passage])
        input_ids = torch.full((1, PAPER_MAX_LENGTH), scorer._pad_id, dtype=torch.long)
        mask = torch.zeros((1, PAPER_MAX_LENGTH), dtype=torch.long)
        input_ids[0, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        mask[0, : len(ids)] = 1
        with torch.no_grad():
            outputs = scorer._model(input_ids=input_ids, attention_mask=mask)
        scores.append(float(outputs.logits[0, 0]))
    return scores


def _minilm_path() -> Path:
    from crag.vectorstore.embeddings import resolve_model_path

    return resolve_model_path()


@contextmanager
def minilm_scorer(batch_size: int) -> Iterator[tuple[RetrievalEvaluator, int, Any, Any]]:
    """Yield a MiniLM cross-encoder scorer, its parameter count, tokenizer and raw model."""
    from transformers import AutoTokenizer, BertForSequenceClassification

    source = _minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    model = BertForSequenceClassification.from_pretrained(str(source), num_labels=1)
    parameters = sum(p.numel() for p in model.parameters())
    try:
        from crag.evaluator.cross_encoder import CrossEncoderEvaluator
    except ImportError:
        logger.info("no cross-encoder back end; timing a local batched scorer")
        yield (
            LocalCrossEncoderScorer(model, tokenizer, batch_size=batch_size),
            parameters,
            tokenizer,
            model,
        )
        return
    with tempfile.TemporaryDirectory(prefix="crag-bench-minilm-") as folder:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        evaluator = CrossEncoderEvaluator(
            folder, batch_size=batch_size, device="cpu", output="regression"
        )
        yield evaluator, parameters, tokenizer, model.eval()  # type: ignore[no-untyped-call]


def t5_large_scorer(batch_size: int) -> tuple[LocalT5Scorer, int, Any]:
    """Build a random T5-large regression model in memory and a scorer around it."""
    from transformers import AutoTokenizer, T5Config, T5ForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(str(_minilm_path()))
    shape: dict[str, Any] = {
        "d_model": 1024,
        "d_ff": 4096,
        "num_layers": 24,
        "num_decoder_layers": 24,
        "num_heads": 16,
        "d_kv": 64,
        "vocab_size": 32128,
        "num_labels": 1,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "decoder_start_token_id": 0,
    }
    config = T5Config(**shape)
    torch.manual_seed(0)
    model = T5ForSequenceClassification(config)
    parameters = sum(p.numel() for p in model.parameters())
    scorer = LocalT5Scorer(model, tokenizer, eos_id=1, pad_id=0, batch_size=batch_size)
    return scorer, parameters, tokenizer


def int8_copy(scorer: Any) -> Any:
    """A copy of a scorer whose model's Linear layers are int8 dynamically quantised.

    The scorer is copied shallowly and its model (``_model``) deeply, so the original keeps
    its float model.

    Args:
        scorer: :class:`crag.evaluator.cross_encoder.CrossEncoderEvaluator`,
            :class:`LocalCrossEncoderScorer` or :class:`LocalT5Scorer`, on the CPU in float32.

    Returns:
        The int8 scorer.

    Raises:
        EvaluatorError: The model cannot be quantised.
    """
    from crag.evaluator.cross_encoder import quantize_int8

    twin = copy.copy(scorer)
    twin._model = copy.deepcopy(scorer._model)
    quantize_int8(twin._model)
    if hasattr(twin, "int8"):
        twin.int8 = True
    return twin


def _time(call: Callable[[], list[float]]) -> tuple[float, list[float]]:
    started = time.perf_counter()
    scores = call()
    return time.perf_counter() - started, scores


@dataclass(frozen=True)
class ModeTimings:
    """Fastest rounds and score differences of :func:`time_modes`."""

    batched_seconds: float
    per_pair_seconds: float
    max_score_difference: float
    """Largest difference between batched and one-at-a-time scores."""
    int8_seconds: float | None
    """Batched seconds of the int8 scorer; None without one."""
    max_int8_score_difference: float | None
    """Largest difference between int8 and float batched scores; None without an int8 scorer."""


def time_modes(
    scorer: RetrievalEvaluator,
    pairs: Sequence[tuple[str, str]],
    repeats: int = 1,
    int8_scorer: RetrievalEvaluator | None = None,
) -> ModeTimings:
    """Time batched, one-pair-per-call and (optionally) int8 batched scoring of the same pairs.

    Each scorer is warmed up with one call first. The modes alternate ``repeats`` times, so
    they see the same machine load, and each keeps its fastest round (the usual way to time
    on a shared machine).

    Args:
        scorer: The float scorer.
        pairs: (question, passage) pairs, each question's passages together.
        repeats: Rounds.
        int8_scorer: The same model int8 quantised (:func:`int8_copy`), or None to skip.

    Returns:
        The timings and score differences.
    """
    groups = _group(pairs)
    scorer.score(groups[0][0], groups[0][1][:2])  # warm-up: first-call allocations
    if int8_scorer is not None:
        int8_scorer.score(groups[0][0], groups[0][1][:2])

    def batched_with(model: RetrievalEvaluator) -> Callable[[], list[float]]:
        def batched() -> list[float]:
            return [s for question, passages in groups for s in model.score(question, passages)]

        return batched

    def one_by_one() -> list[float]:
        return [scorer.score(question, [passage])[0] for question, passage in pairs]

    batched_seconds = per_pair_seconds = int8_seconds = float("inf")
    batched_scores: list[float] = []
    single_scores: list[float] = []
    int8_scores: list[float] = []
    for _ in range(max(1, repeats)):
        seconds, batched_scores = _time(batched_with(scorer))
        batched_seconds = min(batched_seconds, seconds)
        seconds, single_scores = _time(one_by_one)
        per_pair_seconds = min(per_pair_seconds, seconds)
        if int8_scorer is not None:
            seconds, int8_scores = _time(batched_with(int8_scorer))
            int8_seconds = min(int8_seconds, seconds)

    def largest(first: list[float], second: list[float]) -> float:
        return max(abs(a - b) for a, b in zip(first, second, strict=True))

    return ModeTimings(
        batched_seconds=batched_seconds,
        per_pair_seconds=per_pair_seconds,
        max_score_difference=largest(batched_scores, single_scores),
        int8_seconds=int8_seconds if int8_scorer is not None else None,
        max_int8_score_difference=(
            largest(batched_scores, int8_scores) if int8_scorer is not None else None
        ),
    )


def run_bench(
    model: str,
    n: int | None = None,
    *,
    passages_per_question: int = 0,
    batch_size: int = 32,
    repeats: int | None = None,
    seed: int = 0,
) -> BenchResult:
    """Time one model batched, one pair per call, the paper's way and batched int8, on the CPU.

    Args:
        model: ``"minilm"`` or ``"t5-large"``.
        n: Number of pairs; default :data:`DEFAULT_PAIRS` for the model.
        passages_per_question: Passages per question in a batched call (0: all ``n`` pairs
            in one call, for one question).
        batch_size: Pairs per forward pass of the batched scorer.
        repeats: Rounds of the batched, per-pair and int8 modes, fastest kept; default
            :data:`DEFAULT_REPEATS`.
        seed: Seed for the choice of passages.

    Returns:
        The timings.

    Raises:
        ValueError: Unknown model or bad sizes.
        EvaluatorError: The model could not be built or loaded.
    """
    if model not in MODELS:
        raise ValueError(f"unknown bench model {model!r}; known: {', '.join(MODELS)}")
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, got {batch_size}")
    count = DEFAULT_PAIRS[model] if n is None else n
    rounds = DEFAULT_REPEATS[model] if repeats is None else repeats
    if rounds < 1:
        raise ValueError(f"repeats must be at least 1, got {rounds}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    pairs = bench_pairs(count, passages_per_question, seed)
    measured = _measure(model, pairs, batch_size, rounds)
    return _bench_result(
        model,
        pairs,
        measured,
        _Sizes(count, min(passages_per_question or count, count), batch_size, rounds),
        load,
    )


@dataclass(frozen=True)
class _Measured:
    """One model's timings, and the scorer and tokenizer they were taken with."""

    scorer: Any
    parameters: int
    tokenizer: Any
    build_seconds: float
    timings: ModeTimings
    int8_build_seconds: float
    paper_way_seconds: float


def _with_int8(
    scorer: Any, pairs: Sequence[tuple[str, str]], rounds: int
) -> tuple[ModeTimings, float]:
    """Time the modes, int8 included; also the seconds the int8 copy took to build."""
    quantise_started = time.perf_counter()
    twin = int8_copy(scorer)
    int8_build = time.perf_counter() - quantise_started
    return time_modes(scorer, pairs, rounds, int8_scorer=twin), int8_build


def _measure(
    model: str, pairs: Sequence[tuple[str, str]], batch_size: int, rounds: int
) -> _Measured:
    """Build the model's scorer and time it every way (the model is known)."""
    started = time.perf_counter()
    scorer: Any
    try:
        if model == "minilm":
            with minilm_scorer(batch_size) as (scorer, parameters, tokenizer, raw):
                build = time.perf_counter() - started
                timings, int8_build = _with_int8(scorer, pairs, rounds)
                paper, _ = _time(lambda: paper_way(raw, tokenizer, pairs))
        else:
            scorer, parameters, tokenizer = t5_large_scorer(batch_size)
            build = time.perf_counter() - started
            timings, int8_build = _with_int8(scorer, pairs, rounds)
            paper, _ = _time(lambda: paper_way_t5(scorer, pairs))
    except (OSError, RuntimeError) as exc:
        raise EvaluatorError(f"bench of {model} failed: {exc}") from exc
    return _Measured(scorer, parameters, tokenizer, build, timings, int8_build, paper)


def _mean_tokens(scorer: Any, tokenizer: Any, pairs: Sequence[tuple[str, str]]) -> float:
    """Mean tokens per pair as the scorer sees them."""
    if isinstance(scorer, LocalT5Scorer):
        tokens = [len(ids) for q, p in pairs for ids in scorer.encode(q, [p])]
    else:
        tokens = [
            len(tokenizer(q, p, truncation=True, max_length=512)["input_ids"]) for q, p in pairs
        ]
    return sum(tokens) / len(tokens)


@dataclass(frozen=True)
class _Sizes:
    """How much a bench scored: pairs, passages per batched call, batch size, rounds."""

    pairs: int
    passages_per_question: int
    batch_size: int
    repeats: int


def _bench_result(
    model: str,
    pairs: Sequence[tuple[str, str]],
    measured: _Measured,
    sizes: _Sizes,
    load: float,
) -> BenchResult:
    """The figures of :class:`BenchResult` from the measured seconds."""
    timings, count, paper = measured.timings, sizes.pairs, measured.paper_way_seconds
    batched, per_pair = timings.batched_seconds, timings.per_pair_seconds
    int8_seconds = timings.int8_seconds
    int8_difference = timings.max_int8_score_difference
    if int8_seconds is None or int8_difference is None:  # pragma: no cover - always timed here
        raise EvaluatorError(f"bench of {model}: the int8 mode did not run")
    return BenchResult(
        model=model,
        scorer=type(measured.scorer).__name__,
        parameters=measured.parameters,
        device="cpu",
        torch_threads=torch.get_num_threads(),
        pairs=count,
        passages_per_question=sizes.passages_per_question,
        batch_size=sizes.batch_size,
        repeats=sizes.repeats,
        mean_tokens=_mean_tokens(measured.scorer, measured.tokenizer, pairs),
        build_seconds=measured.build_seconds,
        batched_seconds=batched,
        per_pair_seconds=per_pair,
        batched_pairs_per_s=count / batched,
        per_pair_pairs_per_s=count / per_pair,
        speedup=per_pair / batched,
        paper_way_seconds=paper,
        paper_way_pairs_per_s=count / paper,
        speedup_vs_paper_way=paper / batched,
        max_score_difference=timings.max_score_difference,
        int8_build_seconds=measured.int8_build_seconds,
        batched_int8_seconds=int8_seconds,
        batched_int8_pairs_per_s=count / int8_seconds,
        speedup_int8_vs_batched=batched / int8_seconds,
        speedup_int8_vs_paper_way=paper / int8_seconds,
        max_int8_score_difference=int8_difference,
        load_average=load,
    )


def format_bench(result: BenchResult) -> str:
    """A human-readable block of text for one bench result."""
    return "\n".join(
        [
            f"{result.model} ({result.scorer}, {result.parameters / 1e6:.1f}M parameters) on "
            f"{result.device}, {result.torch_threads} torch threads, load average "
            f"{result.load_average:.1f}; built in {result.build_seconds:.1f} s",
            f"  {result.pairs} pairs, {result.passages_per_question} passages per question, "
            f"mean {result.mean_tokens:.0f} tokens per pair, batch size {result.batch_size}, "
            f"best of {result.repeats}",
            f"  batched   {result.batched_pairs_per_s:8.2f} pairs/s "
            f"({result.batched_seconds:.2f} s)",
            f"  per pair  {result.per_pair_pairs_per_s:8.2f} pairs/s "
            f"({result.per_pair_seconds:.2f} s)",
            f"  paper's way {result.paper_way_pairs_per_s:6.2f} pairs/s "
            f"({result.paper_way_seconds:.2f} s; one pair per pass, padded to "
            f"{PAPER_MAX_LENGTH} tokens)",
            f"  batched / per pair: {result.speedup:.2f}x (largest score difference "
            f"{result.max_score_difference:.2g})",
            f"  batched / paper's way: {result.speedup_vs_paper_way:.2f}x",
            f"  batched int8 {result.batched_int8_pairs_per_s:5.2f} pairs/s "
            f"({result.batched_int8_seconds:.2f} s; Linear layers int8 dynamically quantised "
            f"on a copy, in {result.int8_build_seconds:.1f} s)",
            f"  int8 / float batched: {result.speedup_int8_vs_batched:.2f}x (largest score "
            f"difference {result.max_int8_score_difference:.2g})",
            f"  int8 batched / paper's way: {result.speedup_int8_vs_paper_way:.2f}x",
        ]
    )
