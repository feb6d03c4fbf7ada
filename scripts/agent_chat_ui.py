"""Ask crag a question through LangChain's Agent Chat UI, in headless Chromium, and check it.

``make agent-chat-ui`` runs this. It is the check that a chat front-end which knows nothing of
crag shows crag's answer *and* its sources (the AI message's one Markdown text block:
:func:`crag.knowledge.conversation.message_text`). Too slow for ``make test`` (``npm install``
takes minutes, Next.js's first compile over a minute), so it is a target of its own, and its last
result is written in docs/agent-chat-ui.md.

What it does, all on 127.0.0.1 and in a scratch folder outside the repository (``--workdir``):

1. Gets the app from npm (``npm pack create-agent-chat-app@0.1.6``, whose ``templates/nextjs``
   is Agent Chat UI) and runs ``npm install`` there; both are kept for the next run.
2. Builds a small Chroma store (the bundled Mona Lisa summary and 40 unrelated ones), once.
3. Starts a real crag LangGraph server (``langgraph dev``, the repository's gate and
   authentication, a token of its own) whose ``CRAG_SERVER_ORIGINS`` lists the app's origin;
   its web search points at a closed port of 127.0.0.1, so nothing leaves the machine.
4. Starts ``next dev`` with Google Fonts mocked (``NEXT_FONT_GOOGLE_MOCKED_RESPONSES``,
   Next.js's own test hook: the layout's ``next/font/google`` would fetch them at compile time).
5. In Chromium (every request to another origin aborted and reported) fills the app's form as a
   person does (Deployment URL, Graph ID ``crag``, the token as "LangSmith API Key"), asks the
   question, waits for the run to finish on the server, and checks that the page shows the
   answer the thread holds, a rendered **Sources** heading and every cited source.

Exits 0 when all of that holds; otherwise 1, with one sentence naming what failed.

Usage: .venv/bin/python scripts/agent_chat_ui.py [--workdir DIR] [--question Q]
       [--screenshot PNG] [--ui-port PORT]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx

from crag_bench.browser import chromium_missing, headless_chromium
from crag_bench.dev_server import (
    HOST,
    DevServer,
    DevServerError,
    free_port,
    log_tail,
    start_dev_server,
    stop_process_group,
)

logger = logging.getLogger("agent_chat_ui")

PACKAGE = "create-agent-chat-app@0.1.6"
"""The npm package holding Agent Chat UI's Next.js app (``package/templates/nextjs``)."""
TEMPLATE = "package/templates/nextjs/"
GRAPH_ID = "crag"
QUESTION = "Who painted the Mona Lisa?"
VIEWPORT = {"width": 1100, "height": 800}
DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "acui"
DEFAULT_SCREENSHOT = Path(__file__).resolve().parent.parent / "docs/images/agent-chat-ui-answer.png"
COMPILE_TIMEOUT = 600.0
RUN_TIMEOUT = 900.0
START_TIMEOUT = 60.0
SHOW_TIMEOUT = 30.0
FONTS = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
)


class CheckFailed(RuntimeError):
    """One step or check failed; the message is the sentence the script ends with."""


@dataclass
class Result:
    """What the run measured and found."""

    timings: dict[str, float] = field(default_factory=dict)
    answer: str = ""
    sources: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    screenshot: str = ""
    failed_screenshot: Path = DEFAULT_WORKDIR / "failed.png"

    @contextmanager
    def timed(self, step: str) -> Iterator[None]:
        """Record the seconds ``step`` takes."""
        start = time.monotonic()
        yield
        self.timings[step] = round(time.monotonic() - start, 1)
        logger.info("%s: %.1f s", step, self.timings[step])


def run(command: Sequence[str], cwd: Path, what: str) -> None:
    """Run ``command`` in ``cwd``; its output goes to ``cwd/<what>.log``."""
    log = cwd / f"{what.replace(' ', '-')}.log"
    with log.open("wb") as out:
        done = subprocess.run(list(command), cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise CheckFailed(f"{what} failed with exit code {done.returncode}:\n{log_tail(log, 3000)}")


def prepare_app(workdir: Path, result: Result) -> Path:
    """Agent Chat UI's app in ``workdir/app`` with its packages installed (kept between runs)."""
    if shutil.which("npm") is None:
        raise CheckFailed("npm is missing: install Node.js 20 or newer with npm")
    app = workdir / "app"
    if not (app / "package.json").is_file():
        with result.timed("npm pack"):
            run(["npm", "pack", PACKAGE, "--pack-destination", str(workdir)], workdir, "npm pack")
        tgz = next(workdir.glob("create-agent-chat-app-*.tgz"))
        with tarfile.open(tgz) as archive:
            members = [m for m in archive.getmembers() if m.name.startswith(TEMPLATE)]
            for member in members:
                member.name = member.name.removeprefix(TEMPLATE)
            archive.extractall(app, members=members, filter="data")
    if not (app / "node_modules/.bin/next").exists():
        with result.timed("npm install"):
            run(["npm", "install", "--no-audit", "--no-fund"], app, "npm install")
    return app


def font_mock(workdir: Path) -> Path:
    """A module answering every Google Fonts CSS request with a local font (Next.js's hook).

    ``next/font/google`` requires the file named by ``NEXT_FONT_GOOGLE_MOCKED_RESPONSES`` and
    looks the CSS URL up in it; a font ``src`` that is a path is read from disk.
    """
    font = next((f for f in FONTS if Path(f).is_file()), "")
    src = f"url({font}) format('truetype')" if font else "url(missing.woff2) format('woff2')"
    css = (
        "/* latin */\n@font-face {\n  font-family: 'Inter';\n  font-style: normal;\n"
        f"  font-weight: 100 900;\n  font-display: swap;\n  src: {src};\n}}\n"
    )
    mock = workdir / "google-fonts-mock.cjs"
    mock.write_text(
        f"const css = {json.dumps(css)};\n"
        "module.exports = new Proxy({}, { get: (_, url) => css });\n",
        encoding="utf-8",
    )
    return mock


def build_store(workdir: Path, result: Result) -> Path:
    """A Chroma store of the Mona Lisa summary and 40 unrelated ones (built once, then reused)."""
    path = workdir / "store"
    done = path / "complete"
    if done.is_file():
        return path
    shutil.rmtree(path, ignore_errors=True)
    from crag_bench.mona_lisa_store import ingest_mona_lisa_store

    with result.timed("store build"):
        report, found = ingest_mona_lisa_store(path)
    if not report.ok or not found:
        raise CheckFailed(f"the store could not be built: {report.failed}")
    done.write_text("ok\n", encoding="utf-8")
    return path


def server_environment(workdir: Path, store: Path, ui_origin: str) -> dict[str, str]:
    """The crag server's settings: the small store, the shipped generator, the app's origin."""
    return {
        "CRAG_STORE_PATH": str(store),
        "CRAG_COLLECTION": "crag",
        "CRAG_DEFAULT_CORPUS": "false",
        "CRAG_GENERATOR": "smollm2",
        # Web search: SearxNG at a closed port of 127.0.0.1 (fails fast, leaves no machine).
        "CRAG_SEARCH_PROVIDER": "searxng",
        "CRAG_SEARCH_URL": f"http://{HOST}:{free_port()}",
        "CRAG_ALLOWED_HOSTS": HOST,
        "CRAG_THREADS_DB": str(workdir / "server" / "threads.sqlite"),
        "CRAG_SERVER_ORIGINS": ui_origin,
    }


@contextmanager
def next_dev(app: Path, port: int, mock: Path, result: Result) -> Iterator[str]:
    """``next dev`` of the app on 127.0.0.1:``port``, compiled (its first page answered)."""
    log = app.parent / "next-dev.log"
    env = {
        **os.environ,
        "NEXT_TELEMETRY_DISABLED": "1",
        "NEXT_FONT_GOOGLE_MOCKED_RESPONSES": str(mock),
    }
    command = [str(app / "node_modules/.bin/next"), "dev", "-H", HOST, "-p", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=app, env=env, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    url = f"http://{HOST}:{port}"
    try:
        with result.timed("next compile"):
            _wait_for_page(process, url, log)
        yield url
    finally:
        stop_process_group(process)


def _wait_for_page(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    """Ask for the app's page until it answers 200 (the first request compiles it)."""
    deadline = time.monotonic() + COMPILE_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise CheckFailed(f"next dev exited with {process.returncode}:\n{log_tail(log, 3000)}")
        try:
            if httpx.get(url + "/", timeout=COMPILE_TIMEOUT).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise CheckFailed(f"next dev did not serve {url}/ within {COMPILE_TIMEOUT:.0f} s")


HYDRATED = """() => {
    const field = document.querySelector('#apiUrl');
    return !!field && Object.keys(field).some((key) => key.startsWith('__reactProps'));
}"""
"""True once React has hydrated the form: a click before that submits it as a plain HTML form."""


def open_app(browser: Any, ui_url: str, server: DevServer, result: Result) -> Any:
    """A page of the app with the form filled and sent as a person does; foreign requests off.

    The app's calls to the server that fail (4xx/5xx, refused) are recorded in ``result``.
    """
    page = browser.new_context(viewport=VIEWPORT).new_page()
    allowed = (ui_url, server.url)

    def refuse(route: Any) -> None:
        result.foreign.append(route.request.url)
        route.abort()

    def answered(response: Any) -> None:
        if response.url.startswith(server.url) and response.status >= 400:
            result.refused.append(f"{response.request.method} {response.url}: {response.status}")

    # Only other origins are routed: a routed request to the server lost the run's stream.
    page.route(lambda url: not url.startswith(allowed), refuse)
    page.on("response", answered)
    page.on("request", lambda r: logger.debug("app calls %s %s", r.method, r.url[:120])
            if r.url.startswith(server.url) else None)  # fmt: skip
    page.on("requestfailed", lambda r: result.refused.append(f"{r.method} {r.url}: {r.failure}"))
    page.goto(ui_url + "/", timeout=COMPILE_TIMEOUT * 1000)
    page.wait_for_function(HYDRATED, timeout=COMPILE_TIMEOUT * 1000)
    page.fill("#apiUrl", server.url)
    page.fill("#assistantId", GRAPH_ID)
    page.fill("#apiKey", server.token)
    page.click("form button[type=submit]")
    page.wait_for_selector("textarea", timeout=120_000)
    page.wait_for_load_state("networkidle", timeout=120_000)
    return page


def ask(page: Any, question: str) -> str:
    """Type ``question``, send it, and return the thread id the app puts in its address."""
    page.fill("textarea", question)
    page.click("button[type=submit]:has-text('Send')")
    page.wait_for_url(re.compile(r"[?&]threadId="), timeout=120_000)
    thread_id = parse_qs(urlparse(str(page.url)).query).get("threadId", [""])[0]
    if not thread_id:
        raise CheckFailed("the app made no thread for the question")
    return thread_id


def finished_answer(page: Any, server: DevServer, thread_id: str, result: Result) -> dict[str, Any]:
    """The thread's last AI message once its run has finished on the server.

    It waits with ``page.wait_for_timeout``, never ``time.sleep``: Playwright's sync API runs
    the route handler (and so lets the page's requests go) only inside its own calls, and a
    page whose requests wait on a sleeping script never starts the run.

    Fails when the app started no run within :data:`START_TIMEOUT` seconds (naming the app's
    refused calls), when the run failed, or when it did not finish within :data:`RUN_TIMEOUT`.
    """
    started = time.monotonic()
    url = f"{server.url}/threads/{thread_id}"
    while time.monotonic() < started + RUN_TIMEOUT:
        runs = httpx.get(f"{url}/runs", headers=server.headers, timeout=30).json()
        if not runs and time.monotonic() > started + START_TIMEOUT:
            refused = "; ".join(result.refused) or "none refused"
            raise CheckFailed(f"the app started no run on the crag server ({refused})")
        statuses = {run.get("status") for run in runs}
        if "error" in statuses:
            raise CheckFailed(f"crag's run failed on the server:\n{server.log_tail(3000)}")
        if runs and statuses <= {"success"}:
            thread = httpx.get(url, headers=server.headers, timeout=30).json()
            messages = (thread.get("values") or {}).get("messages") or []
            if messages and messages[-1].get("type") == "ai":
                message: dict[str, Any] = messages[-1]
                return message
            raise CheckFailed("crag's run finished without an AI message on the thread")
        page.wait_for_timeout(1000)
    raise CheckFailed(f"crag's run did not finish within {RUN_TIMEOUT:.0f} s")


def _plain(text: str) -> str:
    """Text with Markdown marks and runs of spaces gone, to compare source with rendering."""
    return " ".join(re.sub(r"[*_`#>\\]", "", text).split())


def shown_message(page: Any, with_sources: bool) -> Any:
    """The last AI message of the page once it shows the stored message, not streamed tokens.

    With sources, that is once its rendered **Sources** heading is there (given
    :data:`SHOW_TIMEOUT` seconds); without, once it shows text and a moment has passed.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    message = page.locator("div.group.mr-auto").last
    try:
        message.locator(".markdown-content").wait_for(timeout=SHOW_TIMEOUT * 1000)
        if with_sources:
            heading = message.locator("strong", has_text="Sources")
            heading.wait_for(timeout=SHOW_TIMEOUT * 1000)
        else:
            page.wait_for_timeout(2000)
    except PlaywrightTimeout:
        shown = _plain(message.inner_text()) if message.count() else "no AI message"
        raise CheckFailed(
            f"the page does not show crag's sources (no rendered Sources heading within "
            f"{SHOW_TIMEOUT:.0f} s of the run's end); it shows {shown!r}"
        ) from None
    return message


def check_shown(page: Any, stored: dict[str, Any], result: Result) -> None:
    """The page shows the stored answer, a rendered Sources heading and each cited source."""
    extras = stored.get("additional_kwargs") or {}
    result.answer = str(extras.get("answer", ""))
    citations = extras.get("citations") or []
    result.sources = [f"[{c['number']}] {c['title']}" for c in citations]
    message = shown_message(page, with_sources=bool(citations))
    text = _plain(message.inner_text())
    if not result.answer or _plain(result.answer) not in text:
        raise CheckFailed(f"the page does not show crag's answer {result.answer!r}: {text!r}")
    if not citations:
        raise CheckFailed(
            f"crag's answer came with no sources (abstained: {extras.get('abstained')}), so the "
            f"page shows none: {text!r}"
        )
    listed = [_plain(item) for item in message.locator("li").all_inner_texts()]
    for citation in citations:
        title = _plain(str(citation["title"]))[:40]
        if not any(item.startswith(f"[{citation['number']}] {title}") for item in listed):
            raise CheckFailed(
                f"the page does not list crag's source [{citation['number']}] {title!r}: "
                f"its list holds {listed!r}"
            )


def check_in_browser(ui_url: str, server: DevServer, question: str, result: Result) -> None:
    """Ask ``question`` in the app, check what it shows, and take the screenshot.

    On a failure the page is saved beside the logs instead (``failed.png`` of the work folder).
    """
    from playwright.sync_api import Error as PlaywrightError

    missing = chromium_missing()
    if missing:
        raise CheckFailed(missing)
    with headless_chromium() as browser:
        page = None
        try:
            with result.timed("app loaded and signed in"):
                page = open_app(browser, ui_url, server, result)
            with result.timed("answer"):
                thread_id = ask(page, question)
                stored = finished_answer(page, server, thread_id, result)
            check_shown(page, stored, result)
        except (CheckFailed, PlaywrightError) as exc:
            if page is not None:
                page.screenshot(path=str(result.failed_screenshot))
            if isinstance(exc, CheckFailed):
                raise
            raise CheckFailed(f"the browser could not use the app: {exc.message}") from exc
        if result.screenshot:
            page.screenshot(path=result.screenshot)
            size = os.path.getsize(result.screenshot)
            logger.info("screenshot: %s (%d bytes)", result.screenshot, size)


@contextmanager
def crag_server(workdir: Path, store: Path, ui_origin: str, result: Result) -> Iterator[DevServer]:
    """A real crag server (gate, authentication, its own token) that lets ``ui_origin`` in."""
    env = server_environment(workdir, store, ui_origin)
    try:
        with result.timed("crag server start"):
            server = start_dev_server(workdir / "server", env)
    except DevServerError as exc:
        raise CheckFailed(f"the crag server did not start: {exc}") from exc
    try:
        yield server
    finally:
        server.stop()


def check(workdir: Path, question: str, ui_port: int, result: Result) -> None:
    """Every step: the app, the store, the server, ``next dev``, the browser's checks."""
    workdir.mkdir(parents=True, exist_ok=True)
    app = prepare_app(workdir, result)
    store = build_store(workdir, result)
    mock = font_mock(workdir)
    origin = f"http://{HOST}:{ui_port}"
    with (
        crag_server(workdir, store, origin, result) as server,
        next_dev(app, ui_port, mock, result) as ui_url,
    ):
        check_in_browser(ui_url, server, question, result)


def report(result: Result, question: str) -> None:
    """Log what was checked and how long each step took."""
    logger.info("question: %s", question)
    logger.info("answer shown: %s", result.answer)
    for source in result.sources:
        logger.info("source shown: %s", source)
    logger.info("timings (s): %s", json.dumps(result.timings))
    if result.foreign:
        logger.info("requests to other origins, aborted: %s", sorted(set(result.foreign)))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line's options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--workdir",
        type=Path,
        default=DEFAULT_WORKDIR,
        help=f"scratch folder for the app, the store and logs ({DEFAULT_WORKDIR})",
    )
    parser.add_argument("--question", default=QUESTION, help=f"what to ask ({QUESTION!r})")
    parser.add_argument(
        "--screenshot",
        type=Path,
        default=DEFAULT_SCREENSHOT,
        help="where the answer's screenshot goes ('' for none)",
    )
    parser.add_argument(
        "--ui-port", type=int, default=0, help="the app's port (default: a free one)"
    )
    return parser.parse_args(argv)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Run every step and check; 0 when the page shows the answer and its sources, else 1."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    args = parse_args(argv)
    workdir = args.workdir.resolve()
    result = Result(screenshot=str(args.screenshot), failed_screenshot=workdir / "failed.png")
    started = time.monotonic()
    try:
        check(workdir, args.question, args.ui_port or free_port(), result)
    except CheckFailed as exc:
        logger.error("FAILED: %s", exc)
        logger.info("timings (s): %s; logs in %s", json.dumps(result.timings), workdir)
        return 1
    result.timings["total"] = round(time.monotonic() - started, 1)
    report(result, args.question)
    logger.info("OK: Agent Chat UI shows crag's answer and its %d source(s)", len(result.sources))
    return 0


if __name__ == "__main__":
    sys.exit(main())
