"""The tests' network guard: loopback only, decided before any packet is sent."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests import network_guard


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        (None, True),
        ("10.0.0.1", False),
        ("169.254.169.254", False),
        ("192.168.1.1", False),
        ("8.8.8.8", False),
        ("::ffff:10.0.0.1", False),
        ("example.com", False),
        ("0.0.0.0", False),
    ],
)
def test_only_loopback_hosts_are_allowed(host: str | None, allowed: bool) -> None:
    assert network_guard.allowed_host(host) is allowed


def test_unix_sockets_are_local() -> None:
    assert network_guard.allowed_address(socket.AF_UNIX, "/tmp/x.sock")
    assert not network_guard.allowed_address(socket.AF_INET, ("10.0.0.1", 80))


def test_guard_is_installed_for_every_test() -> None:
    assert socket.socket.connect is network_guard._connect
    assert socket.getaddrinfo is network_guard._getaddrinfo


def test_name_lookups_of_other_hosts_fail_without_a_query() -> None:
    with pytest.raises(socket.gaierror, match="loopback names"):
        socket.getaddrinfo("example.com", 80)


def test_loopback_servers_stay_reachable() -> None:
    class Hello(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hi")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=5) as conn:
            conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
            assert b"hi" in conn.recv(1024) + conn.recv(1024)
    finally:
        server.shutdown()
        server.server_close()
