"""Requests the handlers never see, refused in one line: HTTP requests that fail before any
handler runs (an unknown API name, an unknown event id, an upload the client dropped), and the
wording of Gradio's own input checks (`first_line`; `gradio_patches` refuses those before they run).

    demo.launch(app_kwargs={"middleware": [Middleware(QuietErrors)]})   # launch_options does this

Each refusal is one server log line (`refused ...`) and a short message to the client, never a
traceback; the server stays up and the session is left as it was.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from mstta.errors import one_line

log = logging.getLogger(__name__)


# Gradio's long messages for the usual bad requests, said in one short line
_SHORTER = (
    (
        re.compile(r"didn't receive enough input values \(needed: (\d+), got: (\d+)\)"),
        r"expected \1 input values, got \2",
    ),
    (
        re.compile(r"Cannot move (.+?) to the gradio cache dir because it was not uploaded by a user"),
        r"\1 was not uploaded here; send files through /gradio_api/upload first",
    ),
    (
        re.compile(r"Cannot move (.+?) to the gradio cache dir because it is located in one of the blocked_paths"),
        r"\1 may not be read",
    ),
    (
        re.compile(r"validation error for FileData"),
        "a file input must be a FileData object ({path, meta: {_type: gradio.FileData}}) of an uploaded file",
    ),
)


def first_line(exc: BaseException) -> str:
    text = one_line(exc) or type(exc).__name__
    for pattern, replacement in _SHORTER:
        found = pattern.search(text)
        if found:
            return found.expand(replacement)[:200] if "\\" in replacement else replacement
    return text[:200]


class QuietErrors:
    """ASGI middleware: an exception escaping an HTTP request is one server line and a short JSON
    error (404 for an unknown API name or event, 400 for a dropped or malformed upload, else 500)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        started = finished = False

        async def tracked(message: dict) -> None:
            nonlocal started, finished
            if message.get("type") == "http.response.start":
                started = True
            elif message.get("type") == "http.response.body" and not message.get("more_body", False):
                finished = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:  # any request's failure: one line, no traceback
            status, text = _classify(exc, scope.get("path", ""))
            log.info(
                "refused %s %s: %s (%s)", scope.get("method", "?"), scope.get("path", "?")[:200], text, first_line(exc)
            )
            if not started:
                body = json.dumps({"error": text}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": status,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
            elif not finished:  # a stream (server-sent events) already going: end it with an error event
                event = f"event: error\ndata: {json.dumps(text)}\n\n".encode()
                await send({"type": "http.response.body", "body": event, "more_body": False})


def _classify(exc: Exception, path: str) -> tuple[int, str]:
    name = type(exc).__name__
    if name in ("ClientDisconnect", "MultiPartException", "MultipartParseError") or "upload" in path:
        return 400, "the upload was incomplete or malformed; send the file again"
    if isinstance(exc, (KeyError, LookupError)) or "/call/" in path:
        return 404, "no such API endpoint or event; see /gradio_api/info for the endpoints"
    return 500, "the server could not handle this request; details are in its log"
