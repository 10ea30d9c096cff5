"""Every change the UI makes to Gradio's internals, in one module, written for one Gradio major
version (`GRADIO_MAJOR`; pyproject pins it) and checked against the installed one when the app is
built: another major version is one line naming both, never a silent misbehaviour.

    patch_app(demo)     # build_app calls it once the page is laid out

What it changes on a built `gr.Blocks` (nothing global, nothing in Gradio's modules):
- `demo.process_api` is wrapped: before Gradio prepares an event's inputs, every file input is
  checked (a wrong number of inputs; a FileData whose path is a folder or not a regular file; an
  extension outside the component's `file_types`) and refused in one line (`refused ...` in the
  server log, a short message to the client, no traceback). Gradio itself would register such a
  path in its temp files before refusing it, and its periodic cache cleanup then stops on
  `IsADirectoryError` for good; an error Gradio raises while preparing inputs becomes one line too.
- the session State's per-page-load factory is no API endpoint (`api_visibility = "private"`).
And one thing read from Gradio: `served_folder()`, its upload folder (files there are served in
place; the run downloads live there so that deleting them ends their URLs); one thing dropped:
`drop_session_state(demo, hash)`, Gradio's copy of a closed page's session (its State and the last
value of every output), which Gradio would keep an hour, up to 10,000 sessions.
"""

from __future__ import annotations

import functools
import logging
import os
import stat
from pathlib import Path
from typing import Any, Callable

from mstta.errors import UserError

from .guard import first_line

log = logging.getLogger(__name__)

GRADIO_MAJOR = 6  # the major version these patches were written against (pyproject: gradio>=6,<7)


def check_gradio(version: str | None = None) -> None:
    """A one-line UserError unless Gradio's installed (or the given) version is `GRADIO_MAJOR`.x."""
    if version is None:
        import gradio

        version = gradio.__version__
    head = str(version).split(".")[0]
    if not head.isdigit() or int(head) != GRADIO_MAJOR:
        raise UserError(
            f"gradio {version} is installed; the browser UI is written for gradio {GRADIO_MAJOR}.x "
            f"(pip install 'gradio>={GRADIO_MAJOR},<{GRADIO_MAJOR + 1}')"
        )


def served_folder() -> Path:
    """Gradio's upload folder (GRADIO_TEMP_DIR, else <temp>/gradio): a file returned from a handler
    that lies there is served in place, not copied into Gradio's cache."""
    from gradio import utils

    return Path(utils.get_upload_folder())


def drop_session_state(demo: Any, session_hash: str | None) -> bool:
    """Forget Gradio's state of a closed session now (`StateHolder.session_data`: its `gr.State`
    values and every output's last value); True when there was one."""
    holder = getattr(demo, "state_holder", None)
    data = getattr(holder, "session_data", None)
    if not session_hash or data is None:
        return False
    with holder.lock:
        found = data.pop(session_hash, None) is not None
        getattr(holder, "time_last_used", {}).pop(session_hash, None)
    return found


def patch_app(demo: Any, state_factory: Callable | None = None) -> None:
    """Apply every patch to the built `demo` (see the module's docstring); `state_factory` is the
    session State's initial-value class, whose per-page-load event is made private."""
    check_gradio()
    if state_factory is not None:
        for dep in demo.fns.values():
            if getattr(dep, "fn", None) is state_factory:
                dep.api_visibility = "private"
    _wrap_process_api(demo)


def _name(block_fn: Any) -> str:
    return getattr(block_fn, "api_name", None) or getattr(block_fn, "name", None) or "an event"


def _refuse(text: str):
    import gradio as gr

    log.info("refused %s", text)
    return gr.Error(text, print_exception=False)


def _file_payloads(value: Any) -> list[dict]:
    """The FileData objects (dicts with a path and Gradio's FileData meta) in an input value."""
    from gradio_client import utils as client_utils

    found: list[dict] = []

    def keep(d: dict) -> dict:
        found.append(d)
        return d

    client_utils.traverse(value, keep, client_utils.is_file_obj_with_meta)
    return found


def check_file_input(block: Any, payload: dict) -> str | None:
    """Why a FileData `payload` sent to component `block` is refused before Gradio registers it
    (None: Gradio's own checks follow). Only paths in Gradio's upload folder are looked at: Gradio
    refuses any other as not uploaded here (saying no more about it); URLs and inline data are its too."""
    from gradio import utils
    from gradio_client import utils as client_utils

    path = payload.get("path")
    if not isinstance(path, str) or not path or "\0" in path or client_utils.is_http_url_like(path):
        return None
    try:
        if not utils.is_in_or_equal(utils.abspath(path), served_folder()):
            return None
    except (OSError, ValueError):
        return None
    shown = Path(path).name or path[:80]
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None  # absent (or unreadable): Gradio refuses it as not uploaded here
    if stat.S_ISDIR(mode):
        return f"{shown} is a folder; send a file (upload it through /gradio_api/upload first)"
    if not stat.S_ISREG(mode):
        return f"{shown} is not a regular file"
    file_types = getattr(block, "file_types", None)
    if file_types and not client_utils.is_valid_file(path, list(file_types)):
        return f"{shown}: not one of the accepted file types ({', '.join(file_types)})"
    return None


def _wrap_process_api(demo: Any) -> None:
    import gradio as gr

    original = demo.process_api

    @functools.wraps(original)
    async def process_api(*args: Any, **kwargs: Any) -> Any:
        block_fn = kwargs.get("block_fn", args[0] if args else None)
        inputs = kwargs.get("inputs", args[1] if len(args) > 1 else None)
        wanted = list(getattr(block_fn, "inputs", None) or [])
        batch = getattr(block_fn, "batch", False)
        if (
            isinstance(inputs, list) and kwargs.get("iterator") is None and not batch and len(inputs) != len(wanted)
        ):  # Gradio refuses too few with a long message, ignores too many
            names = [n for n in getattr(block_fn, "input_keyword_names", None) or [] if n != "state"]
            shown = len([w for w in wanted if not isinstance(w, gr.State)])
            raise _refuse(
                f"Bad request to {_name(block_fn)}: expected {shown} input values"
                + (f" ({', '.join(names)})" if names else "")
                + f", got {len(inputs)}"
            )
        if isinstance(inputs, list) and not batch:
            for block, value in zip(wanted, inputs):
                for payload in _file_payloads(value):
                    why = check_file_input(block, payload)
                    if why:
                        raise _refuse(f"Bad request to {_name(block_fn)}: {why}")
        try:
            return await original(*args, **kwargs)
        except gr.Error:
            raise
        except Exception as exc:  # Gradio's checks of the request: one line, no traceback
            raise _refuse(f"Bad request to {_name(block_fn)}: {first_line(exc)}") from None

    demo.process_api = process_api
