"""What each registry row predicts from, in words, built from its family and its config: the one
place the reports, the field CSV's `protocol` column and `replay`'s summary describe a row, and
the one place that warns when a confident-view selection keeps fewer than two views.

A row without views of its own (`Method.augment` None) reads the sample's views only where the
`view_mode` is not "original" or the row boosts (BoostAdapter); with "original" (the cross-dataset
protocol, `EngineConfig`'s default) it predicts from view 0, the original image
(`mstta.families.runner`, `mstta.streams`). The families' own view use is each module's docstring.
"""

from __future__ import annotations

import logging

from .config import EngineConfig
from .families import get_family
from .families.base import CACHE, Method
from .functional import num_selected
from .methods import get_method

log = logging.getLogger(__name__)
UNSTATED = "its {views} views (its family states no more: PREDICTS in its module)"


def _row(method: str | Method) -> Method:
    return get_method(method) if isinstance(method, str) else method


def views_read(method: str | Method, cfg: EngineConfig, views: int) -> int:
    """How many of a sample's `views` the row reads (1 = the original image alone)."""
    m = _row(method)
    if views <= 1 or (m.augment is None and not m.boosting_views and cfg.view_mode == "original"):
        return 1
    return views


def selection(method: str | Method, cfg: EngineConfig) -> tuple[str, float] | None:
    """(key, ratio) of the confident-view selection the row makes of its views, None if it makes none
    (a family's `SELECTION`: the key of its `Params`; the cache family's `view_ratio`)."""
    m = _row(method)
    if m.family == CACHE:
        return ("view_ratio", cfg.view_ratio) if m.boosting_views or cfg.view_mode == "confident" else None
    key = getattr(get_family(m.family), "SELECTION", None)
    return None if key is None else (f"{m.family}.{key}", getattr(getattr(cfg, m.family), key))


def _query(cfg: EngineConfig, v: int) -> str:
    """The cache family's query of a multi-view sample (`functional.form_queries`)."""
    if cfg.view_mode == "original":
        return "the original image"
    if cfg.view_mode == "confident":
        return f"the mean of its {max(1, num_selected(v, cfg.view_ratio))} most confident views"
    return f"its views combined as {cfg.view_mode.upper()} does (view_mode {cfg.view_mode})"


def _kept(m: Method, cfg: EngineConfig, v: int) -> int:
    sel = selection(m, cfg)
    return max(1, num_selected(v, sel[1])) if sel else v


def predicts_from(method: str | Method, cfg: EngineConfig, views: int) -> str:
    """`predicts from ...`: what the row's prediction is computed on, for a sample of `views` views
    (a family's `PREDICTS`; the cache family's query by `view_mode`)."""
    m = _row(method)
    v = views_read(m, cfg, views)
    if v == 1:
        return "predicts from the original image"
    kept = _kept(m, cfg, v)
    fam = None if m.family == CACHE else get_family(m.family)
    text = _query(cfg, v) if fam is None else getattr(fam, "PREDICTS", UNSTATED).format(kept=kept, views=v)
    if m.boosting_views:
        text += f"; its {kept} lowest-entropy views boost a throw-away cache"
    return f"predicts from {text}"


def describe(method: str | Method, cfg: EngineConfig, views: int, kind: str | None, text_set: str) -> str:
    """A row's whole protocol: the views it reads, what it predicts from, its text set."""
    v = views_read(method, cfg, views)
    reads = "1 view (the original image)" if v == 1 else f"{v} {kind or ''} views".replace("  ", " ")
    return f"reads {reads}; {predicts_from(method, cfg, views)}; text set {text_set}"


def few_views(method: str | Method, cfg: EngineConfig, views: int) -> str | None:
    """The warning when the row's confident selection keeps fewer than 2 of its views, else None."""
    sel = selection(method, cfg)
    v = views_read(method, cfg, views)
    if sel is None or v <= 1 or num_selected(v, sel[1]) >= 2:
        return None
    key, ratio = sel
    return (
        f"{_row(method).name}: floor({key} {ratio:g} x {v} views) = {num_selected(v, ratio)}: its confident-view "
        f"selection keeps one view, so it predicts from a single view; give more views (--views), a larger "
        f"{key}, or view_mode=original"
    )


_warned: set[tuple] = set()


def warn_few_views(method: str | Method, cfg: EngineConfig, views: int) -> str | None:
    """Log `few_views`' warning once per (row, setting, views); returns it."""
    note = few_views(method, cfg, views)
    if note is not None and note not in _warned:
        _warned.add(note)
        log.warning(note)
    return note


def clip_path(method: str | Method, cfg: EngineConfig, views: int, kind: str | None = None) -> str:
    """What the row's own CLIP logits (`StepResult.clip_logits`, its λ = 0) are computed on (`kind`:
    the views' augmentation, named where the path reads them; a family's `CLIP_FROM_VIEWS`)."""
    m = _row(method)
    v = views_read(m, cfg, views)
    if m.family == CACHE:
        path = "the original image" if v == 1 else _query(cfg, v)
    elif v > 1 and getattr(get_family(m.family), "CLIP_FROM_VIEWS", False):
        path = f"the mean of its {_kept(m, cfg, v)} most confident views"
    else:
        path = "the original image"
    return path.replace(" views", f" {kind} views", 1) if kind and path != "the original image" else path


def clip_label(method: str | Method, cfg: EngineConfig, views: int) -> str:
    """The label of the CLIP reference a row carries: `zero-shot` on the original image, else what it is."""
    path = clip_path(method, cfg, views)
    return "zero-shot" if path == "the original image" else f"zero-shot CLIP on {path}"
