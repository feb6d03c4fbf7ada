"""The chat page's first token against the server's, and the page's transfer size.

Usage: .venv/bin/python bench/scripts/page_latency.py [--url http://127.0.0.1:8123]
       [--runs 5] [--question "Who painted the Mona Lisa?"] [--json]

Against a running server (``make serve``). Each round asks the question twice, one after the
other, never overlapping: once on the page in headless Chromium (time from pressing Enter to the
first generator token in the page's DOM, which the page records in ``window.cragTimings``), and
once straight through ``langgraph-sdk`` (time from sending the run to the first generator token
of the ``messages-tuple`` stream: the server's own first token, with nothing of the page). Each
run is on a new thread, so both do the same work. Prints the medians and their ratio (page over
server), and what loading the page transferred: the bytes on the wire (gzip) and decoded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

from crag_bench.browser import chromium_missing, headless_chromium


def server_first_token(url: str, question: str, token: str) -> float:
    """Seconds from sending a ``crag`` run to its first generator token, through the SDK."""
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=url, api_key=token, timeout=300)
    thread_id = client.threads.create()["thread_id"]
    start = time.perf_counter()
    first = None
    for part in client.runs.stream(
        thread_id,
        "crag",
        input={"messages": [{"role": "user", "content": question}]},
        stream_mode="messages-tuple",
    ):
        if first is None and part.event == "messages":
            message, metadata = part.data
            if metadata.get("langgraph_node") == "generate" and message.get("content"):
                first = time.perf_counter() - start
    if first is None:
        raise RuntimeError(f"the server streamed no generator token for {question!r}")
    return first


def page_first_token(page: Any, question: str) -> float:
    """Seconds from Enter to the first token on the page (a new thread each time)."""
    page.locator("#new-thread").click()
    done = page.evaluate("window.cragTimings.length")
    page.locator("#question").fill(question)
    page.locator("#question").press("Enter")
    deadline = time.monotonic() + 300
    while page.evaluate("window.cragTimings.length") <= done:  # the page's CSP forbids eval
        if time.monotonic() > deadline:
            raise RuntimeError(f"the page did not answer {question!r} within 300 s")
        time.sleep(0.05)
    timing = page.evaluate(f"window.cragTimings[{done}]")
    if "firstToken" not in timing:
        raise RuntimeError(f"the page showed no token for {question!r}")
    return float(timing["firstToken"] - timing["enter"]) / 1000


def transfer_size(page: Any) -> dict[str, int]:
    """What loading the page moved: bytes on the wire and decoded, page and assets."""
    entries = page.evaluate(
        """() => [...performance.getEntriesByType('navigation'),
                  ...performance.getEntriesByType('resource')]
                 .filter(e => e.name.includes('/chat/'))
                 .map(e => ({name: e.name, transfer: e.transferSize, decoded: e.decodedBodySize,
                             encoded: e.encodedBodySize}))"""
    )
    return {
        "files": len(entries),
        "encoded_bytes": sum(e["encoded"] for e in entries),
        "decoded_bytes": sum(e["decoded"] for e in entries),
    }


def measure(url: str, runs: int, question: str, token: str) -> dict[str, Any]:
    """Interleave page and SDK runs; the medians, their ratio and the page's transfer size."""
    page_times: list[float] = []
    server_times: list[float] = []
    with headless_chromium() as browser:
        page = browser.new_context().new_page()
        page.goto(f"{url}/chat/?token={token}")
        page.wait_for_selector("body[data-ready='true']", timeout=60_000)
        size = transfer_size(page)
        server_first_token(url, question, token)  # warm-up: models loaded, caches filled
        for _ in range(runs):
            page_times.append(page_first_token(page, question))
            server_times.append(server_first_token(url, question, token))
    page_median = statistics.median(page_times)
    server_median = statistics.median(server_times)
    return {
        "runs": runs,
        "question": question,
        "page_first_token_s": page_times,
        "server_first_token_s": server_times,
        "page_median_s": round(page_median, 3),
        "server_median_s": round(server_median, 3),
        "ratio_page_over_server": round(page_median / server_median, 3),
        "transfer": size,
    }


def main() -> int:
    """Parse the arguments, measure, print; 2 when the browser is missing."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8123", help="the running server")
    parser.add_argument("--runs", type=int, default=5, help="rounds (one page run, one SDK run)")
    parser.add_argument("--question", default="Who painted the Mona Lisa?")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--token",
        default=os.environ.get("CRAG_SERVER_TOKEN", ""),
        help="the server's token (default: CRAG_SERVER_TOKEN; `crag server-token` prints it)",
    )
    args = parser.parse_args()
    missing = chromium_missing()
    if missing:
        print(f"page_latency: {missing}", file=sys.stderr)
        return 2
    figures = measure(args.url.rstrip("/"), args.runs, args.question, args.token)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    transfer = figures["transfer"]
    print(
        f"first token, median of {args.runs}: page {figures['page_median_s']:.3f} s, "
        f"server {figures['server_median_s']:.3f} s, ratio {figures['ratio_page_over_server']:.3f}"
    )
    print(
        f"page load: {transfer['files']} files, {transfer['encoded_bytes']:,} bytes on the wire, "
        f"{transfer['decoded_bytes']:,} decoded"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
