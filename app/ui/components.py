"""The page's adapted components: each wraps a Gradio component instance's `preprocess`, so what
reaches a handler is checked (or left raw for the handler to check) and a refusal is one line that
names the control, never a traceback. `app.ui.layout` and `app.ui.settings_tab` build with them.

    frame_input(gr.Image(...))   # the frame undecoded: a file path or an inline frame's bytes
    quiet(gr.Checkbox(...))      # refusals in one line naming the control
    Number(...), Dropdown(...)   # a number box as sent (`state.number_control` checks it); a quiet dropdown
"""

from __future__ import annotations

import base64
import binascii
import logging
from typing import Any

import gradio as gr

from mstta.errors import one_line

log = logging.getLogger(__name__)

# Gradio writes a .pyi stub beside any module that subclasses a component, so the two adaptations
# below wrap a component instance's `preprocess` instead.
MAX_INLINE_FRAME = 16 * 1024 * 1024  # bytes of one inline frame (a webcam JPEG is ~50 KB)


def frame_input(image: gr.Image) -> gr.Image:
    """`image` hands the handler the frame undecoded: the uploaded file's path, or the bytes of an
    inline `data:` URL (how the browser's webcam sends frames). The handler reads the header first
    and refuses frames above the pixel limit (`frames.decode_image`)."""

    def preprocess(payload):  # Gradio's ImageData
        if payload is None:
            return None
        if payload.url and payload.url.startswith("data:"):
            header, _, data = payload.url.partition(",")
            if len(data) > MAX_INLINE_FRAME * 4 // 3 + 4 or not header.endswith(";base64"):
                log.info("refused an inline frame: %d characters or not base64", len(data))
                raise gr.Error("the frame is too large or not a base64 image", print_exception=False)
            try:
                return base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                log.info("refused an inline frame: not valid base64")
                raise gr.Error("the frame is not valid base64", print_exception=False) from None
        return payload.path

    image.preprocess = preprocess
    return image


def quiet(component: Any) -> Any:
    """`component` whose refusals (a value of the wrong type, out of its range, not among its
    choices) are one server line and a message naming the control: Gradio's own checks raise errors
    that it would print with a full traceback."""
    checked = component.preprocess

    def preprocess(payload):  # the component's payload
        try:
            return checked(payload)
        except Exception as exc:  # any refusal of the payload becomes one line
            text = f"{component.label}: {exc.message if isinstance(exc, gr.Error) else one_line(exc)[:200]}"
            log.info("refused %s", text)
            raise gr.Error(text, print_exception=False) from None

    component.preprocess = preprocess
    return component


def Number(*args: Any, **kwargs: Any) -> gr.Number:  # stands for the component
    """A number box whose value reaches the handler as sent: `state.number_control` checks it and
    names the control (a typed 100 is refused, never clamped; "abc", NaN, null or [3] likewise)."""
    box = gr.Number(*args, **kwargs)
    box.preprocess = lambda payload: payload
    return box


def Dropdown(*args: Any, **kwargs: Any) -> gr.Dropdown:
    """A dropdown whose refusals are one line naming it (`quiet`)."""
    return quiet(gr.Dropdown(*args, **kwargs))
