"""Mine labelled (question, passage) and (question, strip) pairs from the DPR dev sets.

The training data of the shipped cross-encoder evaluator. For every question of ``nq-dev`` and
``trivia-dev`` (all 17,594 of them, read from the Anserini jar, not only the questions the
bundled sets keep) the store's top-k passages are retrieved and decomposed into strips exactly
as refinement does, and each is labelled:

* **+1** when it holds a gold answer (whole normalised tokens, the benchmark's check; a strip is
  checked without its heading line) **and** its document is about the question: the document
  shares words with the question worth at least ``log(100)`` in summed IDF
  (:data:`crag_bench.open_domain.MIN_SUPPORT`, the bundled sets' own rule), so an answer
  string that occurs by coincidence does not count;
* **-1** otherwise.

An answer that occurs in many documents ("American", "six", "1922") is found by coincidence
more often than not, and so is a document "about" a question by a few common words: a
question whose answers occur in more than :data:`MAX_ANSWER_DOCUMENTS` documents keeps only
its pairs that hold no answer (surely -1) and gives no positive. Read by hand, the positives
of such questions were mostly coincidences; those of questions with a specific answer mostly
were not (the label-noise figures are in the README).

Hard negatives come with that for free (a positive passage's other strips: same document, no
answer; a retrieved passage that holds the answer by coincidence) and are added where retrieval
missed them: a passage of a corpus document that holds the answer but is not about the question.
Gold passages that retrieval missed are added as positives, as the paper adds its gold pages.

Splits (:func:`split_of`), fixed by the question's id alone:

* ``measure``: the first half of the bundled ``nq-dev`` and ``trivia-dev`` files (the questions
  the pipeline's dev figures are measured on; ``crag-bench eval --dataset nq-dev --limit 150`` reads
  them). Every pair of their top-k passages and strips is written, for ranking figures.
* ``select``: one question in ten of the rest (by a hash of the id), for model selection;
  written in full as well.
* ``train``: everything else. Questions with no positive pair keep only their hardest
  negatives (the first ``negatives_without_positive`` passages and strips), so the abundant
  unanswerable questions do not drown the answerable ones.

Only dev sets are read: :func:`check_mining_sets` refuses any other name, so a test set cannot
enter training, selection or calibration through this module.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from crag_bench.answers import answer_in_text
from crag_bench.datasets import load_dataset
from crag_bench.dpr_sets import SourceQuestion, dpr_set, read_jar
from crag_bench.open_domain import MIN_SUPPORT, AnswerIndex, topic_words

logger = logging.getLogger(__name__)

MINING_SETS: tuple[str, ...] = ("nq-dev", "trivia-dev")
"""The DPR sets pairs are mined from: dev sets only."""

Split = Literal["train", "select", "measure"]
Unit = Literal["passage", "strip"]

MAX_ANSWER_DOCUMENTS = 3
"""A question whose answers occur in more corpus documents than this gives no positive pair."""

SELECT_SHARE = 10
"""One question in this many (by id hash) goes to the ``select`` split."""


class MiningError(ValueError):
    """Pairs cannot be mined: a set that is not a dev set, or unreadable inputs."""


def check_mining_sets(names: Iterable[str]) -> tuple[str, ...]:
    """The names, checked: only the DPR dev sets may be mined.

    Raises:
        MiningError: A name is a test set or not one of :data:`MINING_SETS`.
    """
    checked = tuple(names)
    for name in checked:
        if name not in MINING_SETS:
            raise MiningError(
                f"refusing to mine pairs from {name!r}: only the dev sets "
                f"({', '.join(MINING_SETS)}) may be used for training, selection or thresholds"
            )
    return checked


def measured_ids(sets: Sequence[str] = MINING_SETS) -> frozenset[str]:
    """Ids of the first half of each bundled dev set: the questions dev figures are taken on."""
    ids: set[str] = set()
    for name in sets:
        questions = load_dataset(name)
        ids.update(q.id for q in questions[: (len(questions) + 1) // 2])
    return frozenset(ids)


def split_of(question_id: str, measured: frozenset[str]) -> Split:
    """``measure`` if dev figures are taken on it, else ``select`` one in ten, else ``train``."""
    if question_id in measured:
        return "measure"
    digest = hashlib.sha256(question_id.encode("utf-8")).digest()
    return "select" if digest[0] % SELECT_SHARE == 0 else "train"


@dataclass(frozen=True)
class MinedPair:
    """One labelled pair; the fields of :class:`crag_bench.pairs.LabelledPair` and more.

    Attributes:
        question_id: ``<set>-<position>`` (as the bundled sets name it).
        question: The question.
        passage: The passage or strip, as the evaluator reads it (heading line first).
        label: +1 or -1 (see the module docstring).
        source: The store source of its document.
        rank: Its passage's rank in the top-k (0 is best); ``None`` when added from outside.
        unit: ``"passage"`` or ``"strip"``.
        split: ``"train"``, ``"select"`` or ``"measure"``.
        holds_answer: Whether it holds a gold answer (a strip: its body).
        about: Whether its document is about the question (the support rule).
        origin: ``"retrieved"``, ``"gold"`` (a gold passage retrieval missed) or
            ``"coincidence"`` (a document holding the answer, not about the question).
    """

    question_id: str
    question: str
    passage: str
    label: int
    source: str
    rank: int | None
    unit: Unit
    split: Split
    holds_answer: bool
    about: bool
    origin: str = "retrieved"


@dataclass
class MiningCounts:
    """What a mining run wrote, per split and unit."""

    questions: dict[str, int] = field(default_factory=dict)
    pairs: dict[str, int] = field(default_factory=dict)
    positives: dict[str, int] = field(default_factory=dict)
    questions_with_positive: dict[str, int] = field(default_factory=dict)

    def add(self, pairs: Sequence[MinedPair], split: str) -> None:
        """Count one question's pairs."""
        self.questions[split] = self.questions.get(split, 0) + 1
        if any(p.label == 1 for p in pairs):
            self.questions_with_positive[split] = self.questions_with_positive.get(split, 0) + 1
        for pair in pairs:
            key = f"{split}/{pair.unit}"
            self.pairs[key] = self.pairs.get(key, 0) + 1
            if pair.label == 1:
                self.positives[key] = self.positives.get(key, 0) + 1


Retriever = Callable[[Sequence[str]], list[list[dict[str, Any]]]]
"""Top-k passages (``text``, ``source``) for each of a batch of questions, best first."""


@dataclass(frozen=True)
class MiningOptions:
    """How many pairs a question gives."""

    k: int = 10
    """Passages retrieved per question (the graph's ``top_k``)."""
    negatives_without_positive: int = 1
    """Train questions with no positive keep this many of their best-ranked passages and strips."""
    coincidences: int = 2
    """Documents holding the answer but not about the question, added as hard negatives."""
    strip_negatives: int = 8
    """Train questions with a positive keep all strips of positive passages and this many others
    (the strips of the best-ranked other passages)."""


class Labeller:
    """Labels texts for one corpus: holds the answer, and is its document about the question."""

    def __init__(self, documents: Sequence[tuple[str, str]]) -> None:
        """Index the corpus' ``(source, text)`` documents."""
        self.index = AnswerIndex(documents)
        self._number = {source: n for n, source in enumerate(self.index.sources)}
        self._texts = {source: text for source, text in documents}

    def about(self, words: frozenset[str], source: str) -> bool:
        """Whether the document ``source`` shares question words worth ``MIN_SUPPORT``."""
        number = self._number.get(source)
        return number is not None and self.index.support(words, number) >= MIN_SUPPORT

    def answer_documents(self, answers: Sequence[str]) -> list[str]:
        """Sources of the documents that hold an answer, in corpus order."""
        found: set[int] = set()
        for answer in answers:
            found |= self.index.documents_with(answer)
        return [self.index.sources[n] for n in sorted(found)]

    def text(self, source: str) -> str:
        """The document's text (heading line first)."""
        return self._texts[source]


def _strip_body(strip: str) -> str:
    from crag.knowledge.words import heading_of

    return strip.partition("\n")[2] if heading_of(strip) else strip


def _passage_pair(
    q: SourceQuestion, qid: str, split: Split, text: str, source: str, rank: int | None, **kw: Any
) -> MinedPair:
    holds = answer_in_text(q.answers, text)
    about = kw.pop("about")
    return MinedPair(
        qid,
        q.question,
        text,
        1 if holds and about else -1,
        source,
        rank,
        "passage",
        split,
        holds,
        about,
        **kw,
    )


def _strip_pairs(q: SourceQuestion, qid: str, split: Split, passage: MinedPair) -> list[MinedPair]:
    from crag.knowledge.strips import decompose  # imported here: reading pairs needs no LangChain

    pairs = []
    for strip in decompose(passage.passage):
        holds = answer_in_text(q.answers, _strip_body(strip))
        label = 1 if holds and passage.about else -1
        pairs.append(
            MinedPair(
                qid,
                q.question,
                strip,
                label,
                passage.source,
                passage.rank,
                "strip",
                split,
                holds,
                passage.about,
                passage.origin,
            )
        )
    return pairs


def question_pairs(
    q: SourceQuestion,
    qid: str,
    split: Split,
    retrieved: Sequence[dict[str, Any]],
    labeller: Labeller,
    options: MiningOptions,
) -> list[MinedPair]:
    """Every pair one question gives (before the train split's sampling)."""
    words = topic_words(q.question, q.answers)
    answer_sources = labeller.answer_documents(q.answers)
    if len(answer_sources) > MAX_ANSWER_DOCUMENTS:
        return _without_answer(q, qid, split, retrieved, words, labeller)
    passages = [
        _passage_pair(
            q, qid, split, p["text"], p["source"], rank, about=labeller.about(words, p["source"])
        )
        for rank, p in enumerate(retrieved)
    ]
    seen = {p.source for p in passages}
    coincidences = 0
    for source in answer_sources:
        if source in seen:
            continue
        about = labeller.about(words, source)
        if not about and coincidences >= options.coincidences:
            continue
        coincidences += not about
        origin = "gold" if about else "coincidence"
        passages.append(
            _passage_pair(
                q, qid, split, labeller.text(source), source, None, about=about, origin=origin
            )
        )
    strips = [s for p in passages for s in _strip_pairs(q, qid, split, p)]
    return passages + strips


def _without_answer(
    q: SourceQuestion,
    qid: str,
    split: Split,
    retrieved: Sequence[dict[str, Any]],
    words: frozenset[str],
    labeller: Labeller,
) -> list[MinedPair]:
    """The pairs of a question with a generic answer: only those that hold no answer (all -1)."""
    passages = [
        _passage_pair(
            q, qid, split, p["text"], p["source"], rank, about=labeller.about(words, p["source"])
        )
        for rank, p in enumerate(retrieved)
    ]
    strips = [s for p in passages for s in _strip_pairs(q, qid, split, p)]
    return [p for p in passages + strips if not p.holds_answer]


def sample_train(pairs: Sequence[MinedPair], options: MiningOptions) -> list[MinedPair]:
    """A train question's pairs: all if it has a positive (strips capped), else the hardest few."""
    passages = [p for p in pairs if p.unit == "passage"]
    strips = [p for p in pairs if p.unit == "strip"]
    if not any(p.label == 1 for p in pairs):
        hardest = options.negatives_without_positive
        retrieved = [p for p in passages if p.rank is not None]
        ranked_strips = sorted((s for s in strips if s.rank is not None), key=lambda s: s.rank or 0)
        return retrieved[:hardest] + ranked_strips[:hardest]
    positive_sources = {p.source for p in passages if p.label == 1}
    near = [s for s in strips if s.source in positive_sources]
    others = sorted(
        (s for s in strips if s.source not in positive_sources),
        key=lambda s: (s.rank is None, s.rank or 0),
    )
    return passages + near + others[: options.strip_negatives]


def mine_pairs(
    questions: dict[str, list[SourceQuestion]],
    retrieve: Retriever,
    labeller: Labeller,
    measured: frozenset[str],
    options: MiningOptions | None = None,
    batch: int = 256,
) -> Iterator[tuple[str, list[MinedPair]]]:
    """Yield ``(split, pairs)`` per question of the sets, in set and question order."""
    options = options or MiningOptions()
    check_mining_sets(questions)
    for name, items in questions.items():
        for start in range(0, len(items), batch):
            chunk = items[start : start + batch]
            logger.info("%s: questions %d-%d of %d", name, start, start + len(chunk), len(items))
            hits = retrieve([q.question for q in chunk])
            for q, retrieved in zip(chunk, hits, strict=True):
                qid = f"{name}-{q.position}"
                split = split_of(qid, measured)
                pairs = question_pairs(q, qid, split, retrieved, labeller, options)
                if split == "train":
                    pairs = sample_train(pairs, options)
                yield split, pairs


def read_dev_sets(jar: Path, sets: Sequence[str] = MINING_SETS) -> dict[str, list[SourceQuestion]]:
    """The dev sets' questions from the Anserini jar (test sets refused)."""
    specs = tuple(dpr_set(name) for name in check_mining_sets(sets))
    return read_jar(jar, specs)


def write_mined(out: Path, mined: Iterable[tuple[str, list[MinedPair]]]) -> MiningCounts:
    """Write ``out/<split>.jsonl`` (one pair a line) and ``out/counts.json``."""
    out.mkdir(parents=True, exist_ok=True)
    counts = MiningCounts()
    files: dict[str, Any] = {}
    try:
        for split, pairs in mined:
            if split not in files:
                files[split] = (out / f"{split}.jsonl").open("w", encoding="utf-8")
            for pair in pairs:
                files[split].write(json.dumps(asdict(pair), ensure_ascii=False) + "\n")
            counts.add(pairs, split)
    finally:
        for handle in files.values():
            handle.close()
    (out / "counts.json").write_text(json.dumps(asdict(counts), indent=2) + "\n", encoding="utf-8")
    return counts


def read_mined(path: Path, unit: Unit | None = None) -> list[MinedPair]:
    """Read a mined split file, optionally one unit only.

    Raises:
        MiningError: A line is not a mined pair (the message names the file and line).
    """
    pairs: list[MinedPair] = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                pair = MinedPair(**json.loads(line))
            except (json.JSONDecodeError, TypeError) as exc:
                raise MiningError(f"{path}:{number}: not a mined pair ({exc})") from None
            if pair.split not in ("train", "select", "measure") or pair.label not in (1, -1):
                raise MiningError(f"{path}:{number}: bad split or label")
            if unit is None or pair.unit == unit:
                pairs.append(pair)
    return pairs


def store_retriever(store: Any, embeddings: Any, k: int) -> Retriever:
    """An exact :data:`Retriever` over a Chroma store's own vectors.

    The same cosine ranking as :func:`crag.vectorstore.store.retrieve`, without the approximation
    of the HNSW index.

    The graph searches Chroma's HNSW index, which is approximate and, right after ingestion,
    not always the same from one process to the next (a question's first passage differed
    between two mining runs over one store); mining reads every stored vector once and ranks by
    exact cosine (ties by chunk id), so the same store and questions always give the same pairs.
    """
    import numpy as np

    collection = store._collection
    stored = collection.get(include=["embeddings", "documents", "metadatas"])
    order = sorted(range(len(stored["ids"])), key=lambda i: stored["ids"][i])
    vectors = np.asarray([stored["embeddings"][i] for i in order], dtype=np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    texts = [stored["documents"][i] for i in order]
    sources = [str((stored["metadatas"][i] or {}).get("source", "")) for i in order]

    def retrieve(questions: Sequence[str]) -> list[list[dict[str, Any]]]:
        queries = np.asarray(embeddings.embed_documents(list(questions)), dtype=np.float32)
        queries /= np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
        results = []
        for similarities in queries @ vectors.T:
            best = np.lexsort((np.arange(len(similarities)), -similarities))[:k]
            results.append([{"text": texts[i], "source": sources[i]} for i in best])
        return results

    return retrieve


def thin_negatives(pairs: Sequence[MinedPair], per_question: int) -> list[MinedPair]:
    """The pairs with fewer negatives of the questions that have no positive.

    Each question without a positive pair keeps its ``per_question`` best-ranked passages and
    strips; a question with a positive keeps every pair. The order is kept.
    """
    positive = {p.question_id for p in pairs if p.label == 1}
    kept: dict[tuple[str, str], int] = {}
    out: list[MinedPair] = []
    for pair in pairs:
        if pair.question_id in positive:
            out.append(pair)
            continue
        key = (pair.question_id, pair.unit)
        if kept.get(key, 0) < per_question:
            kept[key] = kept.get(key, 0) + 1
            out.append(pair)
    return out
