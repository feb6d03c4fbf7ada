"""The bundled MiniLM (:mod:`crag.vectorstore.minilm`): a large call runs in transformers and gives
sentence-transformers' vectors to the last bit; a small one runs on onnxruntime, with
transformers' token ids and vectors within 3e-7; a run's embedder imports neither
sentence-transformers nor torch."""

from __future__ import annotations

import random
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from langchain_huggingface import HuggingFaceEmbeddings

from crag.vectorstore.corpus import check_embedder, corpus_chunks, load_corpus
from crag.vectorstore.embeddings import (
    DEFAULT_EMBEDDER,
    ENCODE_BATCH_SIZE,
    locked_embeddings,
    resolve_model_path,
    shared_embeddings,
)
from crag.vectorstore.minilm import ONNX_MOST_TEXTS, MiniLMEmbeddings, is_mean_pooled_encoder
from tests.fresh_python import run_python

ROOT = Path(__file__).resolve().parents[2]

QUESTIONS = [
    "Who painted the Mona Lisa?",
    "What is the capital of Australia?",
    "who wrote the song hotel california",
    "In which year did the Berlin Wall fall?",
    "",
    "  spaces\tand\nline breaks  ",
    "Ünïcödé, emoji 🙂 and CJK 東京",
]


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbeddings:
    """The embedder runs get for the bundled model."""
    embedder = shared_embeddings(DEFAULT_EMBEDDER)
    assert isinstance(embedder, MiniLMEmbeddings)
    return embedder


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """60 corpus chunks, 10 texts well past 256 tokens (truncated), and odd ones.

    77 texts: a full batch of 64 and a partial one. 120 chunks (three batches) took twice as
    long to embed both ways and batched nothing differently.
    """
    chunks = [c.text for doc in corpus_chunks(load_corpus(limit=400)) for c in doc]
    rng = random.Random(11)
    long = ["\n".join(chunks[s : s + 8]) for s in rng.sample(range(len(chunks) - 8), 10)]
    return [*rng.sample(chunks, 60), *long, *QUESTIONS]


@pytest.fixture(scope="module")
def torch_vectors(embeddings: HuggingFaceEmbeddings, texts: list[str]) -> np.ndarray:
    """sentence-transformers' vectors of the 77 texts, embedded once for the module's tests."""
    return np.asarray(embeddings.embed_documents(texts), dtype=np.float32)


def test_documents_are_sentence_transformers_vectors_to_the_last_bit(
    minilm: MiniLMEmbeddings, torch_vectors: np.ndarray, texts: list[str]
) -> None:
    # 77 texts: a batch of 64 and one of 13, ordered longest first, as the library batches them
    got = np.asarray(minilm.embed_documents(texts), dtype=np.float32)
    assert got.shape == (len(texts), 384)
    assert np.array_equal(got, torch_vectors), float(np.abs(got - torch_vectors).max())


ONNX_TOLERANCE = 3e-7
"""Largest difference allowed between an onnxruntime vector and torch's (measured: 2.1e-7 on
300 corpus chunks; torch's own batchings differ from each other by 1.9e-7)."""


def test_queries_run_on_onnxruntime_within_3e_7_of_sentence_transformers(
    minilm: MiniLMEmbeddings, embeddings: HuggingFaceEmbeddings
) -> None:
    assert minilm.onnx_encoder() is not None  # on this CPU the export is made and used
    for question in QUESTIONS:
        got = np.asarray(minilm.embed_query(question), dtype=np.float32)
        expected = np.asarray(embeddings.embed_query(question), dtype=np.float32)
        assert np.abs(got - expected).max() <= ONNX_TOLERANCE, question


def test_a_small_call_runs_on_onnxruntime_with_the_same_order_of_neighbours(
    minilm: MiniLMEmbeddings, embeddings: HuggingFaceEmbeddings, texts: list[str]
) -> None:
    small = texts[:ONNX_MOST_TEXTS]  # 60 chunks and four truncated texts: one call, one batch
    got = np.asarray(minilm.embed_documents(small), dtype=np.float32)
    expected = np.asarray(embeddings.embed_documents(small), dtype=np.float32)
    assert np.abs(got - expected).max() <= ONNX_TOLERANCE
    assert not np.array_equal(got, expected)  # onnxruntime's arithmetic, not a torch call
    query = np.asarray(embeddings.embed_query(QUESTIONS[0]), dtype=np.float32)
    assert list(np.argsort(-(got @ query))[:10]) == list(np.argsort(-(expected @ query))[:10])


def _fresh_minilm() -> MiniLMEmbeddings:
    """An embedder of the bundled model with an empty memo (not the shared one)."""
    return MiniLMEmbeddings(resolve_model_path(DEFAULT_EMBEDDER), "cpu", ENCODE_BATCH_SIZE)


def test_an_onnxruntime_vector_does_not_depend_on_its_batch(texts: list[str]) -> None:
    """What the memo relies on: a text's vector alone is its vector in any batch, to the bit."""
    encoder = _fresh_minilm().onnx_encoder()
    assert encoder is not None
    small = texts[:ONNX_MOST_TEXTS]
    alone = np.concatenate([encoder.batch([text]) for text in small])
    for size in (2, 16, ONNX_MOST_TEXTS):  # an odd size (7) was measured the same once
        batched = np.concatenate(
            [encoder.batch(small[start : start + size]) for start in range(0, len(small), size)]
        )
        assert np.array_equal(batched, alone), (size, float(np.abs(batched - alone).max()))


def test_remembered_texts_are_not_embedded_again_and_keep_their_vectors(
    texts: list[str],
) -> None:
    minilm = _fresh_minilm()
    encoder = minilm.onnx_encoder()
    assert encoder is not None
    embedded: list[str] = []
    batch = encoder.batch

    def counted(batch_texts: Sequence[str]) -> np.ndarray:
        embedded.extend(batch_texts)
        return batch(batch_texts)

    encoder.batch = counted  # type: ignore[method-assign,assignment]
    first = np.asarray(minilm.embed_documents(texts[:20]), dtype=np.float32)
    assert sorted(embedded) == sorted(t.replace("\n", " ") for t in texts[:20])
    embedded.clear()
    mixed = [texts[25], texts[3], texts[25], texts[10], texts[30]]  # two new, one twice
    again = np.asarray(minilm.embed_documents(mixed), dtype=np.float32)
    assert sorted(embedded) == sorted(t.replace("\n", " ") for t in (texts[25], texts[30]))
    assert np.array_equal(again[1], first[3]) and np.array_equal(again[3], first[10])
    assert np.array_equal(again[0], again[2])
    fresh = np.asarray(_fresh_minilm().embed_documents(mixed), dtype=np.float32)
    assert np.array_equal(again, fresh)  # remembered or not, the same vectors


def test_a_torch_call_neither_reads_nor_fills_the_memo(
    torch_vectors: np.ndarray, texts: list[str]
) -> None:
    minilm = _fresh_minilm()
    minilm.embed_documents(texts[:10])  # onnxruntime's vectors remembered
    assert len(minilm.remembered) == 10
    assert len(texts) > ONNX_MOST_TEXTS  # so the call below is torch's
    got = np.asarray(minilm.embed_documents(texts), dtype=np.float32)
    assert np.array_equal(got, torch_vectors)  # torch's vectors for all, the ten remembered too
    assert len(minilm.remembered) == 10


def test_onnxruntime_reads_transformers_token_ids(
    minilm: MiniLMEmbeddings, texts: list[str]
) -> None:
    from transformers import AutoTokenizer

    encoder = minilm.onnx_encoder()
    assert encoder is not None
    reference = AutoTokenizer.from_pretrained(minilm.model_name)
    expected = reference(
        texts, padding=True, truncation="longest_first", max_length=minilm.max_length
    )
    got = encoder.tokenizer.encode_batch(texts)
    assert [e.ids for e in got] == expected["input_ids"]
    assert [e.attention_mask for e in got] == expected["attention_mask"]


def test_the_runs_embedder_is_the_bundled_one_and_shared(minilm: MiniLMEmbeddings) -> None:
    assert shared_embeddings() is minilm
    assert locked_embeddings(DEFAULT_EMBEDDER).inner is minilm
    check_embedder(locked_embeddings(DEFAULT_EMBEDDER))  # the shipped vectors are its vectors
    assert minilm.embed_documents([]) == []


def test_the_bundled_model_is_an_encoder_a_mean_and_a_normalisation(tmp_path: Path) -> None:
    assert is_mean_pooled_encoder(resolve_model_path(DEFAULT_EMBEDDER))
    assert not is_mean_pooled_encoder(tmp_path)  # no modules.json


def test_a_run_embeds_without_importing_sentence_transformers() -> None:
    script = textwrap.dedent(
        """
        import sys
        from crag.vectorstore.embeddings import locked_embeddings
        from crag.evaluator.registry import load_evaluator
        vector = locked_embeddings("all-MiniLM-L6-v2").embed_query("Who painted the Mona Lisa?")
        scores = load_evaluator("embedding").score("Who painted it?", ["Leonardo painted it."])
        heavy = ("sentence_transformers", "sklearn", "langchain_huggingface", "torch")
        print(len(vector), len(scores), sorted(m for m in sys.modules if m in heavy))
        """
    )
    assert run_python(script).split() == ["384", "1", "[]"]
