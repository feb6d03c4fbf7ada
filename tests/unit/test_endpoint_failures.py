"""The model server's failures that no real server produces on demand, against a **fake**.

tests/model_server.py's FakeModelServer answers from a script: 429 and 503 with Retry-After,
a reply that is not JSON, a 401, a context-length refusal, an answer that never comes. What a
real server can produce (answers, streaming, a wrong model name, a killed server, a timeout)
is tested against ``transformers serve`` in tests/integration/test_model_server.py.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from langchain_core.messages import HumanMessage
from pydantic import SecretStr

from crag.core.cancellation import RunCancelledError, cancellation_scope
from crag.generator.endpoint import EndpointChatModel
from crag.generator.endpoint_config import EndpointConfig, EndpointError
from tests.model_server import FakeModelServer, Reply

KEY = "sk-test-0123456789abcdef"
QUESTION = [HumanMessage("Is the sky blue?")]


def model_on(server: FakeModelServer, **settings: object) -> EndpointChatModel:
    values: dict[str, object] = {"model": "fake", "timeout": 5.0, "max_retries": 2}
    values.update(settings)
    config = EndpointConfig(server.base_url, **values)  # type: ignore[arg-type]
    return EndpointChatModel.for_endpoint(config, max_new_tokens=8)


def test_a_429_is_retried_after_its_retry_after() -> None:
    busy = Reply(
        status=429, body='{"error": {"message": "slow down"}}', headers={"Retry-After": "1"}
    )
    with FakeModelServer(busy, Reply(text="Blue.")) as server:
        start = time.monotonic()
        reply = model_on(server).invoke(QUESTION)
        took = time.monotonic() - start
    assert reply.text == "Blue."
    assert len(server.requests) == 2
    assert took >= 0.9  # it waited as it was asked to


@pytest.mark.parametrize("status", [429, 503])
def test_busy_past_the_timeout_is_one_line_naming_the_endpoint(status: int) -> None:
    busy = Reply(status=status, body='{"error": "busy"}', headers={"Retry-After": "1"})
    with FakeModelServer(default=busy) as server:
        start = time.monotonic()
        with pytest.raises(EndpointError) as caught:
            model_on(server, timeout=2.5, max_retries=5).invoke(QUESTION)
        took = time.monotonic() - start
    message = str(caught.value)
    assert caught.value.kind == "busy"
    assert "\n" not in message and server.base_url in message
    assert f"HTTP {status}" in message and "asked to retry after 1 s" in message
    assert len(server.requests) == 3  # 0 s, 1 s, 2 s: a fourth would pass the 2.5 s deadline
    assert took < 2.5


def test_a_retry_after_beyond_the_timeout_is_not_waited_for() -> None:
    busy = Reply(status=429, body="{}", headers={"Retry-After": "60"})
    with FakeModelServer(default=busy) as server:
        start = time.monotonic()
        with pytest.raises(
            EndpointError, match=r"asked to retry after 60 s\): gave up after 1 try"
        ):
            model_on(server, timeout=5).invoke(QUESTION)
        assert time.monotonic() - start < 2


def test_a_reply_that_is_not_json() -> None:
    broken = Reply(body="<html>502 Bad Gateway</html>")
    with FakeModelServer(default=broken) as server, pytest.raises(EndpointError) as caught:
        model_on(server).invoke(QUESTION)
    assert caught.value.kind == "malformed"
    assert "not the JSON of a chat completion" in str(caught.value)
    assert server.base_url in str(caught.value)


def test_a_wrong_key_names_the_setting_and_never_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    refused = Reply(
        status=401, body='{"error": {"message": "Incorrect API key provided: ' + KEY + '"}}'
    )
    caplog.set_level(logging.DEBUG)
    with FakeModelServer(default=refused) as server:
        with pytest.raises(EndpointError) as caught:
            model_on(server, api_key=SecretStr(KEY)).invoke(QUESTION)
        sent = server.headers[0]["authorization"]
    assert caught.value.kind == "auth"
    assert "CRAG_LLM_API_KEY" in str(caught.value) and "401" in str(caught.value)
    assert sent == f"Bearer {KEY}"  # the key goes to the server, and only there
    assert KEY not in str(caught.value)
    assert KEY[:8] not in caplog.text
    assert KEY not in repr(model_on(server, api_key=SecretStr(KEY)))


def test_without_a_key_the_openai_key_of_the_environment_is_not_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-hosted-secret")
    with FakeModelServer() as server:
        model_on(server).invoke(QUESTION)
    assert "sk-hosted-secret" not in server.headers[0]["authorization"]


def test_a_prompt_longer_than_the_context() -> None:
    vllm_words = (
        "This model's maximum context length is 2048 tokens. However, you requested 4000 "
        "tokens (3900 in the messages, 100 in the completion)."
    )
    too_long = Reply(status=400, body='{"object": "error", "message": "' + vllm_words + '"}')
    with FakeModelServer(default=too_long) as server, pytest.raises(EndpointError) as caught:
        model_on(server).invoke(QUESTION)
    assert caught.value.kind == "context"
    assert "longer than the model's context" in str(caught.value)
    assert "CRAG_LLM_CONTEXT_LENGTH" in str(caught.value)
    assert len(server.requests) == 1  # not retried


def test_the_in_flight_limit_holds_concurrent_requests_back() -> None:
    slow = Reply(text="ok", delay=0.4)
    with FakeModelServer(default=slow) as server:
        model = model_on(server, max_concurrency=2)
        threads = [threading.Thread(target=model.invoke, args=(QUESTION,)) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)
    assert len(server.requests) == 6
    assert server.most_in_flight == 2


def test_a_cancelled_run_closes_its_request_at_once() -> None:
    never = Reply(text="late", delay=30)
    with FakeModelServer(default=never) as server:
        model = model_on(server, timeout=60)
        start = time.monotonic()
        with pytest.raises(RunCancelledError), cancellation_scope() as token:
            threading.Timer(0.3, token.cancel).start()
            model.invoke(QUESTION)
        assert time.monotonic() - start < 2
        assert server.hung_up.wait(5), "the server never saw the connection close"


def test_the_context_length_is_read_from_the_server() -> None:
    listed = [{"id": "other", "max_model_len": 1}, {"id": "fake", "max_model_len": 4096}]
    with FakeModelServer(models=listed) as server:
        assert model_on(server).context_length == 4096
        assert model_on(server, context_length=2048).context_length == 2048  # the setting wins
    with FakeModelServer(models=None) as server:
        assert model_on(server).context_length is None


def test_max_new_tokens_is_sent_as_max_tokens() -> None:
    with FakeModelServer() as server:
        model_on(server).invoke(QUESTION, max_new_tokens=3)
    assert server.requests[0]["max_tokens"] == 3
    assert "max_new_tokens" not in server.requests[0]


def test_the_prompt_is_fitted_to_the_servers_context() -> None:
    from crag.nodes.generate import bounded_knowledge
    from crag.settings.run_settings import RunSettings

    knowledge = [
        {"text": f"Fact {n}: " + "word " * 200, "source": f"s{n}", "chunk": 0,
         "origin": "internal", "score": 1.0 - n / 10}
        for n in range(5)
    ]  # fmt: skip
    with FakeModelServer(models=[{"id": "fake", "max_model_len": 1024}]) as server:
        model = model_on(server)
        kept, notes = bounded_knowledge(knowledge, model, RunSettings(max_new_tokens=64), "Why?")  # type: ignore[arg-type]
    assert 0 < len(kept) < len(knowledge)
    assert "the generator's context of 1,024 tokens, 64 kept for the answer" in notes[0]


def test_the_llm_evaluator_sends_its_prompts_at_once_within_the_limit() -> None:
    from crag.evaluator.llm import LLMEvaluator

    with FakeModelServer(default=Reply(text="Yes", delay=0.3)) as server:
        evaluator = LLMEvaluator(model_on(server, max_concurrency=3))
        start = time.monotonic()
        scores = evaluator.score("Is the sky blue?", ["a", "b", "", "c", "d", "e", "f"])
        took = time.monotonic() - start
    assert scores == [1.0, 1.0, -1.0, 1.0, 1.0, 1.0, 1.0]  # the empty passage is not asked
    assert len(server.requests) == 6
    assert server.most_in_flight == 3
    assert took < 6 * 0.3
