"""Requests the handlers never see, refused in one line: Gradio's own checks (a wrong number of
inputs, a value of the wrong type, a file path the client may not use) and HTTP requests that fail
before any handler runs (an unknown API name, an unknown event id, an upload the client dropped).

    guard_api(demo)                                   # after build_app: errors while Gradio prepares inputs
    demo.launch(app_kwargs={"middleware": [Middleware(QuietErrors)]})   # launch_options does this

Each refusal is one server log line (`refused ...`) and a short message to the client, never a
traceback; the server stays up and the session is left as it was.
"""
from __future__ import annotations

import functools
import json
import logging
import re
from typing import Any

from mstta.errors import one_line

log = logging.getLogger(__name__)


# Gradio's long messages for the usual bad requests, said in one short line
_SHORTER = (
    (re.compile(r"didn't receive enough input values \(needed: (\d+), got: (\d+)\)"),
     r"expected \1 input values, got \2"),
    (re.compile(r"Cannot move (.+?) to the gradio cache dir because it was not uploaded by a user"),
     r"\1 was not uploaded here; send files through /gradio_api/upload first"),
    (re.compile(r"Cannot move (.+?) to the gradio cache dir because it is located in one of the blocked_paths"),
     r"\1 may not be read"),
    (re.compile(r"validation error for FileData"),
     "a file input must be a FileData object ({path, meta: {_type: gradio.FileData}}) of an uploaded file"),
)


def _first_line(exc: BaseException) -> str:
    text = one_line(exc) or type(exc).__name__
    for pattern, replacement in _SHORTER:
        found = pattern.search(text)
        if found:
            return found.expand(replacement)[:200] if "\\" in replacement else replacement
    return text[:200]


def guard_api(demo: Any) -> None:
    """Wrap `demo.process_api`: an exception outside the handlers (which catch their own) becomes a
    `gr.Error` with one line naming the endpoint, logged once, printed without traceback."""
    import gradio as gr

    original = demo.process_api

    @functools.wraps(original)
    async def process_api(*args: Any, **kwargs: Any) -> Any:
        block_fn = kwargs.get("block_fn", args[0] if args else None)
        inputs = kwargs.get("inputs", args[1] if len(args) > 1 else None)
        wanted = list(getattr(block_fn, "inputs", None) or [])
        if (isinstance(inputs, list) and kwargs.get("iterator") is None and not getattr(block_fn, "batch", False)
                and len(inputs) != len(wanted)):   # Gradio refuses too few with a long message, ignores too many
            names = [n for n in getattr(block_fn, "input_keyword_names", None) or [] if n != "state"]
            shown = len([w for w in wanted if not isinstance(w, gr.State)])
            name = getattr(block_fn, "api_name", None) or getattr(block_fn, "name", None) or "an event"
            text = (f"Bad request to {name}: expected {shown} input values" + (f" ({', '.join(names)})" if names
                    else "") + f", got {len(inputs)}")
            log.info("refused %s", text)
            raise gr.Error(text, print_exception=False)
        try:
            return await original(*args, **kwargs)
        except gr.Error:
            raise
        except Exception as exc:  # Gradio's checks of the request: one line, no traceback
            name = getattr(block_fn, "api_name", None) or getattr(block_fn, "name", None) or "an event"
            text = f"Bad request to {name}: {_first_line(exc)}"
            log.info("refused %s", text)
            raise gr.Error(text, print_exception=False) from None

    demo.process_api = process_api


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
            log.info("refused %s %s: %s (%s)", scope.get("method", "?"), scope.get("path", "?")[:200], text,
                     _first_line(exc))
            if not started:
                body = json.dumps({"error": text}).encode()
                await send({"type": "http.response.start", "status": status,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
            elif not finished:   # a stream (server-sent events) already going: end it with an error event
                event = f"event: error\ndata: {json.dumps(text)}\n\n".encode()
                await send({"type": "http.response.body", "body": event, "more_body": False})


def _classify(exc: Exception, path: str) -> tuple[int, str]:
    name = type(exc).__name__
    if name in ("ClientDisconnect", "MultiPartException", "MultipartParseError") or "upload" in path:
        return 400, "the upload was incomplete or malformed; send the file again"
    if isinstance(exc, (KeyError, LookupError)) or "/call/" in path:
        return 404, "no such API endpoint or event; see /gradio_api/info for the endpoints"
    return 500, "the server could not handle this request; details are in its log"
