"""End-to-end speed and memory per method, as the paper's efficiency table: batch 1, per sample
make the views the method uses, encode them in one forward, then `Engine.step`.

Images are decoded before timing (disk speed is not the method's); view making, the encoder and
the adaptation step are timed. Views per method: zero-shot and the cache methods in `original`
view mode encode the original image only; the others encode every configured view.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any, Sequence

import torch

from ..config import EngineConfig
from ..engine import Engine
from ..errors import UserError
from ..features import load_features
from ..methods import get_method
from .memory import MemoryMeter
from .results import fingerprint

if TYPE_CHECKING:
    from .runner import _Run
    from .store import Backbone

log = logging.getLogger(__name__)

WARMUP = 2   # untimed samples per method (CUDA kernels, allocator)


def views_used(method: str, ecfg: EngineConfig, views: int) -> int:
    """How many images per sample a method actually encodes."""
    m = get_method(method)
    if method == "zero-shot" or (ecfg.view_mode == "original" and not m.boost):
        return 1
    return views


def measure_method(clip, images: Sequence, text: torch.Tensor, method: str, ecfg: EngineConfig,
                   views: int, augment: str, seed: int = 1) -> dict[str, Any]:
    """Time `len(images)` samples of one method end to end (after WARMUP untimed ones).
    -> {"fps", "peak_memory_mb", "memory_kind", "samples", "views"}."""
    from ..views import ViewMaker, split_preprocess, to_pixels

    geometry, size, mean, std = split_preprocess(clip.preprocess)
    v = views_used(method, ecfg, views)
    make = ViewMaker(geometry, size, v, augment, seed)
    engine = Engine(text.to(clip.device), method, ecfg)

    def one(i: int, img) -> int:
        x = to_pixels(make(img, i), mean, std, clip.device, clip.dtype)
        return engine.step(clip.encode_images(x)).prediction   # .prediction syncs the device

    for i, img in enumerate(images[:WARMUP]):
        one(i, img)
    engine.reset()
    meter = MemoryMeter(clip.device)
    with meter:
        t0 = time.perf_counter()
        for i, img in enumerate(images):
            one(i, img)
        seconds = time.perf_counter() - t0
    return {"fps": round(len(images) / seconds, 3) if seconds > 0 else None, "peak_memory_mb": meter.peak_mb,
            "memory_kind": meter.kind, "samples": len(images), "views": v}


def load_images(split, n: int, seed: int = 1) -> list:
    """The first n images of a test split's stream (its seeded shuffle), decoded to RGB."""
    from PIL import Image

    from ..extract import stream_order

    out = []
    for i in stream_order(len(split), seed)[:n]:
        path = split.items[i][0]
        try:
            with Image.open(path) as im:
                out.append(im.convert("RGB"))
        except (OSError, ValueError) as exc:   # an unreadable image is skipped, as in extraction
            log.warning("efficiency: skipping unreadable image %s (%s)", path, type(exc).__name__)
    if not out:
        raise UserError(f"dataset {split.key}: none of the first {n} images could be read for timing")
    return out


def measure_backbone(run: "_Run", backbone: "Backbone", dataset: str) -> None:
    """Measure every method of the run on `dataset` for one backbone; record it in results.json
    (a method already measured with the same settings is skipped)."""
    from ..data import load_split
    from .runner import engine_config_for, feature_key

    cfg = run.cfg
    if dataset not in run.configs:
        raise UserError(f"--fps-dataset {dataset}: not one of the run's datasets ({', '.join(run.configs)})")
    dcfg = run.configs[dataset]
    fkey = feature_key(dataset, backbone, run.precision, dcfg, cfg.seeds[0], cfg.limit)
    n = cfg.fps_samples
    todo = []
    for method in cfg.methods:
        ecfg = engine_config_for(method, dcfg)
        fp = fingerprint({"dataset": dataset, "samples": n, "views": views_used(method, ecfg, dcfg.bench.views),
                          "augment": dcfg.bench.augment, "device": str(run.device), "precision": run.precision,
                          "hyperparameters": dataclasses.asdict(ecfg)})
        old = run.results.efficiency(backbone.name, backbone.pretrained, method)
        if old is None or old.get("fingerprint") != fp:
            todo.append((method, ecfg, fp))
    if not todo:
        return
    clip = run.models.get(backbone)
    split = load_split(dataset, cfg.data_root)
    timed = load_images(split, n, fkey.seed)
    text = load_features(fkey.path(cfg.store)).text
    for method, ecfg, fp in run.bar(todo, desc=f"efficiency {backbone.label}", leave=False, unit="method"):
        row = measure_method(clip, timed, text, method, ecfg, dcfg.bench.views, dcfg.bench.augment, fkey.seed)
        run.results.record_efficiency({"backbone": backbone.name, "pretrained": backbone.pretrained,
                                       "method": method, "dataset": dataset, **row, "device": str(run.device),
                                       "precision": run.precision, "fingerprint": fp})
