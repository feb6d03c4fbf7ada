"""Sign-in through the team's OpenID Connect provider, with authlib's Starlette client.

When the operator sets ``oidc_issuer`` (with ``oidc_client_id`` and ``oidc_client_secret``),
the chat page's sign-in offers the provider:

* ``GET /chat/oidc/login`` sends the browser to the provider's authorization endpoint (read
  from its ``/.well-known/openid-configuration``), with a state, a nonce and a PKCE challenge
  kept in a short-lived signed cookie (``crag_oidc``: HttpOnly, SameSite=Lax, since the
  provider's redirect back is a navigation from another site).
* ``GET /chat/oidc/callback`` takes the code back, exchanges it for tokens and checks the ID
  token (signature against the provider's keys, issuer, audience, expiry, nonce: authlib does).
  The person is who the provider vouches for, its issuer and ``sub``, bound to an account of
  their own (:mod:`crag.app.web.provider_identities`): a new member account on their first
  sign-in, labelled with the claim ``oidc_name_claim`` (never an existing account of that
  name), the same account afterwards, with the role the operator gave it; an account the
  operator removed stays removed. The answer sets the session cookie and a page that moves on
  to ``/chat/`` by itself:
  a redirect would still count as a navigation from the provider's site, for which a browser
  withholds the SameSite=Strict cookie.

Any failure is the sign-in page with one sentence (nothing of a token or a secret in it).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from typing import Any

from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from crag.app.web.accounts import AccountError
from crag.app.web.gate import (
    OIDC_PREFIX,
    SIGN_IN_HEADERS,
    GateConfig,
    set_session_cookie,
    sign_in_html,
)
from crag.app.web.provider_identities import ProviderIdentities, ProviderUser
from crag.settings.deployment import DeploymentSettings

__all__ = ["OIDC_PREFIX", "STATE_COOKIE", "oidc_routes"]

logger = logging.getLogger(__name__)

STATE_COOKIE = "crag_oidc"
STATE_SECONDS = 600
SCOPES = "openid profile email"
_ONWARD = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8">'
    '<meta http-equiv="refresh" content="0;url=/chat/"><title>crag: signed in</title></head>'
    '<body><p>Signed in. <a href="/chat/">Continue to crag</a>.</p></body></html>'
)


def sign_in_response(reason: str) -> Response:
    """The sign-in page (401) saying ``reason``, with the provider's link."""
    headers = {**SIGN_IN_HEADERS, "cache-control": "no-store", "x-content-type-options": "nosniff"}
    return HTMLResponse(sign_in_html(reason, oidc=True), 401, headers=headers)


def _own_origin(request: Request) -> str:
    return f"{request.url.scheme}://{request.headers.get('host', '')}"


class IssuerMismatchError(ValueError):
    """The provider's metadata names another issuer than ``oidc_issuer`` (or none)."""


_MISMATCH = (
    "The team's sign-in provider names another issuer than the one this server was given; "
    "ask the operator."
)


class _OpenIdSignIn:
    """The two routes' handlers over the provider's client and the gate's configuration."""

    def __init__(self, settings: DeploymentSettings, gate: GateConfig) -> None:
        from authlib.integrations.starlette_client import OAuth

        self.settings, self.gate = settings, gate
        oauth = OAuth()
        oauth.register(
            "provider",
            server_metadata_url=settings.oidc_issuer.rstrip("/")
            + "/.well-known/openid-configuration",
            client_id=settings.oidc_client_id,
            client_secret=settings.oidc_client_secret.get_secret_value(),
            client_kwargs={"scope": SCOPES, "code_challenge_method": "S256"},
        )
        self.client: Any = oauth.create_client("provider")

    async def login(self, request: Request) -> Response:
        """To the provider, to sign in there."""
        try:
            await self._issuer()
            return await self.client.authorize_redirect(  # type: ignore[no-any-return]
                request, f"{_own_origin(request)}{OIDC_PREFIX}/callback"
            )
        except IssuerMismatchError as exc:
            logger.warning("the OpenID Connect provider is refused: %s", exc)
            return sign_in_response(_MISMATCH)
        except Exception as exc:  # noqa: BLE001 - the provider unreachable, its metadata bad
            logger.warning("the OpenID Connect provider cannot be reached: %s", exc)
            return sign_in_response(
                "The team's sign-in provider cannot be reached; try again, or ask the operator."
            )

    async def _issuer(self) -> str:
        """The issuer the provider's metadata names, which must be the configured one.

        OpenID Connect Discovery (4.3) wants the metadata's ``issuer`` identical to the URL it
        was read from, and the metadata refused otherwise: metadata that names another issuer
        (a proxy or a misconfigured provider in front of the real one) would have crag accept
        that issuer's ID tokens. A trailing slash is not a difference.

        Raises:
            IssuerMismatchError: the metadata names no issuer, or another one.
        """
        metadata = await self.client.load_server_metadata()
        named = str(metadata.get("issuer") or "")
        configured = self.settings.oidc_issuer.strip().rstrip("/")
        if named.rstrip("/") != configured:
            raise IssuerMismatchError(
                f"its metadata names the issuer {named[:200]!r}, not oidc_issuer {configured!r}"
            )
        return named

    async def _claims_options(self) -> dict[str, Any]:
        """What the ID token must say: the provider issued it (``iss``) to crag (``aud``).

        authlib's default checks the issuer only: an ID token whose ``aud`` lacks crag's client
        id passed as long as its ``azp`` named crag, where OpenID Connect Core (3.1.3.7) wants
        the token refused. The issuer is the one the metadata names, checked to be the
        configured one (:meth:`_issuer`).
        """
        issuer = await self._issuer()
        return {
            "iss": {"essential": True, "values": [issuer]},
            "aud": {"essential": True, "values": [self.settings.oidc_client_id]},
        }

    async def callback(self, request: Request) -> Response:
        """Back from the provider: the account's session, or the sign-in page saying why."""
        from authlib.integrations.base_client import OAuthError

        try:
            tokens = await self.client.authorize_access_token(
                request, claims_options=await self._claims_options()
            )
        except IssuerMismatchError as exc:
            logger.warning("the OpenID Connect provider is refused: %s", exc)
            return sign_in_response(_MISMATCH)
        except OAuthError as exc:
            logger.info("an OpenID Connect sign-in failed: %s", exc.error)
            return sign_in_response("The sign-in through the team's provider did not succeed.")
        except Exception as exc:  # noqa: BLE001 - the token endpoint unreachable, a bad token
            logger.warning("an OpenID Connect sign-in failed: %s", type(exc).__name__)
            return sign_in_response("The sign-in through the team's provider did not succeed.")
        claims = tokens.get("userinfo") or {}
        if self.gate.accounts is None:
            return sign_in_response("This server keeps no accounts (its threads database).")
        user = ProviderUser(
            issuer=str(claims.get("iss", "")),
            subject=str(claims.get("sub", "")),
            label=str(claims.get(self.settings.oidc_name_claim, "")),
        )
        try:
            account = await asyncio.to_thread(ProviderIdentities(self.gate.accounts).sign_in, user)
        except AccountError as exc:
            logger.info("an OpenID Connect sign-in was refused: %s", exc)
            return sign_in_response(f"The sign-in through the team's provider was refused: {exc}.")
        logger.info("%s signed in through the OpenID Connect provider", account.name)
        response = HTMLResponse(_ONWARD, headers={"cache-control": "no-store"})
        secure = request.url.scheme == "https"
        cookie = await asyncio.to_thread(set_session_cookie, self.gate, account.name, secure)
        response.headers.append("set-cookie", cookie)
        request.session.clear()
        return response


def oidc_routes(settings: DeploymentSettings, gate: GateConfig) -> list[BaseRoute]:
    """The provider's routes under ``/chat/oidc``; none when ``oidc_issuer`` is unset."""
    if not settings.oidc_issuer.strip():
        return []
    handlers = _OpenIdSignIn(settings, gate)
    secret = hmac.new(gate.token.encode(), b"crag oidc state", hashlib.sha256).hexdigest()
    state = Middleware(
        SessionMiddleware,
        secret_key=secret,
        session_cookie=STATE_COOKIE,
        max_age=STATE_SECONDS,
        same_site="lax",
        path=OIDC_PREFIX,
    )
    routes = [
        Route("/login", handlers.login, methods=["GET"]),
        Route("/callback", handlers.callback, methods=["GET"]),
    ]
    return [Mount(OIDC_PREFIX, routes=routes, middleware=[state])]
