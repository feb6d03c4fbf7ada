"""One whole response sent on a raw ASGI ``send``, as the server's own routes answer."""

from __future__ import annotations

from starlette.types import Send


async def send_response(
    send: Send,
    status: int,
    body: bytes,
    media: bytes,
    extra: list[tuple[bytes, bytes]],
    *,
    head: bool = False,
) -> None:
    """``body`` with ``status``: never cached nor sniffed, ``extra`` headers added.

    ``head``: the headers of ``body`` (its length included) without the body, for ``HEAD``.
    """
    headers = [
        (b"content-type", media),
        (b"content-length", b"%d" % len(body)),
        (b"cache-control", b"no-store"),
        (b"x-content-type-options", b"nosniff"),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})
