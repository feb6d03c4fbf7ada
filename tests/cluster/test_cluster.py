"""crag on two Aegra replicas behind nginx (``make cluster``, docs/deployment.md), for real.

One cluster for the module (:mod:`tests.cluster.cluster_support`): PostgreSQL, Redis, a Chroma
server holding the default corpus, two replicas, nginx. Driven with langgraph-sdk, as a team's
program would: a thread made on one replica runs on the other, a stream is joined and a run
cancelled from the replica that does not execute it, members stay apart through nginx, two runs
sent to one thread through both replicas at once run one after the other (crag's per-thread
lock), a run whose replica is killed mid-run finishes on the survivor (the replica is then
started again), the chat page in headless Chromium through nginx shows its answer when the
replica it streams from, or the one executing its run, is killed, and an ingest whose replica
is killed finishes on the survivor, each document stored once (the last test: it leaves one
replica). Skipped only where the Python 3.12 environment Aegra needs was not built
(``scripts/install_cluster.sh``, which ``make test`` runs).
"""

from __future__ import annotations

import logging
import os
import random
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from crag.vectorstore.ingest import split_text
from crag.vectorstore.records import chunk_id
from tests.browser_support import browser, chromium_missing, open_page
from tests.cluster.cluster_support import (
    CLUSTER_MARKS,
    CONTEXT,
    LONG,
    LONG_CONTEXT,
    QUESTION,
    VENV,
    Cluster,
    running_cluster,
    stored_chunk_ids,
    wait_until_ended,
)

logger = logging.getLogger(__name__)

pytestmark = CLUSTER_MARKS


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster() as started:
        yield started


def client(url: str, key: str) -> SyncLangGraphClient:
    return get_sync_client(url=url, api_key=key)


def answer_of(api: SyncLangGraphClient, thread_id: str) -> str:
    values: Any = api.threads.get_state(thread_id)["values"]
    return str(values.get("answer", ""))


def test_thread_made_on_one_replica_runs_on_the_other(cluster: Cluster) -> None:
    one = client(cluster.replica_url(1), cluster.token)
    two = client(cluster.replica_url(2), cluster.token)
    thread = one.threads.create()
    out: Any = two.runs.wait(thread["thread_id"], "crag", input=QUESTION, context=CONTEXT)
    assert out["action"] == "correct", out
    assert "Leonardo" in out["answer"], out["answer"]
    runs = one.runs.list(thread["thread_id"])
    assert [run["status"] for run in runs] == ["success"]
    balanced = client(cluster.url, cluster.token)
    assert answer_of(balanced, thread["thread_id"]) == out["answer"]


def test_a_stream_through_nginx_and_one_joined_on_the_other_replica(cluster: Cluster) -> None:
    balanced = client(cluster.url, cluster.token)
    thread_id = balanced.threads.create()["thread_id"]
    streamed = list(
        balanced.runs.stream(
            thread_id, "crag", input=QUESTION, context=CONTEXT, stream_mode="updates"
        )
    )
    nodes = [next(iter(part.data)) for part in streamed if part.event == "updates"]
    assert nodes[0] == "retrieve" and nodes[-1] == "generate", nodes
    run = balanced.runs.create(
        thread_id, "crag", input=LONG, context=LONG_CONTEXT, stream_mode="updates"
    )
    executor = cluster.executor(run["run_id"])
    other = client(cluster.replica_url(3 - executor), cluster.token)
    joined = list(other.runs.join_stream(thread_id, run["run_id"], stream_mode="updates"))
    assert any(part.event == "updates" and "generate" in part.data for part in joined), joined
    assert wait_until_ended(other, thread_id, run["run_id"], 120) == "success"
    assert answer_of(other, thread_id)


def test_a_cancel_sent_to_the_replica_not_executing_the_run(cluster: Cluster) -> None:
    balanced = client(cluster.url, cluster.token)
    thread_id = balanced.threads.create()["thread_id"]
    run = balanced.runs.create(thread_id, "crag", input=LONG, context=LONG_CONTEXT)
    executor = cluster.executor(run["run_id"])
    other = client(cluster.replica_url(3 - executor), cluster.token)
    sent = time.monotonic()
    other.runs.cancel(thread_id, run["run_id"])
    assert wait_until_ended(other, thread_id, run["run_id"], 30) == "interrupted"
    logger.info(
        "cancel on replica %d of a run on %d: %.1f s",
        3 - executor,
        executor,
        time.monotonic() - sent,
    )


def add_member(cluster: Cluster, name: str) -> str:
    """Make an account with ``crag users`` in the cluster's database; its API key."""
    made = subprocess.run(
        [str(VENV / "bin" / "crag"), "users", "add", name, "--password-stdin"],
        env={**os.environ, "CRAG_THREADS_DB": cluster.threads_db},
        input=secrets.token_urlsafe(16),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def test_members_stay_apart_through_nginx(cluster: Cluster) -> None:
    alice = client(cluster.url, add_member(cluster, "alice"))
    bob = client(cluster.url, add_member(cluster, "bob"))
    thread = alice.threads.create()
    assert (thread["metadata"] or {})["owner"] == "alice"
    out: Any = alice.runs.wait(thread["thread_id"], "crag", input=QUESTION, context=CONTEXT)
    assert "Leonardo" in out["answer"], out["answer"]
    for _ in range(4):  # through nginx: both replicas answer in turn
        with pytest.raises(httpx.HTTPStatusError) as refused:
            bob.threads.get(thread["thread_id"])
        assert refused.value.response.status_code == 404
    assert bob.threads.search() == []
    assert [t["thread_id"] for t in alice.threads.search()] == [thread["thread_id"]]


def test_feedback_on_a_members_run_is_recorded_by_either_replica(cluster: Cluster) -> None:
    fay_key, gus_key = add_member(cluster, "fay"), add_member(cluster, "gus")
    fay = client(cluster.url, fay_key)
    thread_id = fay.threads.create()["thread_id"]
    out: Any = fay.runs.wait(thread_id, "crag", input=QUESTION, context=CONTEXT)
    given = {"thread_id": thread_id, "verdict": "good", "expected": "Leonardo da Vinci"}
    answered = []
    for number in (1, 2):  # Aegra's threads, read on each replica: recorded, then replaced
        answered.append(
            httpx.post(
                f"{cluster.replica_url(number)}/crag/feedback",
                json=given,
                headers={"X-Api-Key": fay_key},
                timeout=60,
            )
        )
    assert [r.status_code for r in answered] == [201, 200], answered[0].text
    record = answered[1].json()
    assert record["owner"] == "fay" and record["thread_id"] == thread_id
    assert record["record"]["question"] == QUESTION["question"]
    assert record["record"]["answer"] == out["answer"]
    refused = httpx.post(
        f"{cluster.url}/crag/feedback", json=given, headers={"X-Api-Key": gus_key}, timeout=60
    )
    assert refused.status_code == 404, refused.text
    assert refused.json()["detail"] == f"there is no thread {thread_id!r} of yours"
    listed = httpx.get(f"{cluster.url}/crag/feedback", headers={"X-Api-Key": fay_key}, timeout=60)
    assert [f["id"] for f in listed.json()["feedback"]] == [record["id"]]


SHARED = {"web_search": False, "max_new_tokens": 256}
"""Long enough that two runs started at once would overlap, were nothing to queue them."""


def checkpoints_by_run(api: SyncLangGraphClient, thread_id: str) -> list[tuple[str, str, str]]:
    """The thread's checkpoints, oldest first: (run id, checkpoint id, parent checkpoint id)."""
    history: list[Any] = api.threads.get_history(thread_id, limit=200)
    ordered = sorted(history, key=lambda state: str(state["created_at"]))
    return [
        (
            str((state["metadata"] or {}).get("run_id", "")),
            str(state["checkpoint"]["checkpoint_id"]),
            str((state["parent_checkpoint"] or {}).get("checkpoint_id", "")),
        )
        for state in ordered
    ]


def test_one_thread_sent_to_both_replicas_at_once_runs_one_run_then_the_other(
    cluster: Cluster,
) -> None:
    """Two runs on one thread, created at the same moment on replica 1 and on replica 2.

    Without the per-thread lock both would run at once (Aegra enforces no
    ``multitask_strategy``): both would start from the thread's empty state and their
    checkpoints would interleave. With it, the second waits, then starts from the first's end.
    """
    apis = [client(cluster.replica_url(number), cluster.token) for number in (1, 2)]
    thread_id = apis[0].threads.create()["thread_id"]
    with ThreadPoolExecutor(2) as pool:
        made = [
            pool.submit(api.runs.create, thread_id, "crag", input=LONG, context=SHARED)
            for api in apis
        ]
        run_ids = [str(future.result()["run_id"]) for future in made]
    for api, run_id in zip(apis, run_ids, strict=True):
        assert wait_until_ended(api, thread_id, run_id, 300) == "success"
    checkpoints = checkpoints_by_run(apis[0], thread_id)
    order = [run for run, _, _ in checkpoints]
    assert set(order) == set(run_ids), checkpoints
    first, second = order[0], order[-1]
    assert order == sorted(order, key=lambda run: run != first), f"interleaved: {order}"
    last_of_first = [cid for run, cid, _ in checkpoints if run == first][-1]
    first_of_second = next(parent for run, _, parent in checkpoints if run == second)
    assert first_of_second == last_of_first, "the second run did not start from the first's end"
    waited = f"a run on thread {thread_id} waits for the thread's running run to finish"
    assert any(waited in cluster.replica_log(number) for number in (1, 2)), waited
    runs = {run["run_id"]: run for run in apis[1].runs.list(thread_id)}
    assert str(runs[second]["updated_at"]) > str(runs[first]["updated_at"])


def test_a_run_whose_replica_is_killed_finishes_on_the_survivor(cluster: Cluster) -> None:
    balanced = client(cluster.url, cluster.token)
    thread_id = balanced.threads.create()["thread_id"]
    run = balanced.runs.create(thread_id, "crag", input=LONG, context=LONG_CONTEXT)
    victim = cluster.executor(run["run_id"])
    os.kill(cluster.replica_pid(victim), signal.SIGKILL)
    killed = time.monotonic()
    survivor = client(cluster.replica_url(3 - victim), cluster.token)
    assert wait_until_ended(survivor, thread_id, run["run_id"], 240) == "success"
    seconds = time.monotonic() - killed
    logger.info(
        "replica %d killed mid-run: the run succeeded on the other %.1f s later", victim, seconds
    )
    status, claimed = cluster.run_row(run["run_id"])
    assert status == "success"
    assert f"-{cluster.replica_pid(victim)}-worker" not in claimed
    assert answer_of(balanced, thread_id), "the run ended with no answer"
    cluster.restart_replica(victim)
    restarted = client(cluster.replica_url(victim), cluster.token)
    fresh = restarted.threads.create()["thread_id"]
    again: Any = restarted.runs.wait(fresh, "crag", input=QUESTION, context=CONTEXT)
    assert "Leonardo" in again["answer"], again


def replica_behind(cluster: Cluster, upstream: str) -> int:
    """The replica (1, 2, ...) at ``upstream``, the address nginx's X-Upstream header names."""
    return int(upstream.rsplit(":", 1)[1]) - cluster.port - 10


@pytest.mark.parametrize("victim", ["streaming", "executing"])
def test_the_page_through_nginx_shows_the_answer_when_a_replica_dies_mid_stream(
    cluster: Cluster, victim: str
) -> None:
    """The chat page in headless Chromium, through nginx; a replica killed once tokens show.

    The page streams the run from one replica (nginx's X-Upstream header names it) while a
    worker of one replica executes it (Aegra's runs table names it). Killed: the replica the
    page streams from (the SDK reconnects through nginx to the other, from the last event it
    saw), or the one executing the run (the survivor runs it again, and the page's stream
    carries on). They are the same replica about half the time: then both happen. Either way
    the page shows the finished answer, the one the thread's state holds, with no error.
    """
    missing = chromium_missing()
    assert not missing, missing
    with browser() as chromium:
        page, watch = open_page(chromium, cluster.url, token=cluster.token)
        requests: list[str] = []
        page.on("request", lambda request: requests.append(f"{request.method} {request.url}"))
        page.locator("#toggle-settings").click()
        page.locator("#setting-web_search").uncheck()
        page.locator("#setting-max_new_tokens").fill("1024")
        with page.expect_response(lambda response: "/runs/stream" in response.url) as streamed:
            page.locator("#question").fill(LONG["question"])
            page.locator("#question").press("Enter")
        headers = streamed.value.headers
        thread_id, run_id = headers["content-location"].split("/")[2::2]
        streaming = replica_behind(cluster, headers["x-upstream"])
        answer = page.locator(".answer.graph-crag")
        answer.locator(".answer-text:not(:empty)").wait_for(timeout=240_000)
        executing = cluster.executor(run_id)
        killed_replica = streaming if victim == "streaming" else executing
        os.kill(cluster.replica_pid(killed_replica), signal.SIGKILL)
        killed = time.monotonic()
        answer.locator(".correction, .answer-error").first.wait_for(timeout=300_000)
        shown = time.monotonic() - killed
        assert answer.locator(".answer-error").count() == 0, answer.inner_text()
        survivor = client(cluster.replica_url(3 - killed_replica), cluster.token)
        stored = answer_of(survivor, thread_id)
        shown_text = answer.locator(".answer-text").inner_text()
        assert stored and stored.split()[:8] == shown_text.split()[:8], (stored, shown_text)
        assert page.locator("#error").inner_text() == ""
        assert not watch.foreign, watch.foreign
    rejoined = f"GET {cluster.url}/threads/{thread_id}/runs/{run_id}/stream"
    if killed_replica == streaming:
        assert any(request.startswith(rejoined) for request in requests), requests
    logger.info(
        "page streaming from replica %d, run executing on %d, replica %d killed: "
        "the answer shown %.1f s later",
        streaming,
        executing,
        killed_replica,
        shown,
    )
    assert str(survivor.runs.get(thread_id, run_id)["status"]) == "success"
    cluster.restart_replica(killed_replica)


WORDS = (
    "harbour lantern granite orchard meridian copper falcon quarry willow ember tundra basalt "
    "cedar lagoon saffron beacon glacier thistle marble canyon"
).split()


def many_documents(count: int) -> list[dict[str, str]]:
    """``count`` inline documents of about 900 characters, each its own text and source."""
    tag = secrets.token_hex(4)
    chooser = random.Random(tag)
    documents = []
    for number in range(count):
        sentences = [
            " ".join(chooser.choice(WORDS) for _ in range(12)).capitalize() + "." for _ in range(10)
        ]
        text = f"Survey {tag}-{number}. " + " ".join(sentences)
        documents.append({"text": text, "source": f"survey-{tag}-{number}"})
    return documents


INGEST_CONTEXT = {"chunk_size": 200, "chunk_overlap": 20}
"""Small chunks: about 5 per document, so a run writes several batches of 512."""


def test_an_ingest_whose_replica_is_killed_finishes_on_the_survivor_storing_once(
    cluster: Cluster,
) -> None:
    """The last test: it leaves one replica.

    The replica is killed once the run has written its first batch of chunks and before its
    last (checked in the Chroma server): mid-ingest, some documents whole, one perhaps half
    written. The survivor runs the node again; each document ends up stored once.
    """
    documents = many_documents(220)
    sources = [doc["source"] for doc in documents]
    expected = {doc["source"]: len(split_text(doc["text"], 200, 20)) for doc in documents}
    total = sum(expected.values())
    balanced = client(cluster.url, cluster.token)
    thread_id = balanced.threads.create()["thread_id"]
    sent: dict[str, Any] = {"documents": documents}
    run = balanced.runs.create(thread_id, "ingest", input=sent, context=INGEST_CONTEXT)
    victim = cluster.executor(run["run_id"], timeout=120)
    deadline = time.monotonic() + 240
    while not any(stored_chunk_ids(cluster, sources).values()):
        assert time.monotonic() < deadline, "no chunk written in 240 s"
        time.sleep(0.2)
    os.kill(cluster.replica_pid(victim), signal.SIGKILL)
    killed = time.monotonic()
    at_kill = stored_chunk_ids(cluster, sources)
    partial = sum(len(ids) for ids in at_kill.values())
    halves = [s for s, ids in at_kill.items() if ids and chunk_id(s, 0) not in ids]
    logger.info(
        "replica %d killed with %d of %d chunks written, %d document(s) half written",
        victim,
        partial,
        total,
        len(halves),
    )
    assert 0 < partial < total
    survivor = client(cluster.replica_url(3 - victim), cluster.token)
    assert wait_until_ended(survivor, thread_id, run["run_id"], 420) == "success"
    logger.info(
        "the ingest succeeded on the survivor %.1f s after the kill", time.monotonic() - killed
    )
    report: Any = survivor.threads.get_state(thread_id)["values"]
    assert report["failed"] == [], report["failed"]
    assert sorted(report["added"] + report["skipped"]) == sorted(sources), report["summary"]
    stored = stored_chunk_ids(cluster, sources)
    for source in sources:
        wanted = sorted(chunk_id(source, index) for index in range(expected[source]))
        assert sorted(stored[source]) == wanted, source
