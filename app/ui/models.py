"""The Settings tab's model choice: which models this machine can load offline, and the loaded
models every session shares (at most `MAX_LOADED`, keyed by model + weights).

    choices = model_choices(("mstta-digits", "bundled"))  # [(label, "model|pretrained"), ...]
    models = SharedModels(device="cpu", precision="fp32", first=clip)
    clip = models.get("mstta-tiny|none")                  # loaded once, shared; a model not on
                                                          # local disk is a one-line UserError

Offered: the bundled digits model (its checkpoint under assets/), every open_clip (architecture,
tag) whose weights are already in the local cache (`mstta.features.weights.weights_cached`, as
`app.bundled` decides; nothing is downloaded, nothing probed on the network), and `mstta-tiny`
with random weights (marked). Gradio-free.
"""

from __future__ import annotations

import collections
import threading
from pathlib import Path
from typing import Any, Callable

from mstta.errors import UserError
from mstta.features import models, weights
from mstta.safety import check_memory

MAX_LOADED = 2  # models held in memory at once, all sessions together
SEP = "|"  # a choice's value: "<model>|<pretrained>"
TINY = ("mstta-tiny", "none")
RANDOM_MARK = "RANDOM WEIGHTS"
MODEL_LABEL = "Model (weights on this machine only; nothing is downloaded)"
LOAD_FACTOR = 2.5  # a load holds the checkpoint and the built model at once (+ slack)
UNKNOWN_BYTES = 2 * 10**9  # a model whose weight file size is not known here


def value_of(model: str, pretrained: str) -> str:
    return f"{model}{SEP}{pretrained}"


def parse_value(value: Any, default: tuple[str, str]) -> tuple[str, str]:
    """A choice's value as (model, pretrained); empty means `default` (the model the server started with)."""
    if value is None or value == "":
        return default
    if not isinstance(value, str) or value.count(SEP) != 1 or not all(value.split(SEP)):
        shown = str(value)[:60]
        raise UserError(f"Model: {shown!r} is not a choice of the list (expected model{SEP}pretrained)")
    model, pretrained = value.split(SEP)
    return model, pretrained


def label_of(model: str, pretrained: str) -> str:
    if pretrained in ("none", ""):
        return f"{model} ({RANDOM_MARK}: for trying the UI only)"
    if models.bundled_checkpoint(model) is not None and pretrained == models.BUNDLED_TAG:
        return f"{model} (bundled: handwritten digits, offline)"
    return f"{model} ({pretrained})"


def cached_pairs() -> list[tuple[str, str]]:
    """Every open_clip (architecture, tag) whose weights are on local disk now."""
    import open_clip

    found = []
    for name, tag in open_clip.list_pretrained():
        try:
            if weights.weights_cached(name, tag):
                found.append((name, tag))
        except Exception:  # a registry row this open_clip cannot describe: not offered
            continue
    return found


def model_choices(current: tuple[str, str] | None = None) -> list[tuple[str, str]]:
    """The dropdown's (label, value) pairs: `current` first, the bundled digits model, cached open_clip
    weights, then mstta-tiny with random weights."""
    pairs: list[tuple[str, str]] = [current] if current else []
    for name, path in models.BUNDLED_CHECKPOINTS.items():
        if path.is_file():
            pairs.append((name, models.BUNDLED_TAG))
    pairs += cached_pairs()
    pairs.append(TINY)
    unique = list(dict.fromkeys(pairs))
    return [(label_of(m, p), value_of(m, p)) for m, p in unique]


def weights_file(model: str, pretrained: str) -> Path | None:
    """The local file the weights load from (None: random weights, or not found on this machine)."""
    if pretrained in ("none", ""):
        return None
    if pretrained == models.BUNDLED_TAG and models.bundled_checkpoint(model) is not None:
        return models.bundled_checkpoint(model)
    path = Path(pretrained).expanduser()
    if path.suffix in (".pt", ".pth", ".bin", ".safetensors", ".ckpt") or path.is_file():
        return path
    return weights.cached_weights_file(model, pretrained)


def check_available(model: str, pretrained: str) -> None:
    """A one-line UserError unless (model, pretrained) loads from this machine alone."""
    if model not in models.list_models():
        raise UserError(f"Model: {model} is not a model open_clip knows here; pick one from the list")
    if pretrained in ("none", ""):
        return
    path = weights_file(model, pretrained)
    if path is None or not path.is_file():
        raise UserError(
            f"Model: the weights of {model} ({pretrained}) are not on this machine and the UI never "
            f"downloads; fetch them once (mstta-demo --model {model} --pretrained {pretrained}) or pick "
            "another model"
        )


def load_bytes(model: str, pretrained: str) -> float:
    """Memory a load of these weights needs, estimated from the weight file's size."""
    path = weights_file(model, pretrained)
    if path is not None and path.is_file():
        return LOAD_FACTOR * path.stat().st_size
    return 0.0 if pretrained in ("none", "") and model == TINY[0] else UNKNOWN_BYTES


class SharedModels:
    """Loaded models by (model, pretrained), shared by every session; the least recently asked for
    is dropped beyond `limit` (a session still using it keeps its own reference until it switches)."""

    def __init__(
        self,
        device: Any = "auto",
        precision: str | None = None,
        first: Any = None,
        limit: int = MAX_LOADED,
        loader: Callable[..., Any] = models.load_clip,
    ):
        self.device, self.precision, self.limit, self.loader = device, precision, limit, loader
        self._loaded: collections.OrderedDict[tuple[str, str], Any] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.default = TINY
        if first is not None:
            self.default = (getattr(first, "name", "?"), str(getattr(first, "pretrained", None) or "none"))
            self._loaded[self.default] = first

    def loaded(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._loaded)

    def get(self, key: tuple[str, str]) -> Any:
        """The loaded model for `key`, loading it (after the offline and memory checks) if needed."""
        with self._lock:  # one load at a time: two sessions asking for one model load it once
            if key in self._loaded:
                self._loaded.move_to_end(key)
                return self._loaded[key]
            model, pretrained = key
            check_available(model, pretrained)
            check_memory(
                load_bytes(model, pretrained),
                f"Model: loading {model} ({pretrained})",
                fix="pick a smaller model",
            )
            while len(self._loaded) >= self.limit:  # make room before loading
                self._loaded.popitem(last=False)
            clip = self.loader(model, pretrained, device=self.device, precision=self.precision)
            self._loaded[key] = clip
            return clip


def views_note(model: str, views: int | None = None) -> str:
    """The views control's note: what V views cost, and where crops hurt."""
    note = (
        "Images per frame fed to the encoder: the frame plus V-1 random crops. Cost: V encoder passes "
        "per frame (about V times the 1-view ms per frame shown under the frame)."
    )
    if model in models.BUNDLED_CHECKPOINTS:
        note += (
            f" With {model}, keep 1: random crops cut a digit apart (extra views about halve both accuracies "
            "on the bundled clip)."
        )
    return note


def model_note(key: tuple[str, str]) -> str:
    """The model control's note: what the choice costs, and the random-weights mark."""
    model, pretrained = key
    if pretrained in ("none", ""):
        return f"{RANDOM_MARK}: predictions are meaningless (a tiny model for trying the UI fast)."
    path = weights_file(model, pretrained)
    size = f"{path.stat().st_size / 1e6:,.0f} MB of weights; " if path is not None and path.is_file() else ""
    return (
        f"{size}one encoder pass per view per frame (the ms per frame under the frame is this model's, "
        f"measured); a switch loads it once for every session (at most {MAX_LOADED} loaded) and starts "
        "the adaptation afresh."
    )


def crop_warning(model: str, views: int) -> str:
    """The status line's word on views that hurt this model ('' when they do not)."""
    if views > 1 and model in models.BUNDLED_CHECKPOINTS:
        return f"Note: {views} views on {model}: random crops cut a digit apart (about halves accuracy); 1 is best."
    return ""
