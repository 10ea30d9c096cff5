"""The Settings tab: the labels and prompt template, the method and the methods raced beside it,
"Forget old scenes" (`app.forgetting`), the method's hyperparameters, the model and the views per
frame, Apply and Reset (components only; `app.ui.events` wires them, `app.ui.state.Settings` reads
them back).
"""

from __future__ import annotations

from typing import Any, Sequence

import gradio as gr

from mstta.engine.config import EngineConfig
from mstta.engine.methods import get_method, list_methods

from ..forgetting import CHOICES, RECOMMENDED_HORIZON, choice_of, racer_title
from ..session import MAX_METHODS
from .components import Dropdown, Number, quiet
from .handlers import method_info
from .models import MODEL_LABEL, model_choices, model_note, value_of, views_note
from .state import CONTROLS, FORGET_LABEL, RACE_LABEL, SESSION_BANK_LIMIT, VIEWS_LABEL


def method_choices(entries: Sequence[str] = ()) -> list[tuple[str, str]]:
    """Every method as (title, name), for the Method and Race dropdowns, after the raced `entries` that
    are not registry names (NAME@CHOICE: a method with its own forgetting, as the bundled race)."""
    names = list_methods()
    extra = [(racer_title(e), e) for e in dict.fromkeys(entries) if e not in names]
    return extra + [(get_method(name).title, name) for name in names]


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
        c["forget"] = forget_control(base)
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
        method=Dropdown(
            method_choices([method, *race]), value=method, label="Method", info=summary, elem_id="mstta-method"
        ),
        race=Dropdown(
            method_choices([method, *race]),
            value=list(race),
            multiselect=True,
            max_choices=MAX_METHODS - 1,
            label=RACE_LABEL,
            info="Each one adapts on the same features of the same frames (one encoder pass); "
            "the leaderboard and the accuracy plot show them all",
            elem_id="mstta-race",
        ),
    )


SHORT = {"off": "off", "recommended": "the recommended rule", "detect": "the rule + detect cuts"}


def forget_control(base: EngineConfig) -> Any:
    """ "Forget old scenes": off, the engine's recommended rule, or that rule + a reset at detected cuts."""
    return quiet(
        gr.Radio(
            [(SHORT[c], c) for c in CHOICES],
            value=choice_of(base),
            label=FORGET_LABEL,
            info=f"Recommended: cache entries age (horizon {RECOMMENDED_HORIZON} frames); detect: also a reset at "
            "each detected scene cut (marked on the gain plot). For every method that keeps state, except a "
            "raced entry with its own choice (the bundled race's two MS-TTA)",
            elem_id="mstta-forget",
        )
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
