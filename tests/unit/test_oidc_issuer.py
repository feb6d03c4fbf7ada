"""The provider's metadata must name the configured issuer (OpenID Connect Discovery, 4.3).

Metadata that names another issuer, or none, would have crag check ID tokens against an issuer
the operator never chose: the sign-in is refused with the sign-in page, before the browser is
sent anywhere and again when a callback arrives.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from authlib.integrations.starlette_client import StarletteOAuth2App
from starlette.applications import Starlette
from starlette.testclient import TestClient

from crag.app.web.oidc import IssuerMismatchError, _OpenIdSignIn, oidc_routes
from crag.settings.deployment import deployment_with

CONFIGURED = "https://id.example.org/realms/team"


def _named(issuer: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The provider's metadata names ``issuer`` (``None``: no issuer at all)."""

    async def metadata(self: Any) -> dict[str, Any]:
        found: dict[str, Any] = {"authorization_endpoint": f"{CONFIGURED}/auth"}
        if issuer is not None:
            found["issuer"] = issuer
        return found

    monkeypatch.setattr(StarletteOAuth2App, "load_server_metadata", metadata)


def _handlers() -> _OpenIdSignIn:
    settings = deployment_with(
        oidc_issuer=CONFIGURED + "/", oidc_client_id="crag", oidc_client_secret="secret"
    )
    return _OpenIdSignIn(settings, SimpleNamespace(token="t" * 40, accounts=None))  # type: ignore[arg-type]


@pytest.mark.parametrize("named", [CONFIGURED, CONFIGURED + "/"])
def test_the_configured_issuer_is_the_one_tokens_must_name(
    named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _named(named, monkeypatch)
    options = asyncio.run(_handlers()._claims_options())
    assert options["iss"] == {"essential": True, "values": [named]}
    assert options["aud"] == {"essential": True, "values": ["crag"]}


@pytest.mark.parametrize(
    "named", ["https://id.example.org/realms/other", "https://evil.example/realms/team", "", None]
)
def test_metadata_naming_another_issuer_or_none_is_refused(
    named: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _named(named, monkeypatch)
    with pytest.raises(IssuerMismatchError, match="not oidc_issuer"):
        asyncio.run(_handlers()._claims_options())


def test_the_login_and_the_callback_show_the_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    _named("https://id.example.org/realms/other", monkeypatch)
    settings = deployment_with(
        oidc_issuer=CONFIGURED, oidc_client_id="crag", oidc_client_secret="secret"
    )
    gate: Any = SimpleNamespace(token="t" * 40, accounts=None)
    app = Starlette(routes=oidc_routes(settings, gate))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        for path in ("/chat/oidc/login", "/chat/oidc/callback?code=c&state=s"):
            answer = client.get(path, follow_redirects=False)
            assert answer.status_code == 401, (path, answer.text)
            assert "names another issuer" in answer.text
            assert "location" not in answer.headers
