"""The Settings tab's model choice: which models this machine can load offline, and the loaded
models every session shares (at most `MAX_LOADED`, keyed by model + weights).

    choices = model_choices(("mstta-digits", "bundled"))  # [(label, "mstta-digits (bundled)"), ...]
    key = parse_value("mstta-tiny (random weights)", default)  # ("mstta-tiny", "none"); any value not
                                                          # offered is one line, the same for every one
    models = SharedModels(device="cpu", precision="fp32", first=clip)
    clip = models.get(key)                                # loaded once, shared

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
TINY = ("mstta-tiny", "none")
RANDOM_MARK = "RANDOM WEIGHTS"
MODEL_LABEL = "Model (weights on this machine only; nothing is downloaded)"
LOAD_FACTOR = 2.5  # a load holds the checkpoint and the built model at once (+ slack)
UNKNOWN_BYTES = 2 * 10**9  # a model whose weight file size is not known here
# every value that is not an offered choice gets this one line, before any file is looked at: the
# words never depend on whether a path exists, is readable or is a checkpoint
NOT_OFFERED = "Model: not one of the offered models; pick one from the Model list (the UI loads nothing else)"


def tag_of(pretrained: str) -> str:
    """The weights' name as the page shows it: the tag, or the bare file name of a server-side checkpoint."""
    if pretrained in ("none", ""):
        return "random weights"
    return Path(pretrained).name if ("/" in pretrained or "\\" in pretrained) else pretrained


def value_of(model: str, pretrained: str) -> str:
    """A choice's value, by model and tag ("ViT-B-16 (openai)"), never by path."""
    return f"{model} ({tag_of(pretrained)})"


def label_of(model: str, pretrained: str) -> str:
    if pretrained in ("none", ""):
        return f"{model} ({RANDOM_MARK}: for trying the UI only)"
    if models.bundled_checkpoint(model) is not None and pretrained == models.BUNDLED_TAG:
        return f"{model} (bundled: handwritten digits, offline)"
    return value_of(model, pretrained)


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


def _fixed_pairs(current: tuple[str, str] | None) -> list[tuple[str, str]]:
    """The choices known without looking at the weights cache: `current`, the bundled model(s), mstta-tiny."""
    pairs: list[tuple[str, str]] = [current] if current else []
    pairs += [(name, models.BUNDLED_TAG) for name, path in models.BUNDLED_CHECKPOINTS.items() if path.is_file()]
    return pairs + [TINY]


def model_choices(current: tuple[str, str] | None = None) -> list[tuple[str, str]]:
    """The dropdown's (label, value) pairs: `current` first, the bundled digits model, cached open_clip
    weights, then mstta-tiny with random weights."""
    fixed = _fixed_pairs(current)
    unique = list(dict.fromkeys(fixed[:-1] + cached_pairs() + fixed[-1:]))
    return [(label_of(m, p), value_of(m, p)) for m, p in unique]


def parse_value(value: Any, default: tuple[str, str]) -> tuple[str, str]:
    """The (model, pretrained) of an offered choice's value; empty means `default` (the server's own).

    Checked against the list before anything is read: the server's model, the bundled one and
    mstta-tiny by their values, else an open_clip (architecture, tag) pair of its registry (names,
    never paths) whose weights are in the local cache. Anything else is `NOT_OFFERED`, in the same
    words whatever it names."""
    if value is None or value == "":
        return default
    if not isinstance(value, str):
        raise UserError(NOT_OFFERED)
    for pair in _fixed_pairs(default):
        if value == value_of(*pair):
            return pair
    import open_clip

    for pair in open_clip.list_pretrained():
        if value == value_of(*pair) and weights.weights_cached(*pair):
            return pair
    raise UserError(NOT_OFFERED)


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
        "Images per frame fed to the encoder: the frame plus V-1 random crops, encoded together. What they "
        "cost is measured, not assumed: the ms per frame under the frame is timed with the views chosen; "
        "compare it with a 1-view run."
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
