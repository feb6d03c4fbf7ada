"""Where the operator's model server is and how it may be used: the ``CRAG_LLM_*`` settings.

The names follow ``langchain-openai`` and the OpenAI client, which Ollama, vLLM, llama.cpp and
LM Studio users already write: a base URL up to ``/v1``, a model name, an API key, a timeout,
retries. Only the operator sets them (environment, ``.env``, or an :class:`EndpointConfig`
given where the components are built); a served run cannot, so no caller can point the server
at an address of its choosing. The key is a :class:`~pydantic.SecretStr`: it prints as
``**********`` and leaves this object only as the request's bearer token.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import SecretStr

from crag.settings.deployment import DeploymentSettings, deployment_settings


class EndpointError(RuntimeError):
    """The model server failed a request, or is not configured; one line, never the key.

    Attributes:
        kind: What went wrong, for callers that react to it: ``config``, ``unreachable``,
            ``disconnected``, ``model``, ``auth``, ``busy``, ``timeout``, ``context``,
            ``malformed`` or ``server``.
    """

    def __init__(self, message: str, kind: str = "server") -> None:
        """A failure of ``kind`` described by ``message``."""
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class EndpointConfig:
    """One OpenAI-compatible endpoint (the deployment settings ``llm_*``)."""

    base_url: str
    """Up to ``/v1``: ``http://localhost:11434/v1``."""
    model: str = ""
    """The model name the server knows."""
    api_key: SecretStr = field(default_factory=lambda: SecretStr(""), compare=False)
    """Bearer token; empty: none is sent. Not part of equality (nor of cache keys)."""
    timeout: float = 120.0
    """Seconds a request may take, retries included."""
    max_retries: int = 2
    """Retries of a request the server refused for now, or that could not connect."""
    max_concurrency: int = 4
    """Most requests in flight at once to this server, from this process."""
    context_length: int = 0
    """The model's context in tokens; 0: ask the server."""

    @classmethod
    def from_settings(cls, settings: DeploymentSettings | None = None) -> EndpointConfig:
        """The endpoint the operator's settings describe (the environment's by default)."""
        s = settings or deployment_settings()
        return cls(
            base_url=s.llm_base_url.strip(),
            model=s.llm_model.strip(),
            api_key=s.llm_api_key,
            timeout=s.llm_timeout,
            max_retries=s.llm_max_retries,
            max_concurrency=s.llm_max_concurrency,
            context_length=s.llm_context_length,
        )

    @property
    def where(self) -> str:
        """The base URL as errors and logs show it: no user, password, query or fragment."""
        return public_url(self.base_url)

    @property
    def request_url(self) -> str:
        """The base URL requests go to: without its ``user:password`` (see :attr:`basic_auth`).

        httpx logs every request's URL (``crag -vv``); credentials in it would be printed.
        """
        parts = urlsplit(self.base_url.strip())
        if "@" not in parts.netloc:
            return self.base_url
        return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))

    @property
    def basic_auth(self) -> tuple[str, str] | None:
        """The base URL's ``user:password``, sent as HTTP Basic (as httpx sends a URL's)."""
        parts = urlsplit(self.base_url.strip())
        if "@" not in parts.netloc:
            return None
        user, _, password = parts.netloc.rpartition("@")[0].partition(":")
        return unquote(user), unquote(password)

    def where_with_scheme(self, scheme: str) -> str:
        """:attr:`where` with another scheme: the URL to suggest when TLS is on one side only."""
        return urlunsplit(urlsplit(self.where)._replace(scheme=scheme))

    def for_model(self, model: str) -> EndpointConfig:
        """The same endpoint with another model name (a role pointed at another model)."""
        return replace(self, model=model)

    def checked(self) -> EndpointConfig:
        """The endpoint itself, if it names a server and a model.

        Raises:
            EndpointError: ``llm_base_url`` is empty or not an http(s) URL, or no model name.
        """
        if not self.base_url:
            raise EndpointError(
                "the generator spec 'endpoint' needs a model server: set CRAG_LLM_BASE_URL "
                "(e.g. http://localhost:11434/v1 for Ollama)",
                "config",
            )
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EndpointError(
                f"CRAG_LLM_BASE_URL must be an http:// or https:// URL, not {self.where!r}",
                "config",
            )
        if not self.model:
            raise EndpointError(
                f"the model server {self.where} needs a model name: set CRAG_LLM_MODEL "
                "or use the spec 'endpoint:MODEL'",
                "config",
            )
        return self


def public_url(url: str) -> str:
    """``url`` without credentials, query or fragment (what may appear in a message)."""
    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def endpoint_for_spec(spec: str, config: EndpointConfig | None = None) -> EndpointConfig:
    """The endpoint a generator spec ``endpoint`` or ``endpoint:MODEL`` names, checked."""
    base = config or EndpointConfig.from_settings()
    _, _, model = spec.strip().partition(":")
    return (base.for_model(model.strip()) if model.strip() else base).checked()
