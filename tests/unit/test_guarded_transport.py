"""The one guarded HTTP transport (crag.net.guarded_transport), against servers on 127.0.0.1.

Compressed bombs: a 32 KB zstd body (or a gzip one of 1 MB) that inflates to 1 GiB, sent as a
web page, as a SearxNG answer and as the model server's reply, must be refused unread: quickly
and without the gigabyte ever being in memory (measured with tracemalloc: httpx would inflate it
in one piece). Bodies are cut at the limit as they come off the wire; over TLS, the connection
goes to the checked address while SNI and the certificate check stay on the host name.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import zstandard
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from langchain_core.messages import HumanMessage

from crag.generator.endpoint import EndpointChatModel, server_context_length
from crag.generator.endpoint_config import EndpointConfig, EndpointError
from crag.net.allowed_hosts import IPAddress
from crag.net.guarded_transport import (
    AsyncGuardedTransport,
    GuardedTransport,
    ReplyTooLargeError,
    UnaskedEncodingError,
)
from crag.websearch.base import SearchResult, SearchUnavailableError
from crag.websearch.guarded_client import guarded_async_client, guarded_client
from crag.websearch.reader import ReaderOptions, read_results
from crag.websearch.safety import AddressPolicy
from crag.websearch.searxng import SearxngSearch
from tests import websearch_server as _shared
from tests.model_server import chunk
from tests.websearch_server import LOOPBACK, WebsearchServer

server = _shared.websearch_server

GIB = 1 << 30
MEMORY_CEILING = 64 << 20
"""Most Python memory a refused bomb may take (tracemalloc's peak): far below its 1 GiB."""
T = TypeVar("T")


def _compressed(compressor: Any, size: int) -> bytes:
    zeros = b"\0" * (1 << 20)
    parts: list[bytes] = [compressor.compress(zeros) for _ in range(size >> 20)]
    return b"".join([*parts, compressor.flush()])


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    """``Content-Encoding`` -> a body inflating to 1 GiB of zeros (zstd 32 KB, gzip 1 MB)."""
    return {
        "zstd": _compressed(zstandard.ZstdCompressor(level=3).compressobj(), GIB),
        "gzip": _compressed(zlib.compressobj(1, zlib.DEFLATED, 31), GIB),
    }


def bounded(action: Callable[[], T]) -> tuple[T, float, int]:
    """``action()``'s result, the seconds it took and the peak Python memory it allocated."""
    tracemalloc.start()
    start = time.monotonic()
    try:
        result = action()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return result, time.monotonic() - start, peak


def raised(action: Callable[[], object], kind: type[Exception]) -> Callable[[], Exception]:
    """``action`` made to return the exception of type ``kind`` it raises (failing if none)."""

    def run() -> Exception:
        with pytest.raises(kind) as caught:
            action()
        return caught.value

    return run


# -- compressed bombs: a web page, a SearxNG answer, the model server's reply ---------------------


@pytest.mark.parametrize("encoding", ["zstd", "gzip"])
def test_a_compressed_page_bomb_is_refused_unread(
    server: WebsearchServer, bombs: dict[str, bytes], encoding: str
) -> None:
    url = server.add_route("/bomb", bombs[encoding], headers={"Content-Encoding": encoding})
    options = ReaderOptions(timeout=10.0, allowed_hosts="127.0.0.1", cache_ttl=0.0)
    hits = [SearchResult(title="Bomb", url=url, snippet="The bomb's snippet.")]
    reading, seconds, peak = bounded(lambda: read_results(hits, pages=1, options=options))
    assert reading.notes == [
        f"skipped {url}: refused to read it: 127.0.0.1 sent a body compressed as "
        f"'{encoding}', which crag did not ask for, used its search snippet"
    ]
    assert peak < MEMORY_CEILING, f"reading the bomb took {peak >> 20} MiB"
    assert seconds < 5
    (request,) = server.requests_to("/bomb")
    assert request.headers["accept-encoding"] == "identity"


def test_a_compressed_searxng_answer_is_refused_unread(
    server: WebsearchServer, bombs: dict[str, bytes]
) -> None:
    server.add_route(
        "/search",
        bombs["zstd"],
        content_type="application/json",
        headers={"Content-Encoding": "zstd"},
    )
    provider = SearxngSearch(server.url, timeout=10, policy=LOOPBACK)
    search = raised(lambda: provider.search("mona lisa", 5), SearchUnavailableError)
    error, seconds, peak = bounded(search)
    assert str(error) == (
        f"SearxNG at {server.url} was not read: 127.0.0.1 sent a body compressed as 'zstd', "
        "which crag did not ask for."
    )
    assert peak < MEMORY_CEILING, f"reading the bomb took {peak >> 20} MiB"
    assert seconds < 5
    assert server.requests_to("/search")[0].headers["accept-encoding"] == "identity"


def _model_on(server: WebsearchServer) -> EndpointChatModel:
    config = EndpointConfig(f"{server.url}/v1", model="fake", timeout=10.0, max_retries=2)
    return EndpointChatModel.for_endpoint(config, max_new_tokens=8)


@pytest.mark.parametrize("streaming", [True, False])
@pytest.mark.parametrize("encoding", ["zstd", "gzip"])
def test_a_compressed_model_reply_is_refused_unread(
    server: WebsearchServer, bombs: dict[str, bytes], encoding: str, streaming: bool
) -> None:
    kind = "text/event-stream" if streaming else "application/json"
    server.add_route(
        "/v1/chat/completions",
        bombs[encoding],
        content_type=kind,
        headers={"Content-Encoding": encoding},
    )
    model = _model_on(server)
    question = [HumanMessage("Who painted the Mona Lisa?")]

    def ask() -> object:
        return list(model.stream(question)) if streaming else model.invoke(question)

    error, seconds, peak = bounded(raised(ask, EndpointError))
    assert str(error) == (
        f"the model server {server.url}/v1 sent a reply compressed as '{encoding}', which crag "
        "did not ask for"
    )
    assert isinstance(error, EndpointError) and error.kind == "malformed"
    assert peak < MEMORY_CEILING, f"reading the bomb took {peak >> 20} MiB"
    assert seconds < 5
    (request,) = server.requests_to("/v1/chat/completions")  # refused, not retried
    assert request.headers["accept-encoding"] == "identity"


def test_a_compressed_model_list_ends_the_context_probe(
    server: WebsearchServer, bombs: dict[str, bytes], caplog: pytest.LogCaptureFixture
) -> None:
    server.add_route(
        "/v1/models",
        bombs["zstd"],
        content_type="application/json",
        headers={"Content-Encoding": "zstd"},
    )
    config = EndpointConfig(f"{server.url}/v1", model="fake", timeout=10.0)
    length, seconds, peak = bounded(lambda: server_context_length(config))
    assert length is None
    assert "gave up asking its context length (its answer is compressed as 'zstd')" in caplog.text
    assert peak < MEMORY_CEILING, f"reading the bomb took {peak >> 20} MiB"
    assert seconds < 5


def test_a_model_reply_compressed_although_identity_was_asked_names_the_endpoint(
    server: WebsearchServer,
) -> None:
    """Even a small compressed reply is refused: crag never inflates what it did not ask for."""
    events = "".join(f"data: {chunk(word)}\n\n" for word in ("Leonardo", ".")) + "data: [DONE]\n\n"
    server.add_route(
        "/v1/chat/completions",
        zlib.compress(events.encode(), wbits=31),
        content_type="text/event-stream",
        headers={"Content-Encoding": "gzip"},
    )
    with pytest.raises(EndpointError, match=r"sent a reply compressed as 'gzip'"):
        list(_model_on(server).stream([HumanMessage("Who?")]))


# -- bodies cut at the limit on the wire ---------------------------------------------------------


@pytest.mark.parametrize("chunked", [True, False])
def test_a_body_is_cut_at_the_limit_as_it_arrives(server: WebsearchServer, chunked: bool) -> None:
    url = server.add_route("/big", b"x" * 200_000, chunked=chunked)
    received: list[int] = []
    with (
        httpx.Client(transport=GuardedTransport(50_000)) as client,
        pytest.raises(ReplyTooLargeError) as caught,
        client.stream("GET", url) as response,
    ):
        for part in response.iter_raw():
            received.append(len(part))
    assert str(caught.value) == "127.0.0.1 sent more than 50,000 bytes; crag stopped reading"
    assert sum(received) <= 50_000


def test_the_async_transport_cuts_a_body_and_refuses_an_encoding(server: WebsearchServer) -> None:
    big = server.add_route("/big", b"x" * 200_000, chunked=True)
    packed = server.add_route("/packed", b"x", headers={"Content-Encoding": "br"})
    fine = server.add_route("/fine", b"x" * 50_000, headers={"Content-Encoding": "identity"})

    async def fetch_all() -> tuple[BaseException | bytes, ...]:
        async with httpx.AsyncClient(transport=AsyncGuardedTransport(50_000)) as client:
            results = await asyncio.gather(
                *(client.get(url) for url in (big, packed, fine)), return_exceptions=True
            )
        return tuple(r if isinstance(r, BaseException) else r.content for r in results)

    too_big, refused, body = asyncio.run(fetch_all())
    assert isinstance(too_big, ReplyTooLargeError)
    assert isinstance(refused, UnaskedEncodingError) and refused.encoding == "br"
    assert body == b"x" * 50_000
    # httpx's client asks for gzip, br and zstd by default; the transport asks for none.
    assert {r.headers["accept-encoding"] for r in server.requests} == {"identity"}


# -- TLS: the checked address, the name's certificate --------------------------------------------


@dataclass
class TlsServer:
    """An HTTPS server on 127.0.0.1 with a certificate for ``pinned.test`` only."""

    port: int
    client_context: ssl.SSLContext
    server_names: list[str | None] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a leaf certificate for ``pinned.test`` signed by it: (ca, cert, key) files."""
    now = datetime.datetime.now(datetime.UTC)

    def build(subject: str, issuer: str, key: Any, signer: Any, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            names = x509.SubjectAlternativeName([x509.DNSName(subject)])
            builder = builder.add_extension(names, critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, leaf_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca = build("crag test CA", "crag test CA", ca_key, ca_key, ca=True)
    leaf = build("pinned.test", "crag test CA", leaf_key, ca_key, ca=False)
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[TlsServer]:
    ca, cert, key = _certificates(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    state = TlsServer(0, ssl.create_default_context(cafile=str(ca)))
    context.sni_callback = lambda sock, name, ctx: state.server_names.append(name)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

        def do_GET(self) -> None:
            state.hosts.append(self.headers.get("Host", ""))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    state.port = int(httpd.server_address[1])
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def test_tls_goes_to_the_checked_address_and_verifies_the_name(tls_server: TlsServer) -> None:
    """SNI and the certificate check use the name; a name the certificate lacks is refused,
    even right after a connection verified for another name served from the same address."""
    asked: list[str] = []

    def resolve(host: str, port: int) -> list[IPAddress]:
        asked.append(host)
        return [ipaddress.ip_address("127.0.0.1")]

    transport = GuardedTransport(
        10_000, resolve, ssl_context=tls_server.client_context, max_connections=1
    )
    port = tls_server.port
    with httpx.Client(transport=transport, timeout=5) as client:
        assert client.get(f"https://pinned.test:{port}/").text == "ok"
        with pytest.raises(httpx.ConnectError, match="certificate verify failed"):
            client.get(f"https://other.test:{port}/")
    assert asked == ["pinned.test", "other.test"]
    assert tls_server.hosts == [f"pinned.test:{port}"]
    assert tls_server.server_names[:2] == ["pinned.test", "other.test"]


def test_a_refused_host_is_never_connected_to(server: WebsearchServer) -> None:
    """The resolve function decides: what it refuses is neither connected to nor asked."""

    def refuse(host: str, port: int) -> list[IPAddress]:
        raise PermissionError(f"{host} refused")

    with (
        httpx.Client(transport=GuardedTransport(10_000, refuse)) as client,
        pytest.raises(PermissionError, match=r"127\.0\.0\.1 refused"),
    ):
        client.get(server.url_for("/anything"))
    assert server.requests == []


# -- DNS rebinding: the address checked is the address connected to ------------------------------


@pytest.fixture
def rebinding_dns(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``rebind.test`` resolves to 127.0.0.1 once, then to 10.0.0.1 (an attacker's DNS server).

    Returns the list of lookups of ``rebind.test``, one entry per lookup.
    """
    asked: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if host != "rebind.test":
            return real(host, port, *args, **kwargs)
        address = "10.0.0.1" if asked else "127.0.0.1"
        asked.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port)))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_name_rebinding_after_the_check_still_reaches_only_the_checked_address(
    server: WebsearchServer, rebinding_dns: list[str], kind: str
) -> None:
    """The name is resolved once per request: a second answer (10.0.0.1) is never asked for,
    so it is never connected to, and the checked address is reached with the name as Host."""
    server.add_route("/page", b"checked")
    url = f"http://rebind.test:{server.port}/page"
    policy = AddressPolicy.from_setting("127.0.0.1")  # the address, not the name
    if kind == "sync":
        with guarded_client(policy, timeout=5) as client:
            body = client.get(url).content
    else:

        async def fetch() -> bytes:
            async with guarded_async_client(policy, timeout=5) as client:
                return (await client.get(url)).content

        body = asyncio.run(fetch())
    assert body == b"checked"
    assert rebinding_dns == ["rebind.test"]
    (request,) = server.requests_to("/page")
    assert request.headers["host"] == f"rebind.test:{server.port}"
