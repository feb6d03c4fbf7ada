"""The served app without the gate: the chat page's routes and the run refusals only.

Only :mod:`crag_bench.dev_server` serves it (``access=False``), beside a server with the gate,
so that ``bench/scripts/auth_cost.py`` measures what the gate (:mod:`crag.app.web.gate`) and
LangGraph's auth (:mod:`crag.app.web.server_auth`) cost per request. Never serve it to anyone.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware

from crag.app.web.chat_page import chat_page_routes
from crag.app.web.http import RefuseOtherKinds

app = Starlette(routes=chat_page_routes(), middleware=[Middleware(RefuseOtherKinds)])
