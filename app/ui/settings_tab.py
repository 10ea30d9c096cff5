"""The Settings tab: the labels and prompt template, the method and the methods raced beside it,
the method's hyperparameters, the model and the views per frame, Apply and Reset (components only;
`app.ui.events` wires them, `app.ui.state.Settings` reads them back).
"""

from __future__ import annotations

from typing import Any, Sequence

import gradio as gr

from mstta.engine.config import EngineConfig
from mstta.engine.methods import get_method, list_methods

from ..session import MAX_METHODS
from .components import Dropdown, Number, quiet
from .handlers import method_info
from .models import MODEL_LABEL, model_choices, model_note, value_of, views_note
from .state import CONTROLS, RACE_LABEL, SESSION_BANK_LIMIT, VIEWS_LABEL


def method_choices() -> list[tuple[str, str]]:
    """Every method as (title, name), for the Method and Race dropdowns."""
    return [(get_method(name).title, name) for name in list_methods()]


def settings_tab(
    labels: Sequence[str] | None,
    template: str | None,
    method: str,
    race: Sequence[str],
    base: EngineConfig,
    model: tuple[str, str],
    views: int,
) -> dict:
    """The Settings tab's components by name (in page order), each control's note for `method`."""
    summary, notes = method_info(method)
    with gr.Tab("Settings", id="settings-tab", elem_id="mstta-settings-tab"):
        c = _stream_inputs(labels, template, method, race, summary)
        c |= _hyperparameters(base, notes)
        c |= _model_and_views(model, views)
        with gr.Row():
            c["apply"] = gr.Button("Apply labels and settings", elem_id="mstta-apply")
            c["reset"] = gr.Button("↺ Reset adaptation", elem_id="mstta-reset")
    return c


def _stream_inputs(
    labels: Sequence[str] | None, template: str | None, method: str, race: Sequence[str], summary: str
) -> dict:
    """Keep adapting across videos, the labels, the prompt template, the method and the raced ones."""
    return dict(
        keep=quiet(
            gr.Checkbox(
                False,
                label="Keep adapting across videos",
                elem_id="mstta-keep",
                info="Off: each new video or source starts a fresh stream (empty cache and bank)",
            )
        ),
        labels=quiet(
            gr.Textbox(
                value="\n".join(labels or []),
                lines=4,
                max_lines=12,
                elem_id="mstta-labels",
                label="Labels (one class per line)",
                placeholder="cat\ndog\nbird",
            )
        ),
        template=quiet(
            gr.Textbox(
                value=template or "",
                label="Prompt template (empty: built-in ensemble)",
                placeholder="a photo of a {}.",
                elem_id="mstta-template",
            )
        ),
        method=Dropdown(method_choices(), value=method, label="Method", info=summary, elem_id="mstta-method"),
        race=Dropdown(
            method_choices(),
            value=list(race),
            multiselect=True,
            max_choices=MAX_METHODS - 1,
            label=RACE_LABEL,
            info="Each one adapts on the same features of the same frames (one encoder pass); "
            "the leaderboard and the accuracy plot show them all",
            elem_id="mstta-race",
        ),
    )


def _hyperparameters(base: EngineConfig, notes: dict[str, tuple[str, bool]]) -> dict:
    """The method's numbers (k, alpha, lambda, Q) in a row, then the bank size; unused ones off, with their note."""
    values = dict(
        k=base.k,
        alpha=base.alpha,
        lam=base.lam,
        capacity=base.capacity,
        bank=min(base.bank_size or SESSION_BANK_LIMIT, SESSION_BANK_LIMIT),
    )
    c: dict[str, Any] = {}
    with gr.Row():
        for name in ("k", "alpha", "lam", "capacity"):
            note, used = notes[name]
            c[name] = Number(
                value=values[name],
                label=CONTROLS[name][0],
                info=note,
                interactive=used,
                elem_id=f"mstta-{name}",
                min_width=120,
            )
    note, used = notes["bank"]
    c["bank"] = Number(
        value=values["bank"],
        label=f"Bank size (features; at most {SESSION_BANK_LIMIT:,} per session)",
        info=note,
        interactive=used,
        elem_id="mstta-bank",
    )
    return c


def _model_and_views(model: tuple[str, str], views: int) -> dict:
    """The model (its choices and cost note) and the views per frame (their note for that model)."""
    return dict(
        model=Dropdown(
            model_choices(model),
            value=value_of(*model),
            label=MODEL_LABEL,
            info=model_note(model),
            allow_custom_value=True,  # "" (the server's own) from API clients; `models.parse_value` checks
            elem_id="mstta-model",
        ),
        views=Number(
            value=views,
            label=VIEWS_LABEL,
            info=views_note(model[0]),
            precision=0,
            elem_id="mstta-views",
        ),
    )
