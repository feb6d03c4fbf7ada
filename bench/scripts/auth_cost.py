"""What the server's gate and authentication cost per request, with and without them.

Usage: .venv/bin/python bench/scripts/auth_cost.py [--requests 200] [--runs 11] [--json]

Starts two ``langgraph dev`` servers side by side on 127.0.0.1 over copies of one small store
(``crag-bench server``'s: 50 summaries, real embeddings; the shipped SmolLM2 answers): one as
``make serve`` serves crag (the gate, LangGraph's auth: ``access=True``), one with neither
(langgraph-api's defaults). Then, alternating between the two so that both see the same
machine (which one goes first swaps every round):

* ``--requests`` times ``POST /threads/search`` (keep-alive, one at a time): the cost of the
  gate and of the auth handlers on a request that does almost nothing else;
* ``--runs`` times a ``crag`` run streamed to its first generator token (each on a new thread,
  after one warm-up run per server).

Prints each server's median and p95 in milliseconds and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from crag_bench.dev_server import DevServer, dev_server
from crag_bench.server_bench import build_bench_store

QUESTION = "Who painted the Mona Lisa?"


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(values) * 1000, 2),
        "p95_ms": round(_p95(values) * 1000, 2),
    }


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _search(client: httpx.Client) -> Callable[[], object]:
    def call() -> object:
        response = client.post("/threads/search", json={"limit": 10})
        response.raise_for_status()
        return response

    return call


def first_token(server: DevServer) -> float:
    """Seconds from sending a ``crag`` run to its first generator token."""
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=server.url, api_key=server.token, timeout=300)
    thread_id = client.threads.create()["thread_id"]
    start = time.perf_counter()
    for part in client.runs.stream(
        thread_id, "crag", input={"question": QUESTION}, stream_mode="messages-tuple"
    ):
        if part.event == "messages":
            message, metadata = part.data
            if metadata.get("langgraph_node") == "generate" and message.get("content"):
                return time.perf_counter() - start
    raise RuntimeError("the server streamed no generator token")


def _order(servers: dict[str, DevServer], round_: int) -> list[str]:
    """The servers' order in a round: swapped every other round, so neither always goes first.

    The first of a pair was measured slower, whichever server it was.
    """
    names = list(servers)
    return names if round_ % 2 == 0 else names[::-1]


def measure(servers: dict[str, DevServer], requests: int, runs: int) -> dict[str, Any]:
    """Alternate the two servers' requests, then their runs; each one's figures."""
    searches: dict[str, list[float]] = {name: [] for name in servers}
    tokens: dict[str, list[float]] = {name: [] for name in servers}
    clients = {
        name: httpx.Client(base_url=server.url, headers=server.headers, timeout=60)
        for name, server in servers.items()
    }
    try:
        for name in servers:
            _search(clients[name])()  # warm-up
        for round_ in range(requests):
            for name in _order(servers, round_):
                searches[name].append(_timed(_search(clients[name])))
    finally:
        for client in clients.values():
            client.close()
    for server in servers.values():
        first_token(server)  # warm-up: models loaded
    for round_ in range(runs):
        for name in _order(servers, round_):
            tokens[name].append(first_token(servers[name]))
    figures: dict[str, Any] = {
        name: {"threads_search": _summary(searches[name]), "first_token": _summary(tokens[name])}
        for name in servers
    }
    for what in ("threads_search", "first_token"):
        figures[f"{what}_ratio_with_over_without"] = round(
            figures["with"][what]["median_ms"] / figures["without"][what]["median_ms"], 3
        )
    figures.update(requests=requests, runs=runs)
    return figures


def run(requests: int, runs: int) -> dict[str, Any]:
    """Start both servers over copies of one store, measure, stop them."""
    with tempfile.TemporaryDirectory(prefix="crag-auth-cost-") as tmp:
        root = Path(tmp)
        store = build_bench_store(root / "with" / "chroma")
        shutil.copytree(store, root / "without" / "chroma")
        env = {
            "CRAG_COLLECTION": "crag",
            "CRAG_DEFAULT_CORPUS": "false",
            "CRAG_GENERATOR": "smollm2",
            "CRAG_SEARCH_PROVIDER": "searxng",
            "CRAG_SEARCH_URL": "http://127.0.0.1:9",  # nothing listens: refused at once
            "CRAG_ALLOWED_HOSTS": "127.0.0.1",
        }
        with (
            dev_server(
                root / "server-with", {**env, "CRAG_STORE_PATH": str(store)}, access=True
            ) as with_access,
            dev_server(
                root / "server-without",
                {**env, "CRAG_STORE_PATH": str(root / "without" / "chroma")},
                access=False,
            ) as without_access,
        ):
            return measure({"with": with_access, "without": without_access}, requests, runs)


def main() -> int:
    """Parse the arguments, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="/threads/search each")
    parser.add_argument("--runs", type=int, default=11, help="crag runs each")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    figures = run(args.requests, args.runs)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    for what, label in (("threads_search", "POST /threads/search"), ("first_token", "first token")):
        with_, without = figures["with"][what], figures["without"][what]
        print(
            f"{label}: with the gate and auth median {with_['median_ms']} ms, p95 "
            f"{with_['p95_ms']} ms; without median {without['median_ms']} ms, p95 "
            f"{without['p95_ms']} ms; ratio {figures[f'{what}_ratio_with_over_without']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
