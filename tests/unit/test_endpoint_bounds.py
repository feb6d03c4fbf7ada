"""The model-server client's bounds, against a **fake** server that misbehaves on purpose.

No real server misbehaves this way on demand: a stream without end (tokens as fast as the
socket takes them), an event of megabytes, a stream closed cleanly mid-answer, a tool call or
no choices instead of text, a model list sent one byte at a time or of many megabytes. So
tests/model_server.py's FakeModelServer plays them. What crag must do: stop reading once a
reply is past what it asked for (and close the connection), bound the whole stream by
``llm_timeout``, bound the context-length probe in time and size and let a cancelled run
abandon it, and report a reply that is no answer as one line naming the endpoint.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Generator
from typing import Any, cast

import pytest
from langchain_core.documents import Document
from langchain_core.messages import HumanMessage
from langgraph.runtime import Runtime

from crag.core.cancellation import RunCancelledError, cancellation_scope
from crag.generator import endpoint as endpoint_module
from crag.generator.endpoint import (
    MAX_REPLY_BYTES,
    PROBE_BYTES,
    EndpointChatModel,
    estimate_tokens,
    reply_allowance,
)
from crag.generator.endpoint_config import EndpointConfig, EndpointError
from crag.generator.endpoint_loop import HANDOVER_ITEMS, stream_cancellable
from crag.nodes.generate import generate
from crag.settings.run_settings import RunSettings
from tests.fakes import MONA_LISA, FakeComponents, FixedScoreEvaluator, StaticStore, app_components
from tests.model_server import FakeModelServer, Reply, chunk, completion, streamed

QUESTION = [HumanMessage("Who painted the Mona Lisa?")]
MAX_NEW_TOKENS = 8
TOOL_CALL = {
    "index": 0,
    "id": "call-1",
    "type": "function",
    "function": {"name": "search", "arguments": '{"q": "Mona Lisa"}'},
}


def model_on(
    server: FakeModelServer, max_new_tokens: int = MAX_NEW_TOKENS, **settings: Any
) -> EndpointChatModel:
    values: dict[str, Any] = {"model": "fake", "timeout": 10.0, "max_retries": 0}
    values.update(settings)
    return EndpointChatModel.for_endpoint(
        EndpointConfig(server.base_url, **values), max_new_tokens=max_new_tokens
    )


def streamed_text(model: EndpointChatModel, give_up_after: float = 20.0) -> str:
    """The text ``model.stream`` yields; fails if it runs past ``give_up_after`` seconds."""
    start, texts = time.monotonic(), []
    for piece in model.stream(QUESTION):
        texts.append(piece.text)
        assert time.monotonic() - start < give_up_after, "the stream did not stop"
    return "".join(texts)


def one_line_naming(caught: pytest.ExceptionInfo[EndpointError], server: FakeModelServer) -> str:
    message = str(caught.value)
    assert "\n" not in message and server.base_url in message, message
    return message


def completion_body(**message: Any) -> str:
    """A chat completion whose message is ``message`` (null content, tool calls, ...)."""
    body = json.loads(completion(""))
    body["choices"][0]["message"] = {"role": "assistant", **message}
    return json.dumps(body)


# -- a reply stops at what was asked for ------------------------------------------------------


def test_an_endless_stream_stops_at_the_tokens_asked_for(caplog: pytest.LogCaptureFixture) -> None:
    endless = Reply(events=[chunk("The answer is ")], endless=chunk("more "))
    with FakeModelServer(default=endless) as server:
        start = time.monotonic()
        text = streamed_text(model_on(server, timeout=30))
        took = time.monotonic() - start
        assert server.hung_up.wait(5), "the connection was not closed"
    assert text.startswith("The answer is more ")
    assert estimate_tokens(text) <= reply_allowance(MAX_NEW_TOKENS)
    assert took < 5
    assert "ran past the" in caplog.text and "crag stopped reading it" in caplog.text


def test_a_stream_of_empty_events_without_end_stops_too() -> None:
    endless = Reply(events=[], endless=chunk(""))
    with FakeModelServer(default=endless) as server:
        assert streamed_text(model_on(server, timeout=30)) == ""
        assert server.hung_up.wait(5)


def test_a_fast_stream_is_bounded_by_the_timeout() -> None:
    # Asked for a million tokens, the endless stream stays within what was asked for: only the
    # deadline can end it (LangChain's per-chunk wait_for used to swallow its cancellation).
    endless = Reply(events=[chunk("The answer is ")], endless=chunk("more "))
    with FakeModelServer(default=endless) as server:
        model = model_on(server, max_new_tokens=1_000_000, timeout=1.0)
        start = time.monotonic()
        with pytest.raises(EndpointError) as caught:
            streamed_text(model)
        took = time.monotonic() - start
    assert caught.value.kind == "timeout"
    assert "did not answer within 1 s (CRAG_LLM_TIMEOUT)" in one_line_naming(caught, server)
    assert took < 4


def test_a_reader_slower_than_the_stream_still_meets_the_timeout() -> None:
    # The server fills the hand-over queue while the reader dawdles: the deadline used to cancel
    # the stream there, ending it without a word, and the reader waited for ever.
    endless = Reply(events=[chunk("The answer is ")], endless=chunk("more "))
    with FakeModelServer(default=endless) as server:
        model = model_on(server, max_new_tokens=1_000_000, timeout=1.0)
        outcome: list[BaseException] = []

        def read_slowly() -> None:
            try:
                for _ in model.stream(QUESTION):
                    time.sleep(0.02)
            except EndpointError as exc:
                outcome.append(exc)

        reader = threading.Thread(target=read_slowly, daemon=True)
        reader.start()
        reader.join(15)
        assert not reader.is_alive(), "the reader was left waiting"
    assert [getattr(exc, "kind", None) for exc in outcome] == ["timeout"]


def test_one_huge_delta_is_cut_to_what_was_asked() -> None:
    with FakeModelServer(default=streamed("x" * 1_000_000)) as server:
        text = streamed_text(model_on(server))
    assert 0 < estimate_tokens(text) <= reply_allowance(MAX_NEW_TOKENS)
    assert set(text) == {"x"}


def test_a_whole_reply_is_cut_to_what_was_asked(caplog: pytest.LogCaptureFixture) -> None:
    with FakeModelServer(default=Reply(text="word " * 200_000)) as server:
        reply = model_on(server).invoke(QUESTION)
    assert 0 < estimate_tokens(reply.text) <= reply_allowance(MAX_NEW_TOKENS)
    assert "crag cut it there" in caplog.text


@pytest.mark.parametrize("streaming", [True, False])
def test_a_reply_of_more_than_the_size_cap_is_not_read(streaming: bool) -> None:
    huge = "x" * (3 * MAX_REPLY_BYTES)  # more than the socket buffers hold past the cap
    reply = streamed(huge) if streaming else Reply(text=huge)
    with FakeModelServer(default=reply) as server:
        model = model_on(server)
        with pytest.raises(EndpointError) as caught:
            streamed_text(model) if streaming else model.invoke(QUESTION)
        assert server.hung_up.wait(5), "the connection was not closed"
        assert server.sent < len(huge)
    assert caught.value.kind == "malformed"
    assert "sent a reply of more than 8 MiB" in one_line_naming(caught, server)
    assert len(server.requests) == 1  # not retried


# -- an unfinished or unusable reply is a failure ------------------------------------------------


def test_a_stream_closed_without_a_finish_reason_is_cut_short() -> None:
    cut = Reply(events=[chunk("The answer"), chunk(" is ")], done=False)
    with FakeModelServer(default=cut) as server, pytest.raises(EndpointError) as caught:
        streamed_text(model_on(server))
    assert caught.value.kind == "disconnected"  # as a connection reset mid-answer
    assert "closed the connection mid-answer, after 2 tokens" in one_line_naming(caught, server)


def test_a_finish_reason_in_an_event_without_a_delta_finishes_the_stream() -> None:
    last = json.loads(chunk(None, "stop"))
    del last["choices"][0]["delta"]
    last["choices"][0]["delta"] = None
    finished = Reply(events=[chunk("Leonardo."), json.dumps(last)])
    with FakeModelServer(default=finished) as server:
        assert streamed_text(model_on(server)) == "Leonardo."


TOOL_EVENTS = [chunk(None, tool_calls=[TOOL_CALL]), chunk(None, "tool_calls")]
NO_CHOICES = {**json.loads(completion("")), "choices": []}
NO_TEXT = [
    (Reply(events=TOOL_EVENTS), "replied with a tool call, not text"),
    (
        Reply(body=completion_body(content=None, tool_calls=[TOOL_CALL])),
        "replied with a tool call, not text",
    ),
    (
        Reply(events=[json.dumps({"object": "chat.completion.chunk", "choices": []})]),
        "replied with no choices",
    ),
    (Reply(events=[json.dumps({"status": "warming up"})] * 3), "replied with no choices"),
    (Reply(body=json.dumps(NO_CHOICES)), "replied with no choices"),
]


@pytest.mark.parametrize(
    ("reply", "said"),
    NO_TEXT,
    ids=["streamed tool call", "tool call", "streamed no choices", "streamed junk", "no choices"],
)
def test_a_reply_without_text_is_one_line(reply: Reply, said: str) -> None:
    with FakeModelServer(default=reply) as server, pytest.raises(EndpointError) as caught:
        model = model_on(server)
        streamed_text(model) if reply.events is not None else model.invoke(QUESTION)
    assert caught.value.kind == "malformed"
    assert said in one_line_naming(caught, server)


def generate_on(server: FakeModelServer, streaming: bool = False) -> Any:
    """The generate node's update, its answer from ``server`` (one passage of knowledge)."""
    passage = {"text": MONA_LISA, "source": "d", "chunk": 0, "origin": "internal", "score": 0.9}
    model = model_on(server)
    model.streaming = streaming  # invoke streams, as under LangGraph's messages mode
    components = FakeComponents(store=None, scorer=None, chat=model)
    state: Any = {"question": "Who painted it?", "internal_knowledge": [passage]}
    return generate(state, Runtime(context=RunSettings()), components)


@pytest.mark.parametrize(
    "reply",
    [
        Reply(events=[chunk(None), chunk(None, "stop")]),
        Reply(body=completion_body(content=None)),
        Reply(text="  "),
    ],
    ids=["streamed null content", "null content", "blank"],
)
def test_the_generator_fails_on_an_empty_answer(reply: Reply) -> None:
    with FakeModelServer(default=reply) as server, pytest.raises(EndpointError) as caught:
        generate_on(server, streaming=reply.events is not None)
    assert caught.value.kind == "malformed"
    assert "replied with an empty answer (finish reason 'stop')" in one_line_naming(caught, server)


def test_the_generator_never_raises_index_error_on_no_choices() -> None:
    empty = Reply(body=json.dumps(NO_CHOICES))
    with FakeModelServer(default=empty) as server, pytest.raises(EndpointError) as caught:
        generate_on(server)
    assert "replied with no choices" in one_line_naming(caught, server)


def crag_ask(server: FakeModelServer, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``crag ask`` (in this process) with its generator on ``server``; code, stdout, stderr."""
    from crag.app.cli.commands import main

    store = StaticStore([Document(page_content=MONA_LISA, metadata={"source": "d", "chunk": 0})])
    components = FakeComponents(store, FixedScoreEvaluator({"Mona": 0.9}), model_on(server))
    with app_components(components):
        code = main(["ask", "Who painted the Mona Lisa?"])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (Reply(events=[chunk("The answer is ")], done=False), "closed the connection mid-answer"),
        (Reply(events=TOOL_EVENTS), "replied with a tool call, not text"),
        (Reply(events=[chunk(None), chunk(None, "stop")]), "replied with an empty answer"),
    ],
    ids=["cut short", "tool call", "null content"],
)
def test_crag_ask_reports_an_unusable_reply_in_one_line(
    reply: Reply, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeModelServer(default=reply) as server:
        code, _, err = crag_ask(server, capsys)
    last = err.strip().splitlines()[-1]
    assert code == 2, err
    assert last.startswith("crag: error: the model server ") and said in last
    assert server.base_url in last and "Traceback" not in err


# -- the stream's hand-over to the reading thread ----------------------------------------------


def test_a_fast_stream_waits_for_its_reader() -> None:
    made = 0

    async def endless() -> AsyncIterator[int]:
        nonlocal made
        while True:
            made += 1
            yield made
            await asyncio.sleep(0)

    items = cast(Generator[int, None, None], stream_cancellable(endless))
    for _ in range(3):
        next(items)
        time.sleep(0.2)  # a slow reader
    items.close()
    assert made <= HANDOVER_ITEMS + 5


def test_a_cancelled_run_stops_a_stream_whose_items_keep_coming() -> None:
    async def endless() -> AsyncIterator[int]:
        while True:
            yield 1
            await asyncio.sleep(0)

    taken = 0
    with pytest.raises(RunCancelledError), cancellation_scope() as token:
        for _ in stream_cancellable(endless):
            taken += 1
            if taken == 5:
                token.cancel()
            assert taken < 100_000, "the cancelled stream went on"
    assert taken < 10


# -- the context-length probe -------------------------------------------------------------------


def test_a_model_list_sent_a_byte_at_a_time_is_given_up_within_the_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    drip = Reply(body=json.dumps({"data": [{"id": "fake", "max_model_len": 4096}]}), drip=0.2)
    with FakeModelServer(models_reply=drip) as server:
        start = time.monotonic()
        assert model_on(server, timeout=1.0).context_length is None
        took = time.monotonic() - start
    assert took < 2.5  # one deadline for the probe, never beyond llm_timeout
    assert "gave up asking its context length" in caplog.text
    assert "CRAG_LLM_CONTEXT_LENGTH" in caplog.text


def test_the_probe_has_a_deadline_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(endpoint_module, "PROBE_SECONDS", 1.0)
    drip = Reply(body=json.dumps({"data": [{"id": "fake", "max_model_len": 4096}]}), drip=0.2)
    with FakeModelServer(models_reply=drip) as server:
        start = time.monotonic()
        assert model_on(server, timeout=60).context_length is None
        assert time.monotonic() - start < 2.5


def test_a_cancelled_run_abandons_the_probe_at_once() -> None:
    drip = Reply(body=json.dumps({"data": [{"id": "fake", "max_model_len": 4096}]}), drip=0.5)
    with FakeModelServer(models_reply=drip) as server:
        model = model_on(server, timeout=60)
        start = time.monotonic()
        with pytest.raises(RunCancelledError), cancellation_scope() as token:
            threading.Timer(0.3, token.cancel).start()
            model.context_length  # noqa: B018 - the probe
        assert time.monotonic() - start < 1.5
        assert server.hung_up.wait(5), "the probe's connection was not closed"


def test_a_huge_model_list_is_not_read_whole(caplog: pytest.LogCaptureFixture) -> None:
    listed = json.dumps({"data": [{"id": "fake", "max_model_len": 4096}]})
    huge = Reply(body=listed, padding=64 * PROBE_BYTES)
    with FakeModelServer(models_reply=huge) as server:
        model = model_on(server)
        assert model.context_length is None
        assert model.context_length is None  # asked once
        assert server.hung_up.wait(5), "the probe's connection was not closed"
        assert server.sent < 32 * PROBE_BYTES
    gave_up = [r for r in caplog.records if "gave up asking its context length" in r.message]
    assert len(gave_up) == 1 and "over 1 MiB" in gave_up[0].message


@pytest.mark.skipif(os.name != "posix", reason="sends SIGTERM to this process")
def test_sigterm_during_the_probe_ends_crag_ask(capsys: pytest.CaptureFixture[str]) -> None:
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # as in a fresh `crag` process
    drip = Reply(body=json.dumps({"data": [{"id": "fake", "max_model_len": 4096}]}), drip=1.0)
    terminated_at: list[float] = []
    with FakeModelServer(models_reply=drip) as server:

        def terminate() -> None:
            if server.models_asked.wait(30):
                terminated_at.append(time.monotonic())
                os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=terminate, daemon=True).start()
        code, _, err = crag_ask(server, capsys)
        returned_at = time.monotonic()
    assert terminated_at, "the probe never asked for the model list"
    assert code == 143, err
    assert err.strip().splitlines()[-1] == "crag: terminated"
    assert returned_at - terminated_at[0] < 2


def test_the_probe_still_reads_a_model_list() -> None:
    with FakeModelServer(models=[{"id": "fake", "max_model_len": 4096}]) as server:
        assert model_on(server).context_length == 4096
