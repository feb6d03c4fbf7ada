"""A BM25 index of a collection's chunks, saved beside the Chroma store.

Dense retrieval misses what its embedder cannot represent: rare exact terms such as product
codes, surnames or identifiers. :class:`LexicalIndex` ranks the same chunks by BM25 (the
``bm25s`` package: lower-cased words of two or more characters, English stop words removed).

**Where.** For a store on disk the index lives in ``<store>/lexical/<collection>/``: the
bm25s files and ``index.json`` (the chunk ids in index order, the :func:`digest` of the chunks
it was built from and a :func:`state_token` of the store). It is written to a temporary
directory and renamed into place, so a crash never leaves a half index; an index that cannot
be read is rebuilt, with a warning. A store this process may not write gets an index in
memory only.

When it is used and how it is kept fresh: :mod:`crag.vectorstore.lexical_store`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from crag.vectorstore.readonly import SQLITE_FILE
from crag.vectorstore.records import scan_pages

if TYPE_CHECKING:
    import bm25s

logger = logging.getLogger(__name__)

INDEX_DIRECTORY = "lexical"
"""The directory, in the store's, that holds one index per collection."""
META_FILE = "index.json"
"""The chunk ids, digest and state token of an index (written last)."""
FORMAT = 1
"""The layout of :data:`META_FILE`; another is rebuilt."""
SETTLE_SECONDS = 1.0
"""A state token whose file changed more recently than this is not recorded (see the module)."""

Token = tuple[int, ...]


def _bm25s() -> ModuleType:
    """The bm25s package, imported when an index is first built, loaded or searched.

    Importing it takes about 0.3 s (SciPy's sparse matrices included, which transformers' model
    code imports too), and a run that searches by meaning, the default, never needs it: a cold
    ``crag ask`` does not pay for it.
    """
    import bm25s

    # bm25s sets its own logger to DEBUG when imported; NOTSET hands the choice back to the
    # application's logging setup.
    logging.getLogger("bm25s").setLevel(logging.NOTSET)
    module: ModuleType = bm25s
    return module


def _tokens(texts: str | list[str]) -> list[list[str]]:
    """bm25s word tokens of each text (lower case, English stop words removed)."""
    tokenized = _bm25s().tokenize(
        texts, lower=True, stopwords="en", return_ids=False, show_progress=False
    )
    return [[str(token) for token in tokens] for tokens in tokenized]


@dataclass
class LexicalIndex:
    """BM25 over the chunks ``ids`` (in index order), built from the state ``digest``."""

    ids: list[str]
    digest: str
    retriever: bm25s.BM25 | None
    token: Token | None = None
    positions: dict[str, int] = field(init=False, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.positions = {chunk: n for n, chunk in enumerate(self.ids)}

    def search(
        self, query: str, k: int, allowed: set[str] | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` best chunk ids for ``query`` with their BM25 scores, best first.

        Only chunks in ``allowed`` (when given) and with a positive score are returned; ties
        keep index order.
        """
        if self.retriever is None or k <= 0:
            return []
        token_ids = self.retriever.get_tokens_ids(_tokens(query)[0])
        if not token_ids:
            return []
        with self.lock:
            scores = np.asarray(self.retriever.get_scores(token_ids), dtype=np.float64)
        if allowed is not None:
            mask = np.zeros(len(self.ids), dtype=np.float64)
            mask[[self.positions[c] for c in allowed if c in self.positions]] = 1.0
            scores = scores * mask
        order = np.argsort(-scores, kind="stable")[:k]
        return [(self.ids[int(n)], float(scores[n])) for n in order if scores[n] > 0]


def build_index(ids: Sequence[str], texts: Sequence[str]) -> LexicalIndex:
    """A fresh index over the chunks ``ids`` with ``texts``."""
    retriever: bm25s.BM25 | None = None
    if ids:
        retriever = _bm25s().BM25()
        corpus = _bm25s().tokenize(list(texts), lower=True, stopwords="en", show_progress=False)
        retriever.index(corpus, show_progress=False)
    return LexicalIndex(list(ids), digest(ids, texts), retriever)


def digest(ids: Sequence[str], texts: Sequence[str]) -> str:
    """SHA-256 of the chunks, sorted by id: the collection state an index is built from."""
    hasher = hashlib.sha256()
    for chunk, text in sorted(zip(ids, texts, strict=True)):
        for part in (chunk, text):
            data = part.encode("utf-8", "surrogatepass")
            hasher.update(len(data).to_bytes(8, "little"))
            hasher.update(data)
    return hasher.hexdigest()


def state_token(directory: Path) -> Token | None:
    """Size, inode and modification time of the store's SQLite file (and log); ``None``: none."""
    parts: list[int] = []
    for name in (SQLITE_FILE, f"{SQLITE_FILE}-wal"):
        try:
            info = (directory / name).stat()
        except FileNotFoundError:
            if name == SQLITE_FILE:
                return None
            continue
        parts.extend((info.st_size, info.st_ino, info.st_mtime_ns))
    return tuple(parts)


def settled_token(token: Token | None) -> Token | None:
    """``token`` if its newest file time is older than :data:`SETTLE_SECONDS`, else ``None``."""
    if token is None:
        return None
    newest = max(token[2::3])
    return token if time.time_ns() - newest >= SETTLE_SECONDS * 1e9 else None


def read_chunks(collection: Any) -> tuple[list[str], list[str]]:
    """Every chunk id and text of a Chroma collection, page by page.

    Raises:
        StoreError: The collection cannot be read.
    """
    ids: list[str] = []
    texts: list[str] = []
    for page in scan_pages(collection, ["documents"], "the vector store's chunks"):
        ids.extend(page["ids"])
        texts.extend(text or "" for text in page.get("documents") or [""] * len(page["ids"]))
    return ids, texts


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically (a temporary file renamed over it)."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    try:
        temporary.write_text(json.dumps(payload), encoding="utf-8")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def index_meta(index: LexicalIndex) -> dict[str, Any]:
    """What :data:`META_FILE` holds for ``index``."""
    token = list(index.token) if index.token is not None else None
    return {"format": FORMAT, "digest": index.digest, "token": token, "ids": index.ids}


def save_index(directory: Path, index: LexicalIndex) -> None:
    """Write ``index`` to ``directory``: into a temporary directory, then renamed into place.

    Raises:
        OSError: The directory cannot be written.
    """
    directory.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{directory.name}.build-", dir=directory.parent))
    old = directory.parent / f".{directory.name}.old-{uuid.uuid4().hex}"
    try:
        if index.retriever is not None:
            index.retriever.save(str(building), show_progress=False)
        write_json(building / META_FILE, index_meta(index))
        if directory.exists():
            os.rename(directory, old)
        os.rename(building, directory)
    finally:
        shutil.rmtree(building, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def load_index(directory: Path) -> LexicalIndex | None:
    """The index saved in ``directory``; ``None`` if there is none or it cannot be read.

    An unreadable index (corrupt, cut short, another layout) is reported as a warning: the
    caller rebuilds it.
    """
    meta_file = directory / META_FILE
    if not meta_file.is_file():
        return None
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT:
            raise ValueError(f"layout {meta.get('format')!r}, expected {FORMAT}")
        ids = [str(chunk) for chunk in meta["ids"]]
        retriever = None
        if ids:
            retriever = _bm25s().BM25.load(str(directory), show_progress=False)
            if int(retriever.scores["num_docs"]) != len(ids):
                raise ValueError(f"{retriever.scores['num_docs']} documents for {len(ids)} ids")
        token = tuple(int(n) for n in meta["token"]) if meta.get("token") else None
        return LexicalIndex(ids, str(meta["digest"]), retriever, token)
    except Exception as exc:  # noqa: BLE001 - any unreadable file: rebuild
        logger.warning("the lexical index in %s cannot be read (%s); rebuilding it", directory, exc)
        return None
