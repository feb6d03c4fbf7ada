"""The operator's settings: read once from ``CRAG_<NAME>`` environment variables.

Deployment settings say where things are and what may be reached or loaded: the store, the
models, the search endpoint, the address allow-list, the bundled corpus, the limits, the uploads.
A served run may not set them (:mod:`crag.settings.setting_kinds`); the operator sets them in the
environment (``.env`` for the LangGraph server), and Python callers and the CLI where a graph
is built (``build_graph(..., deployment=deployment_with(store_path=...))``, ``--set``).

:class:`DeploymentSettings` declares each one once, with its type, default, bounds and
description; pydantic-settings reads the environment and checks the values.
:func:`deployment_settings` builds it once per value of the environment (a process reads it
once; a test that changes a variable gets the new value), and :mod:`crag.settings.run_settings`
takes its deployment fields' defaults, descriptions and bounds from it.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, BeforeValidator, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from crag.settings.setting_checks import ENV_PREFIX, env_name, setting_error

DEFAULT_STORE_PATH = ".crag/chroma"
DEFAULT_THREADS_PATH = ".crag/threads.sqlite"
"""Where threads are kept when neither ``--threads-db`` nor ``CRAG_THREADS_DB`` says."""

DEFAULT_COLLECTION = "crag"
DEFAULT_CHROMA_PORT = 8000
DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
MAX_GENERATOR_BATCH_SIZE = 128
"""Rows one decoding step holds at most (and their caches' memory)."""

EvaluatorName = Literal["embedding", "t5", "cross-encoder", "llm"]
"""The evaluator backends (``crag.evaluator.registry.BACKENDS``; a test keeps the two in step)."""
EVALUATORS: tuple[str, ...] = get_args(EvaluatorName)


def _lower_case(value: Any) -> Any:
    """A name as the operator may type it (`` T5 ``), in the form it is declared in (``t5``)."""
    return value.strip().lower() if isinstance(value, str) else value


CHROMA_HOST_DESCRIPTION = (
    "Host name or IP of a Chroma server (`chroma run`) holding the store; empty: the on-disk "
    "store at store_path."
)


class StoreDeployment(BaseModel):
    """Which store a run reads or writes, and where the server's files lie: read by every graph."""

    embedder: str = Field(
        DEFAULT_EMBEDDER,
        description="Sentence-transformers embedder: 'all-MiniLM-L6-v2' (shipped) or a local "
        "model path.",
    )
    store_path: str = Field(
        DEFAULT_STORE_PATH,
        description="Directory of the Chroma store on disk (unused when chroma_host is set).",
    )
    collection: str = Field(DEFAULT_COLLECTION, description="Chroma collection name.")
    chroma_host: str = Field("", description=CHROMA_HOST_DESCRIPTION)
    chroma_port: int = Field(
        DEFAULT_CHROMA_PORT,
        ge=1,
        le=65535,
        description="Port of the Chroma server (with chroma_host).",
    )
    chroma_ssl: bool = Field(
        False, description="Talk to the Chroma server over HTTPS (with chroma_host)."
    )
    ingest_root: str = Field(
        "",
        description="The only directory whose files the ingest graph reads by path (empty: "
        "only the chat page's upload folder, upload_dir: a served run reads no other file "
        "of the server's). Binds served runs only: crag ingest and the Python API are the "
        "operator's.",
    )
    upload_dir: str = Field(
        "",
        description="Directory where the chat page stores uploaded files, each in a folder "
        "named by its bytes' hash (the same file twice: one copy; no upload overwrites "
        "another). Empty: 'uploads' in ingest_root when ingest_root is set, else 'uploads' "
        "beside the store (.crag/uploads by default). With ingest_root set it must lie inside "
        "ingest_root, where the ingest graph reads; otherwise every upload is refused.",
    )
    threads_db: SecretStr = Field(
        SecretStr(DEFAULT_THREADS_PATH),
        description="Where threads, runs, accounts and feedback are kept: a SQLite file, or a "
        "postgresql:// URL that several server replicas share (their locks are kept there "
        "too). The CLI's and the Python API's threads are kept here as well; crag's own "
        "commands take --threads-db. Never logged: a URL's password stays out of messages.",
    )
    cache_dir: str = Field(
        "",
        description="Directory of crag's own caches (a GGUF generator converted to "
        "transformers' format, the shipped evaluator unpacked), in its models/ folder. "
        "Empty: ~/.cache/crag.",
    )


class QuestionDeployment(BaseModel):
    """The models, the web search and the limits of a question run."""

    search_provider: Literal["duckduckgo", "searxng", "tavily"] = Field(
        "duckduckgo",
        description="Web search provider: 'duckduckgo' (ddgs), 'searxng' (a self-hosted "
        "SearxNG JSON API at search_url) or 'tavily' (hosted API; needs the optional "
        "tavily-python package and TAVILY_API_KEY in the environment).",
    )
    search_url: str = Field(
        "http://127.0.0.1:8888",
        description="Base URL of the SearxNG instance (searxng provider only); a non-public "
        "address must be listed in allowed_hosts.",
    )
    search_timeout: float = Field(
        10.0, ge=0.001, description="Seconds before a web search is abandoned."
    )
    page_timeout: float = Field(
        5.0,
        ge=0.001,
        description="Seconds to read one page, redirects included; pages are read concurrently "
        "(up to 8 at once), so this also bounds the whole reading step.",
    )
    max_page_bytes: int = Field(
        2_000_000,
        ge=1,
        description="Largest page read, in bytes; a larger page falls back to its search snippet.",
    )
    max_redirects: int = Field(5, ge=0, description="Most redirects followed when reading a page.")
    allowed_hosts: str = Field(
        "",
        description="Comma-separated host names, IP addresses and CIDR networks that pages and "
        "the search endpoint (search_url) may be on although they are not public (e.g. "
        "'127.0.0.1, intranet.example, 10.1.0.0/16'). Empty: public addresses only.",
    )
    search_backend: str = Field(
        "auto",
        description="ddgs backend(s): 'auto' (several engines), 'duckduckgo', 'wikipedia', or "
        "a comma-separated list such as 'wikipedia,bing' (duckduckgo provider only): which "
        "search engines the server contacts.",
    )
    web_cache_ttl: float = Field(
        3600.0,
        ge=0,
        description="Seconds a web search or page stays cached in this process, so it is not "
        "fetched twice (0: no cache).",
    )
    evaluator: Annotated[EvaluatorName, BeforeValidator(_lower_case)] = Field(
        "embedding",
        description="Retrieval evaluator backend: 'embedding' (shipped MiniLM, offline "
        "default), 't5' (the paper's T5 regression evaluator), 'cross-encoder' "
        "(sentence-transformers CrossEncoder) or 'llm' (the paper's yes/no prompt).",
    )
    evaluator_model: str = Field(
        "",
        description="Checkpoint path or hub id for 't5' and 'cross-encoder'; a generator spec "
        "for 'llm' (empty: smollm2; 'endpoint' for your model server); ignored by 'embedding'.",
    )
    evaluator_int8: bool = Field(
        False,
        description="Run the 't5' or 'cross-encoder' evaluator with int8 dynamically quantised "
        "linear layers (CPU only): about 2x faster, scores drift by up to ~0.1, so calibrate "
        "thresholds on int8 scores (`crag-bench evaluator calibrate --int8`).",
    )
    evaluator_batch_size: int = Field(
        32, ge=1, le=512, description="Pairs scored per forward pass by the evaluator."
    )
    generator: str = Field(
        "smollm2",
        description="'smollm2' (shipped SmolLM2-135M-Instruct), 'endpoint' (your model server: "
        "llm_base_url and llm_model; 'endpoint:MODEL' for another of its models), "
        "'local:/path/to/hf-model', 'gguf:/path/model.gguf', or any LangChain chat model as "
        "'provider:model' (e.g. 'openai:gpt-4o-mini').",
    )
    no_repeat_ngram_size: int = Field(
        4,
        ge=0,
        description="A local generator's reply never repeats an n-gram of its own tokens this "
        "long (the prompt is not counted, so copying from the knowledge is free): no "
        "degenerate loops. 0: off.",
    )
    generator_batch_size: int = Field(
        1,
        ge=1,
        le=MAX_GENERATOR_BATCH_SIZE,
        description="Most generation requests of overlapping runs a local generator decodes "
        "together (continuous batching: more runs answered per second under load). 1: off, "
        "every request is decoded alone. Above 1 the local generator computes in float32 "
        "(not bfloat16), where an answer decoded in a batch equals the same prompt decoded "
        "alone: an answer never depends on what else runs. Ignored by API models.",
    )
    generator_engine: Literal["onnxruntime", "torch"] = Field(
        "onnxruntime",
        description="What decodes a local generator's answers on a CPU. 'onnxruntime': an ONNX "
        "model of the generator, built once under cache_dir by onnxruntime-genai's builder "
        "(about 11 s for the shipped SmolLM2), run in float32: the tokens of transformers in "
        "float32, about twice as fast as transformers in bfloat16 on 2 cores. Batches "
        "(generator_batch_size above 1) are decoded by transformers in float32, which gives "
        "the same tokens. A model the builder cannot take, a GPU or generator_dtype "
        "'bfloat16' use transformers. 'torch': transformers always. Ignored by API models.",
    )
    generator_dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="A local generator's precision. 'auto': bfloat16 on CUDA and on CPUs with "
        "native bfloat16 arithmetic, float32 elsewhere, and float32 whenever requests are "
        "decoded in batches (generator_batch_size above 1), where an answer never depends on "
        "what else runs. 'bfloat16': bfloat16 in batches too, more runs answered per second "
        "(1.3x at 1, 1.5x at 4 and 1.8x at 16 runs at once on 2 cores), but a batched answer "
        "may differ in wording from the same question asked alone. 'float32': always. Ignored "
        "by API models.",
    )
    rewriter: str = Field(
        "",
        description="The model that rewrites the question into search keywords (with "
        "rewrite_for_search): a generator spec; empty: the generator.",
    )
    contextualizer: str = Field(
        "",
        description="The model that makes a chat follow-up standalone: a generator spec; "
        "empty: the generator.",
    )
    readable_collections: str = Field(
        "",
        description="Comma-separated names of further collections a run may search (setting "
        "search_collection), read-only. Empty: collection only.",
    )
    default_corpus: bool = Field(
        True,
        description="When the collection is empty or missing, ingest the bundled Wikipedia "
        "vital-article summaries first (CC BY-SA).",
    )
    default_corpus_limit: int = Field(
        0, ge=0, description="Ingest only the first N bundled summaries (0: all 10,033)."
    )
    max_question_chars: int = Field(
        2000, ge=1, description="Longer questions are rejected with a clear error."
    )
    max_history_turns: int = Field(
        3,
        ge=0,
        description="Earlier turns of a chat the contextualizer reads to make a follow-up "
        "standalone: the most recent ones (older turns are not read; 0: none).",
    )
    max_history_chars: int = Field(
        4000,
        ge=0,
        description="Most characters of those earlier turns (questions and answers) the "
        "contextualizer reads, newest first: a longer text is cut, and turns that no longer "
        "fit are not read (the run's notes say so).",
    )
    max_knowledge_chars: int = Field(
        12000,
        ge=1,
        description="Most characters of knowledge in the generator's prompt (about 3,000 "
        "tokens; ten 1,000-character passages fit): past it, or past a local model's context "
        "length, the lowest-ranked entries are dropped (the question and instructions are "
        "kept; the run's notes say so).",
    )


class IngestDeployment(BaseModel):
    """What ingestion reads, and what a served ingestion run may do."""

    max_document_chars: int = Field(
        5_000_000, ge=1, description="Longest inline document accepted, in characters."
    )
    ingest_min_chunk_size: int = Field(
        100,
        ge=1,
        le=100_000,
        description="Smallest chunk_size an ingest-graph run may ask for, in characters; a "
        "smaller one is refused. Binds served runs only: tiny chunks multiply what a run "
        "embeds (chunk_size=1 makes a chunk of every word).",
    )
    ingest_max_chunks: int = Field(
        10_000,
        ge=1,
        description="Most chunks one ingest-graph run may embed, counted as documents are "
        "split, before they are embedded: past it the run is refused and writes nothing more "
        "(its files are ingested before its inline documents: a run refused at its inline "
        "documents keeps its files). Binds served runs only: crag ingest and the Python API "
        "are the operator's.",
    )
    max_file_pages: int = Field(
        5_000,
        ge=1,
        description="Most pages of a PDF (slides of a presentation) read from one file; a "
        "longer file is refused, the others are still ingested. Binds every ingestion.",
    )
    max_file_paragraphs: int = Field(
        200_000,
        ge=1,
        description="Most paragraphs of a Word file (rows of a spreadsheet or CSV file) read "
        "from one file; a longer file is refused, the others are still ingested. Binds every "
        "ingestion.",
    )
    max_file_chars: int = Field(
        20_000_000,
        ge=1,
        description="Most characters of text extracted from one file (about 20,000 chunks of "
        "the default size); a file with more is refused, the others are still ingested. Binds "
        "every ingestion.",
    )
    max_file_bytes: int = Field(
        256 << 20,
        ge=1,
        description="Largest file read at all, in bytes, whatever its format (PDF, Office, "
        "e-book, text): a larger one is refused before it is read, the others are still "
        "ingested. Binds every ingestion.",
    )
    ingest_run_replace: Literal["none", "served", "all"] = Field(
        "none",
        description="What ingest-graph runs may replace (and, for lines gone from a "
        "re-ingested JSON Lines file, remove) of what is already stored: 'none' (add new "
        "documents only; the server cannot tell its callers apart, so no caller may change "
        "what another stored), 'served' (what ingest-graph runs stored, never the operator's: "
        "crag ingest, the Python API, the bundled corpus) or 'all'. A document out of reach "
        "is listed in failed and kept as it is.",
    )


class ServerDeployment(BaseModel):
    """The LangGraph server's doors: who may call it, sign-in, the chat page's uploads."""

    upload_max_bytes: int = Field(
        50_000_000,
        ge=1,
        description="Largest file the chat page may upload, in bytes: a larger one is refused "
        "(413), and its reading stops at the limit.",
    )
    upload_quota_bytes: int = Field(
        500_000_000,
        ge=1,
        description="Most bytes one user may keep uploaded through the chat page; an upload "
        "past it is refused (413) until some are removed.",
    )
    upload_max_files: int = Field(
        1_000,
        ge=1,
        description="Most files one user may keep uploaded through the chat page; an upload "
        "past it is refused (413) until some are removed.",
    )
    upload_seconds: float = Field(
        120.0,
        ge=1.0,
        description="Seconds an upload's body may take to arrive; a slower one is abandoned "
        "(408) and nothing of it is kept.",
    )
    server_hosts: str = Field(
        "",
        description="Host names (comma-separated) the LangGraph server answers besides "
        "127.0.0.1, localhost and [::1]: a request whose Host header names another is refused "
        "(403), so a web page cannot reach the server through a name it controls (DNS "
        "rebinding). A team's server lists the names it is reached by.",
    )
    server_origins: str = Field(
        "",
        description="Web origins (comma-separated, scheme://host[:port]) whose pages may call "
        "the LangGraph server besides its own, e.g. https://smith.langchain.com for LangGraph "
        "Studio; a request from any other origin is refused (403), and no other origin gets "
        "CORS headers.",
    )
    server_max_request_bytes: int = Field(
        10_000_000,
        ge=1_000,
        description="Largest request body the LangGraph server reads, in bytes (uploads have "
        "upload_max_bytes): a larger one is refused (413) before it is read whole.",
    )
    oidc_issuer: str = Field(
        "",
        description="The team's OpenID Connect provider (its issuer URL, whose "
        "/.well-known/openid-configuration the server reads); empty: no sign-in through it. "
        "The chat page's sign-in then offers it; the provider must allow the redirect "
        "address <the server's address>/chat/oidc/callback.",
    )
    oidc_client_id: str = Field("", description="crag's client id at the OpenID Connect provider.")
    oidc_client_secret: SecretStr = Field(
        SecretStr(""),
        description="crag's client secret at the OpenID Connect provider (never logged).",
    )
    oidc_name_claim: str = Field(
        "preferred_username",
        description="The ID token's claim whose value labels a new account (made on the "
        "person's first sign-in, a member, bound to the token's issuer and subject, never to "
        "this name: a taken name gets a number, alice-2).",
    )
    team_admins: str = Field(
        "",
        description="Names (comma-separated) that are admins when a trusted proxy signs them "
        "in; everyone else it lets in is a member. Not for the OpenID Connect provider, whose "
        "people are members until the operator runs crag users role NAME admin.",
    )
    proxy_user_header: str = Field(
        "",
        description="A header (e.g. X-Forwarded-User, Remote-User) that names the person "
        "signed in by a reverse proxy in front of the server (oauth2-proxy, Authelia); "
        "believed only with proxy_secret or from proxy_addresses (neither: never). Empty: off.",
    )
    proxy_secret: SecretStr = Field(
        SecretStr(""),
        description="A secret the reverse proxy sends in X-Crag-Proxy-Secret with every "
        "request: only a request carrying it may name a person in proxy_user_header "
        "(never logged).",
    )
    proxy_addresses: str = Field(
        "",
        description="Peer addresses (comma-separated) of the reverse proxy: without "
        "proxy_secret, proxy_user_header is believed from these only; with it, from these "
        "only when any are named. Loopback is no default: every process of the host is there.",
    )
    server_token: SecretStr = Field(
        SecretStr(""),
        description="The server's token (at least 24 characters), which signs the operator in "
        "and keys the page's sessions. Empty: the token file server-token beside the store, "
        "made on first use (crag server-token prints it, --new renews it). Never logged.",
    )
    server_session_hours: float = Field(
        24.0,
        ge=0.01,
        le=24.0 * 366,
        description="Hours a chat page sign-in lasts; the page then asks for the token again.",
    )
    eval_dir: str = Field(
        "",
        description="Directory of the evaluations: crag eval FILE writes each run in a new "
        "folder of it (unless given --output), and the chat page's quality view (admins only) "
        "shows the newest results.json in it or in one of its folders, with report.svg beside "
        "it. Empty: 'eval' beside the store (.crag/eval by default).",
    )


class ModelServerDeployment(BaseModel):
    """The operator's own model server: the 'endpoint' generator spec."""

    llm_base_url: str = Field(
        "",
        description="Base URL of an OpenAI-compatible model server, up to its /v1 (Ollama: "
        "http://localhost:11434/v1, vLLM: http://localhost:8000/v1, llama.cpp: "
        "http://localhost:8080/v1). The generator spec 'endpoint' (or 'endpoint:MODEL') uses "
        "it, for any LLM role: generator, rewriter, contextualizer, evaluator_model.",
    )
    llm_model: str = Field(
        "",
        description="Model name the server knows (what its /v1/models lists; Ollama: "
        "'llama3.2'), for the spec 'endpoint'; 'endpoint:OTHER' names another one.",
    )
    llm_api_key: SecretStr = Field(
        SecretStr(""),
        description="API key sent as a bearer token (empty: none; most local servers need "
        "none). A secret: never in a run's state, notes, errors, logs or the warm server's "
        "traffic.",
    )
    llm_timeout: float = Field(
        120.0,
        ge=0.001,
        description="Seconds one request to the model server may take, from sending it to its "
        "last token, retries and their waits included.",
    )
    llm_max_retries: int = Field(
        2,
        ge=0,
        le=20,
        description="Retries of a request the server refused for now (429, 503 and other "
        "5xx: after its Retry-After) or could not be reached, within llm_timeout.",
    )
    llm_max_concurrency: int = Field(
        4,
        ge=1,
        le=1024,
        description="Most requests in flight to the model server at once, from this process "
        "(the others wait their turn): match the server's parallel slots.",
    )
    llm_context_length: int = Field(
        0,
        ge=0,
        description="The served model's context in tokens (prompt and answer), which the "
        "generator's prompt is fitted to. 0: ask the server (vLLM and llama.cpp say it; "
        "Ollama does not: set it to Ollama's num_ctx), else only max_knowledge_chars bounds "
        "the prompt.",
    )


class DeploymentSettings(
    BaseSettings,
    StoreDeployment,
    QuestionDeployment,
    IngestDeployment,
    ServerDeployment,
    ModelServerDeployment,
):
    """Every deployment setting, read from ``CRAG_<NAME>`` (an empty variable means unset)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="ignore", frozen=True
    )


def evaluations_folder(eval_dir: str, store_path: str) -> Path:
    """Where the evaluations are, absolute (setting ``eval_dir``; empty: ``eval`` beside the store).

    ``crag eval`` writes each run in a folder of it unless told otherwise, and the chat page's
    quality view shows the newest.
    """
    if eval_dir.strip():
        return Path(eval_dir).expanduser().resolve()
    return (Path(store_path).expanduser().parent / "eval").resolve()


def _variable(name: str) -> str:
    return f"environment variable {env_name(name)}"


@functools.cache
def _variable_names() -> tuple[str, ...]:
    """The environment variables of the deployment settings (``CRAG_<NAME>``)."""
    return tuple(env_name(name) for name in DeploymentSettings.model_fields)


@functools.lru_cache(maxsize=4)
def _read(environment: tuple[str | None, ...]) -> DeploymentSettings:
    """The settings under one value of the environment (the cache key)."""
    del environment  # the key only: pydantic-settings reads os.environ itself
    try:
        return DeploymentSettings()
    except ValidationError as error:
        raise setting_error(error, DeploymentSettings, _variable) from None


def deployment_settings() -> DeploymentSettings:
    """The operator's settings, read once per value of the ``CRAG_<NAME>`` variables.

    Raises:
        InvalidSettingError: a variable is set to a value of the wrong type or out of bounds.
    """
    return _read(tuple(os.environ.get(name) for name in _variable_names()))


def deployment_with(base: DeploymentSettings | None = None, **changes: Any) -> DeploymentSettings:
    """``base`` (default: the operator's, :func:`deployment_settings`) with ``changes``, checked.

    How a Python caller or the CLI, who are the operator, set deployment settings for the graphs
    and components they build.

    Raises:
        InvalidSettingError: an unknown name, a wrong type or a value out of bounds.
    """
    from crag.settings.setting_checks import check_known

    check_known(changes, DeploymentSettings.model_fields)
    values = (base or deployment_settings()).model_dump()
    try:
        return DeploymentSettings.model_validate({**values, **changes})
    except ValidationError as error:
        raise setting_error(error, DeploymentSettings) from None
