"""`mstta-demo --bundled-demo`: the bundled clip with a model this machine can run, online or not.

    note = apply_bundled(args)      # fills args.model/.pretrained and args.video/.labels/.truth

OpenAI's ViT-B-16 plays `assets/demo.mp4` (nine photographs under a strengthening shift) when its
weights are already in the local cache (`mstta.features.weights.weights_cached`; nothing is downloaded to
find out). Otherwise the project's own small digits CLIP (`--model mstta-digits --pretrained bundled`:
`assets/mstta-digits.pt`, trained on scikit-learn's handwritten digits by `assets/make_digits.py`)
plays `assets/digits.mp4`, a clip of digits with two scene changes, and `apply_bundled`
returns the one line that says so. An
explicit `--model`/`--pretrained` replaces the model part, an explicit `--video`/`--camera` the
clip part (with the user's own `--labels`/`--truth`). Without `--method`/`--methods` it races MS-TTA
as the paper runs it against MS-TTA with the engine's recommended forgetting (`BUNDLED_RACE`; CLIP is
the reference of every race). A missing asset is a one-line `UserError` naming it and the command
that makes it.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from mstta.errors import UserError
from mstta.features.models import ASSETS_DIR, DEFAULT_MODEL, DEFAULT_TAG

from .forgetting import BUNDLED_RACE

FLAG = "--bundled-demo"


@dataclass(frozen=True)
class BundledDemo:
    """A model and the bundled clip it plays (file names under `assets/`)."""

    model: str
    pretrained: str  # the pretrained tag it loads with
    video: str
    labels: str
    truth: str
    make: str  # the command that (re)makes these assets
    checkpoint: str | None = None  # a checkpoint the project ships under assets/ (None: open_clip's cache)


CLIP_DEMO = BundledDemo(
    DEFAULT_MODEL, DEFAULT_TAG, "demo.mp4", "labels.txt", "truth.csv", "python assets/make_assets.py"
)
DIGITS_DEMO = BundledDemo(
    "mstta-digits",
    "bundled",
    "digits.mp4",
    "digits_labels.txt",
    "digits_truth.csv",
    "python assets/make_digits.py",
    checkpoint="mstta-digits.pt",
)


def choose_demo() -> BundledDemo:
    """CLIP's demo when ViT-B-16/openai weights are on local disk, else the digits demo."""
    from mstta.features import weights

    return CLIP_DEMO if weights.weights_cached(CLIP_DEMO.model, CLIP_DEMO.pretrained) else DIGITS_DEMO


def _shown(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return rel if not rel.startswith("..") else str(path)


def _check_model(demo: BundledDemo, assets: Path) -> None:
    """A shipped model needs its config (open_clip knows the name) and its checkpoint under assets/."""
    if demo.checkpoint is None:
        return
    from mstta.features import models

    path = assets / demo.checkpoint
    if demo.model not in models.list_models() or not path.is_file():
        raise UserError(
            f"{FLAG}: the bundled model {demo.model} is missing (its config, and its checkpoint "
            f"{_shown(path)}); make it with: {demo.make}"
        )


def apply_bundled(args: argparse.Namespace, assets: Path | None = None) -> str | None:
    """Fill in what the user left out from the chosen demo; the one line to print when the
    offline fallback (the digits demo) was taken, else None."""
    assets = ASSETS_DIR if assets is None else assets
    model_given = args.model is not None or args.pretrained is not None
    clip_given = args.video is not None or args.camera is not None
    if getattr(args, "methods", None) is None and getattr(args, "method", None) is None:
        args.methods = BUNDLED_RACE  # MS-TTA as the paper runs it against MS-TTA with the recommended forgetting
    if model_given and clip_given:
        return None
    demo = choose_demo()
    if not clip_given:
        paths = {name: assets / getattr(demo, name) for name in ("video", "labels", "truth")}
        for name, path in paths.items():
            if not path.is_file():
                raise UserError(f"{FLAG}: the bundled {name} file {_shown(path)} is missing; make it with: {demo.make}")
        args.video, args.labels, args.truth = (str(paths[n]) for n in ("video", "labels", "truth"))
    if not model_given:
        _check_model(demo, assets)
        args.model, args.pretrained = demo.model, demo.pretrained
    if demo is CLIP_DEMO:
        return None
    played = "its clip " + _shown(Path(args.video)) if not clip_given else "your source"
    return (
        f"{CLIP_DEMO.model} ({CLIP_DEMO.pretrained}) weights are not in the local cache: playing the bundled "
        f"digits demo instead ({args.model} on {played})"
    )
