"""Red team, round five: what the earlier rounds left untried, on a real ``langgraph dev``.

A team's server is started as ``make serve`` starts it (the repository's ``langgraph.json``: the
gate, LangGraph's auth, the refusals of what a run may not set), with the members alice and bob
and the admin carol. Alice asks one question on her thread; bob then goes after it by every
route the earlier rounds did not try: the thread's state at a checkpoint and its update, its
copy, pruning, creating a thread under her id, a run with ``if_not_exists: create``, a
``command`` (resume, goto, update), a cron, her run's join, stream and cancel, the thread's
event stream and commands, stateless runs pointed at her checkpoint, A2A with her thread as its
``contextId``. He reaches for her store items (and the whole store) and an admin tries to set,
through an assistant or A2A, what a run may not. Another site's sign-in forms must sign no
browser in, and a session has the role its account has now.

Then a second server signs people in through a real OpenID Connect provider on loopback
(``oidc-provider-mock``, whose people's claims may override the ID token's, as a provider's
may): an ID token that is not addressed to crag (its ``aud`` lacks crag's client id, even when
its ``azp`` names crag) or not issued by the provider signs no one in. Before, authlib checked
the issuer but not the audience, so a token whose ``aud`` named another client and whose
``azp`` named crag made an account and a session.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import langgraph_api  # noqa: F401 - the server extra: missing, the test fails (never skips)
import oidc_provider_mock
import pytest

from crag.app.web.accounts import Accounts
from crag_bench.dev_server import DevServer
from tests.server_support import MEMBER_PASSWORD, langgraph_server, member_keys, team_server

pytestmark = [pytest.mark.server, pytest.mark.timeout(600)]

SECRET = "4711"
"""In alice's question: no answer to bob may hold it."""
QUESTION = f"Who painted the Mona Lisa? My locker code is {SECRET}."
ATTACKER = "http://attacker.example"


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def keys(store_dir: Path) -> dict[str, str]:
    made = member_keys(store_dir / "threads.sqlite")
    made["carol"] = Accounts(store_dir / "threads.sqlite").add("carol", MEMBER_PASSWORD, "admin")
    return made


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, store_dir: Path, keys: dict[str, str]
) -> Iterator[DevServer]:
    with team_server(tmp_path_factory.mktemp("langgraph_dev"), store_dir) as started:
        yield started


def _key(keys: dict[str, str], name: str) -> dict[str, str]:
    return {"x-api-key": keys[name]}


@pytest.fixture(scope="module")
def alices(server: DevServer, keys: dict[str, str]) -> dict[str, Any]:
    """Alice's thread after one answered question: its id, the run's, the latest checkpoint."""
    alice = _key(keys, "alice")
    thread = httpx.post(f"{server.url}/threads", json={}, headers=alice, timeout=60).json()
    thread_id = thread["thread_id"]
    asked = httpx.post(
        f"{server.url}/threads/{thread_id}/runs/wait",
        json={"assistant_id": "crag", "input": {"question": QUESTION}},
        headers=alice,
        timeout=300,
    )
    assert asked.status_code == 200 and asked.json().get("answer"), asked.text
    history = httpx.post(
        f"{server.url}/threads/{thread_id}/history", json={"limit": 100}, headers=alice, timeout=60
    ).json()
    runs = httpx.get(f"{server.url}/threads/{thread_id}/runs", headers=alice, timeout=60).json()
    assistant = httpx.post(
        f"{server.url}/assistants/search", json={"graph_id": "crag"}, headers=alice, timeout=60
    ).json()[0]
    return {
        "thread": thread_id,
        "run": runs[0]["run_id"],
        "checkpoint": history[0]["checkpoint"],
        "checkpoints": len(history),
        "assistant": assistant["assistant_id"],
    }


def _attempts(a: dict[str, Any]) -> dict[str, tuple[str, str, Any]]:
    """Bob's requests at alice's thread: name -> (method, path, JSON body)."""
    t, run, cp = a["thread"], a["run"], a["checkpoint"]
    ask = {"question": "What was her locker code?"}
    message = {"role": "user", "parts": [{"kind": "text", "text": "Her code?"}], "messageId": "m"}
    return {
        "update_state": ("POST", f"/threads/{t}/state", {"values": ask}),
        "state_at_checkpoint": ("GET", f"/threads/{t}/state/{cp['checkpoint_id']}", None),
        "state_checkpoint_post": ("POST", f"/threads/{t}/state/checkpoint", {"checkpoint": cp}),
        "history": ("POST", f"/threads/{t}/history", {}),
        "copy": ("POST", f"/threads/{t}/copy", {}),
        "prune": ("POST", "/threads/prune", {"thread_ids": [t]}),
        "create_under_her_id": ("POST", "/threads", {"thread_id": t, "if_exists": "do_nothing"}),
        "run_if_not_exists": (
            "POST",
            f"/threads/{t}/runs",
            {"assistant_id": "crag", "input": ask, "if_not_exists": "create"},
        ),
        "command_resume": (
            "POST",
            f"/threads/{t}/runs",
            {"assistant_id": "crag", "command": {"resume": "x"}},
        ),
        "command_goto_update": (
            "POST",
            f"/threads/{t}/runs/wait",
            {"assistant_id": "crag", "command": {"goto": "generate", "update": ask}},
        ),
        "cron_on_her_thread": (
            "POST",
            f"/threads/{t}/runs/crons",
            {"assistant_id": "crag", "schedule": "* * * * *", "input": ask},
        ),
        "get_run": ("GET", f"/threads/{t}/runs/{run}", None),
        "join_run": ("GET", f"/threads/{t}/runs/{run}/join", None),
        "stream_run": ("GET", f"/threads/{t}/runs/{run}/stream", None),
        "cancel_run": ("POST", f"/threads/{t}/runs/{run}/cancel", {}),
        "delete_run": ("DELETE", f"/threads/{t}/runs/{run}", None),
        "thread_events": ("POST", f"/threads/{t}/stream/events", {"channels": ["values"]}),
        "thread_command": (
            "POST",
            f"/threads/{t}/commands",
            {"id": 1, "method": "run.start", "params": {"assistant_id": "crag", "input": ask}},
        ),
        "stateless_from_her_checkpoint": (
            "POST",
            "/runs/wait",
            {"assistant_id": "crag", "input": None, "checkpoint": cp},
        ),
        "stateless_with_her_thread_id": (
            "POST",
            "/runs/wait",
            {"assistant_id": "crag", "input": None, "config": {"configurable": {"thread_id": t}}},
        ),
        "a2a_her_context": (
            "POST",
            f"/a2a/{a['assistant']}",
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "message/send",
                "params": {"message": {**message, "contextId": t}},
            },
        ),
        "a2a_her_task": (
            "POST",
            f"/a2a/{a['assistant']}",
            {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": f"{t}:{run}"}},
        ),
    }


ATTEMPTS = list(
    _attempts({"thread": "t", "run": "r", "checkpoint": {"checkpoint_id": "c"}, "assistant": "a"})
)


def _sent(
    server: DevServer, headers: dict[str, str], method: str, path: str, body: Any
) -> tuple[int, str]:
    """The status and (up to 64 KiB of) the body of one request; a stream left open: its start."""
    text = b""
    with httpx.Client(base_url=server.url, timeout=httpx.Timeout(60, read=20)) as client:
        try:
            with client.stream(method, path, json=body, headers=headers) as response:
                for chunk in response.iter_bytes():
                    text += chunk
                    if len(text) > 65_536:
                        break
                return response.status_code, text.decode("utf-8", "replace")
        except httpx.ReadTimeout:  # a stream that stays open and sends nothing
            return 200, text.decode("utf-8", "replace")


def _refused(status: int, text: str) -> bool:
    """Whether an answer refuses: an error status, or an error inside a 200 (a stream, JSON-RPC)."""
    if status >= 400:
        return True
    lowered = text.lower()
    return not text.strip() or "not found" in lowered or "error" in lowered


@pytest.mark.parametrize("attempt", ATTEMPTS)
def test_bob_reaches_nothing_of_alices_thread_by_any_route(
    server: DevServer, keys: dict[str, str], alices: dict[str, Any], attempt: str
) -> None:
    method, path, body = _attempts(alices)[attempt]
    status, text = _sent(server, _key(keys, "bob"), method, path, body)
    assert SECRET not in text, (attempt, status, text[:500])
    assert _refused(status, text), (attempt, status, text[:500])
    # Nothing of hers changed: the same checkpoints, her question, her one run.
    alice = _key(keys, "alice")
    history = httpx.post(
        f"{server.url}/threads/{alices['thread']}/history", json={"limit": 100}, headers=alice
    ).json()
    assert len(history) == alices["checkpoints"], attempt
    assert SECRET in history[0]["values"]["question"], attempt
    runs = httpx.get(f"{server.url}/threads/{alices['thread']}/runs", headers=alice).json()
    assert [r["run_id"] for r in runs] == [alices["run"]], attempt
    assert runs[0]["status"] == "success", attempt


def test_bob_lists_and_changes_none_of_alices_crons_or_threads(
    server: DevServer, keys: dict[str, str], alices: dict[str, Any]
) -> None:
    alice, bob = _key(keys, "alice"), _key(keys, "bob")
    t = alices["thread"]
    yearly = {"assistant_id": "crag", "schedule": "0 0 1 1 *", "input": {"question": QUESTION}}
    made = httpx.post(f"{server.url}/threads/{t}/runs/crons", json=yearly, headers=alice)
    assert made.status_code == 200, made.text
    cron = made.json()["cron_id"]
    try:
        lists = [
            ("/threads/search", {"metadata": {"owner": "alice"}}, []),
            ("/threads/search", {"ids": [t]}, []),
            ("/threads/count", {"metadata": {"owner": "alice"}}, 0),
            ("/runs/crons/search", {"thread_id": t}, []),
            ("/runs/crons/search", {}, []),
            ("/runs/crons/count", {"thread_id": t}, 0),
        ]
        for path, body, nothing in lists:
            found = httpx.post(f"{server.url}{path}", json=body, headers=bob)
            assert found.status_code == 200 and found.json() == nothing, (path, found.text)
        for method, body in [("GET", None), ("PATCH", {"schedule": "* * * * *"}), ("DELETE", None)]:
            refused = httpx.request(
                method, f"{server.url}/runs/crons/{cron}", json=body, headers=bob
            )
            assert refused.status_code == 404, (method, refused.text)
        kept = httpx.get(f"{server.url}/runs/crons/{cron}", headers=alice)
        assert kept.status_code == 200 and kept.json()["schedule"] == "0 0 1 1 *", kept.text
    finally:
        httpx.delete(f"{server.url}/runs/crons/{cron}", headers=alice)


def test_bob_reaches_no_store_item_under_alices_name(
    server: DevServer, keys: dict[str, str]
) -> None:
    alice, bob = _key(keys, "alice"), _key(keys, "bob")
    item = {"namespace": ["alice", "notes"], "key": "code", "value": {"code": SECRET}}
    put = httpx.put(f"{server.url}/store/items", json=item, headers=alice)
    assert put.status_code == 204, put.text
    where = {"namespace": ["alice", "notes"], "key": "code"}
    attempts: list[tuple[str, str, Any, dict[str, str] | None]] = [
        ("PUT", "/store/items", {**item, "value": {"code": "bob's"}}, None),
        ("GET", "/store/items", None, {"namespace": "alice.notes", "key": "code"}),
        ("DELETE", "/store/items", where, None),
        ("POST", "/store/items/search", {"namespace_prefix": []}, None),
        ("POST", "/store/items/search", {"namespace_prefix": ["alice"]}, None),
        ("POST", "/store/items/search", {"namespace_prefix": ["*", "notes"]}, None),
        ("POST", "/store/namespaces", {}, None),
        ("POST", "/store/namespaces", {"suffix": ["notes"]}, None),
    ]
    for method, path, body, params in attempts:
        answer = httpx.request(method, f"{server.url}{path}", json=body, params=params, headers=bob)
        assert answer.status_code == 403, (method, path, body, answer.text)
        assert SECRET not in answer.text
    kept = httpx.get(
        f"{server.url}/store/items",
        params={"namespace": "alice.notes", "key": "code"},
        headers=alice,
    )
    assert kept.status_code == 200 and kept.json()["value"] == {"code": SECRET}, kept.text


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"context": {"store_path": "/tmp/elsewhere"}}, "store_path"),
        ({"context": {"force_action": "incorrect"}}, "force_action"),
        (
            {"config": {"configurable": {"langgraph_auth_user_id": "alice"}}},
            "langgraph_auth_user_id",
        ),
        ({"config": {"configurable": {"crag_served_run": False}}}, "crag_served_run"),
    ],
)
def test_no_assistant_sets_for_everyones_runs_what_a_run_may_not(
    server: DevServer, keys: dict[str, str], settings: dict[str, Any], named: str
) -> None:
    """Every member's runs of an assistant get its context and config: an admin may make one,
    with per-run settings only; a member may make, change, version or delete none."""
    carol, bob = _key(keys, "carol"), _key(keys, "bob")
    made = httpx.post(
        f"{server.url}/assistants", json={"graph_id": "crag", **settings}, headers=carol
    )
    assert made.status_code == 422 and named in made.json()["detail"], made.text
    own = httpx.post(
        f"{server.url}/assistants",
        json={"graph_id": "crag", "context": {"top_k": 3}},
        headers=carol,
    )
    assert own.status_code == 200, own.text
    assistant = own.json()["assistant_id"]
    changed = httpx.patch(f"{server.url}/assistants/{assistant}", json=settings, headers=carol)
    assert changed.status_code == 422 and named in changed.json()["detail"], changed.text
    for method, path, body in [
        ("POST", "/assistants", {"graph_id": "ingest"}),
        ("PATCH", f"/assistants/{assistant}", {"graph_id": "ingest"}),
        ("POST", f"/assistants/{assistant}/latest", {"version": 1}),
        ("DELETE", f"/assistants/{assistant}", None),
    ]:
        refused = httpx.request(method, f"{server.url}{path}", json=body, headers=bob)
        assert refused.status_code == 403, (method, path, refused.text)
    kept = httpx.get(f"{server.url}/assistants/{assistant}", headers=bob).json()
    assert (kept["graph_id"], kept["context"]) == ("crag", {"top_k": 3})


@pytest.mark.parametrize(
    ("context", "named"),
    [
        ({"store_path": "/tmp/elsewhere"}, "store_path"),
        ({"force_action": "incorrect"}, "force_action"),
        ({"langgraph_auth_user_id": "alice"}, "langgraph_auth_user_id"),
    ],
)
def test_a2a_carries_no_setting_a_run_may_not_send(
    server: DevServer,
    keys: dict[str, str],
    alices: dict[str, Any],
    context: dict[str, Any],
    named: str,
) -> None:
    """langgraph-api's A2A endpoint starts its runs through its in-process client: the refusals
    apply there as on the run routes (the run is never created)."""
    message = {
        "role": "user",
        "parts": [{"kind": "text", "text": "Who?"}],
        "messageId": str(uuid.uuid4()),
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {"context": context, "message": message},
    }
    bob = _key(keys, "bob")
    before = httpx.post(f"{server.url}/threads/search", json={"limit": 1000}, headers=bob).json()
    answer = httpx.post(
        f"{server.url}/a2a/{alices['assistant']}", json=body, headers=bob, timeout=120
    )
    assert answer.status_code == 200, answer.text
    error = answer.json().get("error") or {}
    assert named in str(error.get("message")), answer.text
    after = httpx.post(f"{server.url}/threads/search", json={"limit": 1000}, headers=bob).json()
    assert len(after) == len(before), "the refused run made a thread"


@pytest.mark.parametrize("origin", [ATTACKER, "null"])
@pytest.mark.parametrize("route", ["/chat/signin", "/chat/token"])
def test_another_sites_sign_in_form_signs_no_browser_in(
    server: DevServer, origin: str, route: str
) -> None:
    """Login CSRF: a page of another site posting its own account's name and password (or a
    token) would sign the visitor's browser in as that account, and read what they then ask."""
    form = {"name": "bob", "password": MEMBER_PASSWORD, "token": server.token}
    posted = httpx.post(f"{server.url}{route}", data=form, headers={"origin": origin})
    assert posted.status_code == 403, posted.text
    assert "set-cookie" not in posted.headers


def test_a_session_has_the_role_its_account_has_now(
    server: DevServer, store_dir: Path, keys: dict[str, str]
) -> None:
    browser = httpx.Client(base_url=server.url, timeout=60)
    accounts = Accounts(store_dir / "threads.sqlite")
    try:
        signed_in = browser.post(
            "/chat/signin", data={"name": "carol", "password": MEMBER_PASSWORD}
        )
        assert signed_in.status_code == 303, signed_in.text
        assert browser.get("/crag/quality").status_code == 200
        accounts.set_role("carol", "member")
        assert browser.get("/chat/api/session").json()["role"] == "member"
        assert browser.get("/crag/quality").status_code == 403
        assert (
            httpx.get(f"{server.url}/crag/quality", headers=_key(keys, "carol")).status_code == 403
        )
    finally:
        accounts.set_role("carol", "admin")
        browser.close()


# --- the team's OpenID Connect provider -------------------------------------------------------

CLIENT_ID = "crag"
PEOPLE: dict[str, dict[str, Any]] = {
    # sub: the claims the provider puts in (and over) its ID token
    "erin": {"preferred_username": "erin"},
    "other-audience": {"preferred_username": "olga", "aud": "another-client", "azp": CLIENT_ID},
    "other-audiences": {
        "preferred_username": "oscar",
        "aud": ["another-client", "a-third"],
        "azp": CLIENT_ID,
    },
    "other-audience-no-azp": {"preferred_username": "otto", "aud": "another-client"},
    "other-issuer": {"preferred_username": "ivan", "iss": "http://127.0.0.1:9/another-issuer"},
}


@pytest.fixture(scope="module")
def provider() -> Iterator[str]:
    people = [oidc_provider_mock.User(sub=sub, claims=claims) for sub, claims in PEOPLE.items()]
    with oidc_provider_mock.run_server_in_thread(user_claims=people) as running:
        yield f"http://localhost:{running.server_port}"


@pytest.fixture(scope="module")
def oidc_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("oidc") / "threads.sqlite"


@pytest.fixture(scope="module")
def oidc_server(
    tmp_path_factory: pytest.TempPathFactory, provider: str, oidc_db: Path
) -> Iterator[DevServer]:
    env = {
        "CRAG_STORE_PATH": str(tmp_path_factory.mktemp("oidc_store") / "chroma"),
        "CRAG_DEFAULT_CORPUS": "false",
        "CRAG_THREADS_DB": str(oidc_db),
        "CRAG_OIDC_ISSUER": provider,
        "CRAG_OIDC_CLIENT_ID": CLIENT_ID,
        "CRAG_OIDC_CLIENT_SECRET": "a client secret of crag's",
    }
    with langgraph_server(tmp_path_factory.mktemp("oidc_dev"), env) as started:
        yield started


def _through_the_provider(server: DevServer, sub: str) -> tuple[httpx.Client, httpx.Response]:
    """A browser's cookie jar sent through the provider's sign-in as ``sub``, and crag's answer."""
    browser = httpx.Client(timeout=60)
    login = browser.get(f"{server.url}/chat/oidc/login")
    assert login.status_code == 302, login.text
    authorized = browser.post(login.headers["location"], data={"sub": sub})
    assert authorized.status_code == 302, authorized.text
    return browser, browser.get(authorized.headers["location"])


def _session(browser: httpx.Client) -> bool:
    return any(cookie.name.startswith("crag_session") for cookie in browser.cookies.jar)


def test_the_providers_person_signs_in_without_a_browser(
    oidc_server: DevServer, oidc_db: Path
) -> None:
    """The flow the refusals below take, answered: the harness reaches a session."""
    browser, answer = _through_the_provider(oidc_server, "erin")
    try:
        assert answer.status_code == 200 and _session(browser), answer.text
        assert browser.get(f"{oidc_server.url}/chat/api/session").json()["user"] == "erin"
    finally:
        browser.close()
    assert Accounts(oidc_db).get("erin") is not None


@pytest.mark.parametrize("sub", [sub for sub in PEOPLE if sub != "erin"])
def test_an_id_token_not_addressed_to_crag_or_not_the_providers_signs_no_one_in(
    oidc_server: DevServer, oidc_db: Path, sub: str
) -> None:
    browser, answer = _through_the_provider(oidc_server, sub)
    try:
        assert answer.status_code == 401, answer.text
        assert "did not succeed" in answer.text
        assert not _session(browser)
    finally:
        browser.close()
    assert Accounts(oidc_db).get(PEOPLE[sub]["preferred_username"]) is None
