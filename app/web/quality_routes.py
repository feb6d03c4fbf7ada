"""The admins' quality view over HTTP: ``/crag/quality``, beside the feedback routes.

:func:`quality_routes` gives :func:`crag.app.web.http.served_app` its routes, behind
:class:`crag.app.web.gate.Gate` like every other. Only an admin (an account with the admin
role, the server's token, a trusted proxy's admin) is answered; a member gets 403, a request
without a known caller 401. What the view shows is the whole team's, so no member sees it:

* ``GET /crag/quality``: ``{"feedback", "thresholds", "evaluation", "note"}``. ``feedback``:
  every record counted by the action of the run it judges (``correct``, ``ambiguous``,
  ``incorrect``; ``other`` for a run without one), good and bad votes apart, and the side-by-side
  comparisons by their better side (``crag``, ``rag``, ``same``). ``thresholds``: the action
  trigger's upper and lower thresholds the served graphs run with now (the operator's method
  under the operator's evaluator, as ``/chat/api/method`` says). ``evaluation``: the last
  evaluation's figures (``None`` when there is none, and ``note`` then says why in a sentence).
* ``GET /crag/quality/report.svg``: that evaluation's picture, as an image: ``image/svg+xml``
  under ``Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'`` with
  ``nosniff``, so a script in the file never runs; the page shows it in an ``<img>``.
* ``GET /crag/quality/export``: the file ``crag feedback export`` writes (every record as one
  JSON line, oldest first: :func:`crag.app.cli.feedback_command.write_export`), as a download.

**The last evaluation** is found by one rule, the operator's: the newest ``results.json``
(by its modification time) directly in the deployment setting ``eval_dir`` or in one of its
folders, ``eval`` beside the store (``.crag/eval``) when the setting is empty. ``crag eval FILE``
writes one there. The folder is never named by a caller, and nothing
but ``results.json`` and ``report.svg`` is read from it.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from crag.app.feedback_store import Feedback, FeedbackError, FeedbackStore
from crag.app.web.credentials import Identity
from crag.app.web.feedback_routes import served_feedback_store
from crag.app.web.gate import IDENTITY_KEY
from crag.settings.deployment import DeploymentSettings, deployment_settings, evaluations_folder
from crag.settings.setting_checks import InvalidSettingError

__all__ = [
    "EXPORT_NAME",
    "QUALITY_PATH",
    "SVG_HEADERS",
    "feedback_counts",
    "latest_evaluation",
    "quality_routes",
]

logger = logging.getLogger(__name__)

QUALITY_PATH = "/crag/quality"
ACTIONS = ("correct", "ambiguous", "incorrect")
BETTER = ("crag", "rag", "same")
RESULTS = "results.json"
PICTURE = "report.svg"
EXPORT_NAME = "crag-feedback.jsonl"
"""The name the downloaded export is saved under."""
MAX_RESULTS_BYTES = 50_000_000
"""The largest results.json or report.svg read (one line per question: a big evaluation fits)."""
SVG_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "Content-Disposition": f'inline; filename="{PICTURE}"',
}
"""The picture's headers: an image that runs nothing, whatever the file holds."""
_API_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
_ATTACHMENT = f'attachment; filename="{EXPORT_NAME}"'


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

Handler = Callable[[Request], Awaitable[Response]]


def _error(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=_API_HEADERS)


def _route(path: str, handler: Handler) -> Route:
    """A route answering GET (and HEAD) with ``handler``, and 405 with a sentence otherwise."""

    async def endpoint(request: Request) -> Response:
        if request.method not in {"GET", "HEAD"}:
            response = _error(405, f"{request.url.path} does not answer {request.method}, only GET")
            response.headers["Allow"] = "GET, HEAD"
            return response
        return await handler(request)

    return Route(path, endpoint, methods=_METHODS, include_in_schema=False)


class _Refused(Exception):
    """A request this view does not answer: its status and one sentence."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


def _evaluations_folder(settings: DeploymentSettings) -> Path:
    return evaluations_folder(settings.eval_dir, settings.store_path)


def latest_evaluation(folder: Path) -> Path | None:
    """The folder of the newest ``results.json`` in ``folder`` or in one of its folders."""
    try:
        found = [folder / RESULTS, *(child / RESULTS for child in folder.iterdir())]
    except OSError:  # no such folder (no evaluation yet), or not one
        return None
    newest: tuple[float, Path] | None = None
    for results in found:
        try:
            if not results.is_file():
                continue
            written = results.stat().st_mtime
        except OSError:
            continue
        if newest is None or written > newest[0]:
            newest = (written, results.parent)
    return None if newest is None else newest[1]


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, at most :data:`MAX_RESULTS_BYTES` of them."""
    with path.open("rb") as file:
        data = file.read(MAX_RESULTS_BYTES + 1)
    if len(data) > MAX_RESULTS_BYTES:
        raise ValueError(f"{path.name} is larger than {MAX_RESULTS_BYTES:,} bytes")
    return data


def _thresholds_of(results: Mapping[str, Any]) -> dict[str, Any]:
    settings = results.get("settings") or {}
    return {
        "upper_threshold": settings.get("upper_threshold"),
        "lower_threshold": settings.get("lower_threshold"),
    }


def evaluation_view(run: Path) -> dict[str, Any]:
    """What the view shows of the evaluation in ``run``: when, of what, its table, its picture.

    Raises:
        ValueError: results.json cannot be read, or is not what ``crag eval`` writes.
    """
    from crag.app.cli.eval_output import table_lines

    results_file = run / RESULTS
    try:
        results = json.loads(_read_bytes(results_file))
        written = results_file.stat().st_mtime
        table = table_lines(results)
    except OSError as exc:
        raise ValueError(f"{RESULTS} cannot be read ({exc.strerror})") from None
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise ValueError(f"{RESULTS} is not what crag eval writes ({type(exc).__name__})") from None
    return {
        "run": run.name,
        "folder": str(run),
        "written_at": datetime.fromtimestamp(written, UTC).isoformat(timespec="seconds"),
        "questions_file": str(results.get("questions_file", "")),
        "questions": results.get("questions"),
        "thresholds": _thresholds_of(results),
        "table": table,
        "picture": (run / PICTURE).is_file(),
    }


def feedback_counts(records: Iterable[Feedback]) -> dict[str, Any]:
    """The records counted by their run's action and verdict, and the comparisons' better side."""
    votes: Counter[tuple[str, str]] = Counter()
    better: Counter[str] = Counter()
    total = 0
    for feedback in records:
        total += 1
        action = str(feedback.record.get("action") or "")
        votes[(action if action in ACTIONS else "other", feedback.verdict)] += 1
        if feedback.better:
            better[feedback.better] += 1
    return {
        "records": total,
        "actions": {
            action: {"good": votes[(action, "good")], "bad": votes[(action, "bad")]}
            for action in (*ACTIONS, "other")
        },
        "comparisons": {side: better[side] for side in BETTER},
    }


def _no_evaluation(folder: Path) -> str:
    return (
        "No evaluation yet: run crag eval QUESTIONS.jsonl on the server's machine (it writes "
        f"in {folder}, the setting eval_dir; a feedback export makes a questions file) and "
        "reload this view."
    )


@dataclass
class _Quality:
    """The routes' handlers, over a feedback store and the deployment settings."""

    store: Callable[[], FeedbackStore]
    deployment: DeploymentSettings | None

    def settings(self) -> DeploymentSettings:
        return self.deployment if self.deployment is not None else deployment_settings()

    async def answer(self, request: Request, action: Callable[[], Response]) -> Response:
        """``action``'s answer (run in a worker thread) for an admin; a refusal otherwise."""
        identity = request.scope.get(IDENTITY_KEY)
        if not isinstance(identity, Identity):
            return _error(401, "sign in first: the quality view is an admin's")
        if not identity.is_admin:
            logger.info("%s, a member, was refused the quality view", identity.user)
            return _error(403, "only an admin may see the quality view: ask one of your admins")
        try:
            return await asyncio.to_thread(action)
        except _Refused as refused:
            return _error(refused.status, str(refused))
        except FeedbackError as exc:
            return _error(exc.status, str(exc))
        except InvalidSettingError as exc:
            return _error(500, f"the server's settings are invalid: {exc}")

    async def view(self, request: Request) -> Response:
        """The counts, the thresholds and the last evaluation."""
        return await self.answer(request, self._view)

    async def picture(self, request: Request) -> Response:
        """The last evaluation's report.svg, as an image that runs nothing."""
        return await self.answer(request, self._picture)

    async def export(self, request: Request) -> Response:
        """The file ``crag feedback export`` writes, as a download."""
        identity = request.scope.get(IDENTITY_KEY)
        response = await self.answer(request, self._export)
        if response.status_code == 200 and isinstance(identity, Identity):
            logger.info("%s downloaded the feedback export", identity.user)
        return response

    def _thresholds(self) -> dict[str, Any]:
        from crag.settings.method import operator_method

        settings = self.settings()
        upper, lower = operator_method().thresholds_for(
            settings.evaluator, settings.evaluator_model
        )
        return {"upper_threshold": upper, "lower_threshold": lower, "evaluator": settings.evaluator}

    def _view(self) -> Response:
        folder = _evaluations_folder(self.settings())
        body: dict[str, Any] = {
            "feedback": feedback_counts(self.store().records(None)),
            "thresholds": self._thresholds(),
            "evaluation": None,
            "note": None,
        }
        run = latest_evaluation(folder)
        if run is None:
            body["note"] = _no_evaluation(folder)
        else:
            try:
                body["evaluation"] = evaluation_view(run)
            except ValueError as exc:
                body["note"] = f"The last evaluation, in {run}, cannot be shown: {exc}."
        return JSONResponse(body, headers=_API_HEADERS)

    def _picture(self) -> Response:
        folder = _evaluations_folder(self.settings())
        run = latest_evaluation(folder)
        if run is None:
            raise _Refused(404, _no_evaluation(folder))
        try:
            content = _read_bytes(run / PICTURE)
        except (OSError, ValueError):
            raise _Refused(
                404, f"the last evaluation, in {run}, has no {PICTURE} that can be read"
            ) from None
        return Response(content, media_type="image/svg+xml", headers=dict(SVG_HEADERS))

    def _export(self) -> Response:
        from crag.app.cli.feedback_command import write_export

        out = io.StringIO()
        write_export(self.store(), out)
        return Response(
            out.getvalue(),
            media_type="application/jsonl",
            headers={**_API_HEADERS, "Content-Disposition": _ATTACHMENT},
        )


def quality_routes(
    store: FeedbackStore | None = None, *, deployment: DeploymentSettings | None = None
) -> list[BaseRoute]:
    """The quality view's routes (see the module), to put before langgraph-api's.

    Args:
        store: Where the feedback records are; ``None``: the served gate's threads database.
        deployment: The settings (``eval_dir``, the evaluator); ``None``: the operator's, read
            at each request.
    """
    quality = _Quality((lambda: store) if store is not None else served_feedback_store, deployment)
    return [
        _route(QUALITY_PATH, quality.view),
        _route(QUALITY_PATH + "/" + PICTURE, quality.picture),
        _route(QUALITY_PATH + "/export", quality.export),
    ]
