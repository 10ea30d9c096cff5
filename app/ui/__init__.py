"""The browser UI of `mstta-demo`: zero-shot CLIP and the adapted method side by side, live.

    demo = build_app(clip, labels=["cat", "dog"], video="clip.mp4")   # a gr.Blocks; nothing runs yet
    demo.queue(max_size=16).launch(**launch_options("127.0.0.1", 7860))

`mstta-demo` without --headless calls `add_ui_arguments(parser)` while it builds its parser and
`run_ui(args)` to run: the flags are checked by the headless pipeline's `prepare`, the model loads
once, the app binds 127.0.0.1:7860 by default, the URL is printed and the server runs until Ctrl-C.

The package: `state` (one `UISession` per browser session with its `History`, the session cap,
the shared model slots, the settings form as `Settings`), `handlers` (what each control does:
functions over a `Context`, a session and its named inputs), `video` (a video run: the pipeline's
`iter_steps` over a paced source, `app.pacing`), `recording` (the run's MP4 and JSONL downloads),
`page` (the page's content by output name), `plots` (server-drawn SVG charts), `layout` (the
components, as one `Components`), `events` (`build_app`: layout + wiring by concern), `guard`
(HTTP-level refusals in one line), `gradio_patches` (every patch of Gradio's internals, checked
against its major version) and `serving` (flags, launch options, serving).
Gradio is imported only when the UI is built, so the headless demo and `--help` stay fast.
"""

from .serving import add_ui_arguments, launch_options, resolve_port, run_ui

__all__ = ["OUTPUTS", "add_ui_arguments", "build_app", "launch_options", "resolve_port", "run_ui"]


def __getattr__(name: str):
    if name == "OUTPUTS":  # the page's output names, in order (gradio_client users get them so)
        from .page import OUTPUTS

        return OUTPUTS
    raise AttributeError(name)


def build_app(clip, **kwargs):
    """The UI as a `gr.Blocks` (see `app.ui.events.build_app`)."""
    from .events import build_app as build

    return build(clip, **kwargs)
