"""crag's cluster (``make cluster``) with PostgreSQL, Redis or the Chroma server gone a while.

One cluster for the module (:mod:`tests.cluster.cluster_support`). Before any outage a thread
gets a run and a document is ingested. Each service is then stopped and started again on its
port and data (start.sh's own commands): while it is down a run ends, or a request is refused,
within a bound; once it is back, without restarting a replica, a run on the earlier thread and a
run on a new thread succeed (after PostgreSQL, once a run that fails on its pool's timeout is
sent again), the document is still found, and the thread's runs are all there. A run in flight
when Redis goes finishes; one in flight when PostgreSQL goes ends once it is back.
What the caller reads while a service is down is docs/deployment.md's "Outages".
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from tests.cluster.cluster_support import (
    CLUSTER_MARKS,
    CONTEXT,
    LONG,
    LONG_CONTEXT,
    QUESTION,
    Cluster,
    Service,
    running_cluster,
    start_service,
    state_once_answered,
    stop_service,
    stored_chunk_ids,
    wait_until_ended,
)

logger = logging.getLogger(__name__)

pytestmark = CLUSTER_MARKS

POSTGRES_GONE_MID_RUN = (
    "couldn't get a connection after 30.00 sec",
    "consuming input failed: server closed the connection unexpectedly",
    "flush request failed: server closed the connection unexpectedly",
)
"""How a run in flight when PostgreSQL goes ends (psycopg's words, which Aegra records)."""
REFUSED_WITHIN = 10.0
"""Seconds within which a request sent while a service is down is answered."""
RECOVERED_WITHIN = 180.0
"""Seconds within which runs sent once the service is back succeed. After PostgreSQL, a
replica's first run may wait the 30 s of Aegra's connection pool and fail
(``couldn't get a connection after 30.00 sec``): such a run is sent again."""


@dataclass(frozen=True)
class Before:
    """What was stored before any outage: a thread with one run, a document in the store."""

    thread_id: str
    source: str
    question: str
    painter: str


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster() as started:
        yield started


def client(cluster: Cluster) -> SyncLangGraphClient:
    return get_sync_client(url=cluster.url, api_key=cluster.token, timeout=60)


@pytest.fixture(scope="module")
def before(cluster: Cluster) -> Before:
    api = client(cluster)
    thread_id = api.threads.create()["thread_id"]
    out: Any = api.runs.wait(thread_id, "crag", input=QUESTION, context=CONTEXT)
    assert "Leonardo" in out["answer"], out
    tag = secrets.token_hex(3)
    painter = f"Marisol Okonkwo-{tag}"
    source = f"lighthouse-{tag}"
    text = f"The Quenby lighthouse was painted teal by {painter} in 1931, after a storm."
    ingest = api.threads.create()["thread_id"]
    sent: dict[str, Any] = {"documents": [{"text": text, "source": source}]}
    report: Any = api.runs.wait(ingest, "ingest", input=sent)
    assert report["added"] == [source], report
    return Before(thread_id, source, "Who painted the Quenby lighthouse teal?", painter)


def plain(log: str) -> str:
    """A replica's log without its colours (Aegra's console renderer writes ANSI codes)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", log)


def logged(cluster: Cluster, *words: str) -> list[str]:
    """The replicas' log lines holding every one of ``words`` (each line once)."""
    lines = (plain(cluster.replica_log(number)).splitlines() for number in (1, 2))
    return sorted({line.strip() for log in lines for line in log if all(w in line for w in words)})


def error_message(api: SyncLangGraphClient, thread_id: str, run_id: str) -> str:
    """What Aegra recorded as the run's error ('' if none)."""
    run: Any = api.runs.get(thread_id, run_id)
    return str(run.get("error_message") or "")


def first_success(
    api: SyncLangGraphClient, thread_id: str, question: str, deadline: float
) -> tuple[Any, list[str]]:
    """The first run asking ``question`` on ``thread_id`` that succeeds, sent again while one
    fails (until ``deadline``, a ``time.monotonic()``): its output, and the errors before it."""
    errors: list[str] = []
    while True:
        try:
            out = api.runs.wait(thread_id, "crag", input={"question": question}, context=CONTEXT)
        except Exception as error:  # noqa: BLE001 (a run's error: the SDK's bare Exception)
            errors.append(str(error))
            assert time.monotonic() < deadline, f"no run succeeded in time: {errors}"
            continue
        return out, errors


def assert_recovered(cluster: Cluster, before: Before, service: Service) -> None:
    """Runs succeed again, on the earlier thread and a new one, and nothing stored is lost."""
    api = client(cluster)
    back = time.monotonic()
    deadline = back + RECOVERED_WITHIN
    out, failed = first_success(api, before.thread_id, QUESTION["question"], deadline)
    assert "Leonardo" in out["answer"], out
    first = time.monotonic() - back
    thread_id = api.threads.create()["thread_id"]
    found, failed_new = first_success(api, thread_id, before.question, deadline)
    logger.info("%s back: runs that failed before one succeeded: %s", service, failed + failed_new)
    assert before.source in [passage["source"] for passage in found["documents"]], found
    assert stored_chunk_ids(cluster, [before.source])[before.source], "the document is gone"
    statuses = [run["status"] for run in api.runs.list(before.thread_id, limit=100)]
    assert statuses.count("success") >= 2, statuses
    logger.info("%s back: the earlier thread's runs, newest first: %s", service, statuses)
    assert time.monotonic() - back < RECOVERED_WITHIN
    logger.info(
        "%s back: a run on the earlier thread took %.1f s, both runs %.1f s",
        service,
        first,
        time.monotonic() - back,
    )


def test_chroma_server_gone_a_run_fails_at_once_naming_the_store(
    cluster: Cluster, before: Before
) -> None:
    api = client(cluster)
    stop_service(cluster, "chroma")
    try:
        run = api.runs.create(before.thread_id, "crag", input=QUESTION, context=CONTEXT)
        sent = time.monotonic()
        assert wait_until_ended(api, before.thread_id, run["run_id"], 60) == "error"
        logger.info("chroma down: the run ended in error %.1f s after", time.monotonic() - sent)
        message = error_message(api, before.thread_id, run["run_id"])
        # A replica that has opened the store before reads the collection; one that has only
        # reached the server lists its collections; one that has not asks the server's
        # heartbeat first. Each names the server.
        assert message.startswith(
            (
                "cannot read the vector store's collection",
                "cannot read the Chroma server at",
                "cannot reach the Chroma server at",
            )
        ), message
        assert "Connection refused" in message and "\n" not in message, message
        logged = [plain(cluster.replica_log(number)) for number in (1, 2)]
        assert any(f"StoreError: {message[:40]}" in log for log in logged), message
    finally:
        start_service(cluster, "chroma")
    assert_recovered(cluster, before, "chroma")


def refused(call: Any) -> tuple[int, float]:
    """The HTTP status ``call`` is refused with, and how many seconds that took."""
    sent = time.monotonic()
    with pytest.raises(httpx.HTTPStatusError) as error:
        call()
    return error.value.response.status_code, time.monotonic() - sent


def test_redis_gone_a_new_run_is_refused_at_once(cluster: Cluster, before: Before) -> None:
    api = client(cluster)
    stop_service(cluster, "redis")
    try:
        thread_id = api.threads.create()["thread_id"]  # PostgreSQL alone: still served
        status, seconds = refused(
            lambda: api.runs.create(before.thread_id, "crag", input=QUESTION, context=CONTEXT)
        )
        assert status == 500 and seconds < REFUSED_WITHIN, (status, seconds)
        logger.info("redis down: a new run refused (%d) in %.1f s", status, seconds)
        status, _ = refused(
            lambda: api.runs.wait(thread_id, "crag", input=QUESTION, context=CONTEXT)
        )
        assert status == 500
    finally:
        start_service(cluster, "redis")
    assert_recovered(cluster, before, "redis")
    logger.info("redis back: %s", logged(cluster, "stuck pending"))


def test_postgres_gone_requests_are_refused_at_once(cluster: Cluster, before: Before) -> None:
    api = client(cluster)
    stop_service(cluster, "postgres")
    try:
        status, seconds = refused(lambda: api.threads.create())
        assert status == 500 and seconds < REFUSED_WITHIN, (status, seconds)
        status, seconds = refused(
            lambda: api.runs.create(before.thread_id, "crag", input=QUESTION, context=CONTEXT)
        )
        assert status == 500 and seconds < REFUSED_WITHIN, (status, seconds)
        logger.info("postgres down: a new run refused (%d) in %.1f s", status, seconds)
    finally:
        start_service(cluster, "postgres")
    assert_recovered(cluster, before, "postgres")


def run_in_flight(cluster: Cluster) -> tuple[SyncLangGraphClient, str, str]:
    """A long run on a new thread, once a replica executes it: (client, thread, run)."""
    api = client(cluster)
    thread_id = api.threads.create()["thread_id"]
    run = api.runs.create(thread_id, "crag", input=LONG, context=LONG_CONTEXT)
    cluster.executor(run["run_id"])
    return api, thread_id, run["run_id"]


def test_a_run_in_flight_when_redis_goes_finishes(cluster: Cluster, before: Before) -> None:
    """The run ends, and is recorded: a success, or (seen once, with the rest of the suite
    loading both cores) an error with its message; the cluster then recovers."""
    api, thread_id, run_id = run_in_flight(cluster)
    stop_service(cluster, "redis")
    try:
        logger.info("redis stopped, the run %s", cluster.run_row(run_id)[0])
        status = wait_until_ended(api, thread_id, run_id, 120)
    finally:
        start_service(cluster, "redis")
    message = error_message(api, thread_id, run_id)
    logger.info("redis gone mid-run: %s %s", status, message)
    assert status in ("success", "error"), status
    out = state_once_answered(api, thread_id, 90)
    if status == "success":
        assert out["answer"], out
    else:
        assert message, "an error without its message"
    assert_recovered(cluster, before, "redis")


def test_a_run_in_flight_when_postgres_goes_ends_once_it_is_back(
    cluster: Cluster, before: Before
) -> None:
    """The run's checkpoint writes wait the pool's 30 s; its end is recorded once PostgreSQL
    is back: an error naming the lost database (or a success, had it written its last
    checkpoint first). Which error depends on where the run was when PostgreSQL went: waiting
    for a connection (the pool's timeout) or reading from one (the connection closed)."""
    api, thread_id, run_id = run_in_flight(cluster)
    stop_service(cluster, "postgres")
    stopped = time.monotonic()
    try:
        time.sleep(35)
    finally:
        start_service(cluster, "postgres")
    status = wait_until_ended(api, thread_id, run_id, 90)
    message = error_message(api, thread_id, run_id)
    logger.info(
        "postgres gone mid-run: %s %.1f s after the stop: %s",
        status,
        time.monotonic() - stopped,
        message,
    )
    assert status in ("error", "success"), status
    if status == "error":
        assert message.startswith(POSTGRES_GONE_MID_RUN), message
    assert_recovered(cluster, before, "postgres")
    logger.info("postgres back: %s", logged(cluster, ".py:", " in "))
