"""End-to-end speed and memory per method, as the paper's efficiency table: batch 1, per sample
make the views the method uses, encode them in one forward, then `Engine.step`.

Images are decoded before timing (disk speed is not the method's); view making, the encoder and
the adaptation step are timed. Views per method: zero-shot and the cache methods in `original`
view mode encode the original image only; the others encode every configured view, of their own
kind (crops for the boosting methods, `context.view_kind`).

Same conditions for every method: one untimed warm-up pass runs every method first (kernels,
allocator, caches); then each of ROUNDS rounds times every method over the same samples (the
order rotating per round; a method's pass keeps one batch shape, as a switch of shape costs the
next forward a re-plan); a sample's best time over the rounds counts, and fps = 1 / the median of
those (robust to samples whose every round met a busy machine, and to the first sample of a pass).
So no method is charged for warm-up or for another's shapes, and zero-shot, a subset of every
other method's work, comes out fastest. Peak memory comes from one more untimed pass per method.
"""
from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from typing import Any, Sequence

import torch

from ..config import EngineConfig
from ..engine import Engine
from ..errors import UserError
from ..features import load_features
from ..methods import get_method
from .context import Row, RunContext, engine_config, feature_key, redundant, view_kind
from .memory import MemoryMeter
from .results import fingerprint
from .store import Backbone

log = logging.getLogger(__name__)

WARMUP = 4   # untimed samples per method in the warm-up pass (on CUDA an engine captures its graph after 3)
ROUNDS = 3   # timed rounds; each sample's best time counts


def views_used(method: str, ecfg: EngineConfig, views: int) -> int:
    """How many images per sample a method actually encodes."""
    m = get_method(method)
    if method == "zero-shot" or (ecfg.view_mode == "original" and not m.boost):
        return 1
    return views


@dataclasses.dataclass
class Timed:
    """One method set up for timing: its views, its engine, and its best round so far."""

    name: str
    make: Any
    engine: Engine
    views: int
    best: list = dataclasses.field(default_factory=list)   # per sample: its best time over the rounds
    peak_mb: float | None = None

    def one(self, clip, i: int, img, mean, std) -> int:
        from ..views import to_pixels

        x = to_pixels(self.make(img, i), mean, std, clip.device, clip.dtype)
        return self.engine.step(clip.encode_images(x)).prediction   # .prediction syncs the device


def measure_methods(clip, images: Sequence, text: torch.Tensor, setups: Sequence[tuple[str, str, EngineConfig]],
                    views: int, seed: int = 1, rounds: int = ROUNDS) -> dict[str, dict[str, Any]]:
    """Time every (name, method, engine config, augment) setup over the same images under the same
    conditions (module docstring) -> {name: {"fps", "peak_memory_mb", "memory_kind", "samples", "views"}}."""
    from ..views import ViewMaker, split_preprocess

    geometry, size, mean, std = split_preprocess(clip.preprocess)
    timed = []
    for name, method, ecfg, augment in setups:
        v = views_used(method, ecfg, views)
        timed.append(Timed(name, ViewMaker(geometry, size, v, augment, seed), Engine(text.to(clip.device), method, ecfg),
                           v))
    for t in timed:                                   # one warm-up pass over every method
        for i, img in enumerate(images[:WARMUP]):
            t.one(clip, i, img, mean, std)
        t.best = [float("inf")] * len(images)
    for r in range(rounds):
        k = r % len(timed)
        for t in timed[k:] + timed[:k]:
            t.engine.reset()
            for i, img in enumerate(images):
                t0 = time.perf_counter()
                t.one(clip, i, img, mean, std)
                t.best[i] = min(t.best[i], time.perf_counter() - t0)
    kind = MemoryMeter(clip.device).kind
    for t in timed:                                   # memory: one more untimed pass per method
        t.engine.reset()
        meter = MemoryMeter(clip.device)
        with meter:
            for i, img in enumerate(images):
                t.one(clip, i, img, mean, std)
        t.peak_mb = meter.peak_mb
    return {t.name: {"fps": round(1 / statistics.median(t.best), 3) if statistics.median(t.best) > 0 else None,
                     "peak_memory_mb": t.peak_mb, "memory_kind": kind, "samples": len(images), "views": t.views}
            for t in timed}


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


def measure_backbone(run: RunContext, backbone: Backbone, dataset: str) -> None:
    """Measure every method of the run on `dataset` for one backbone, all in the same rounds, and
    record them in results.json (nothing is timed when every method is already measured with the
    same settings; otherwise all are timed again together, so they share their conditions)."""
    from ..data import load_split

    cfg = run.cfg
    if dataset not in run.configs:
        raise UserError(f"--fps-dataset {dataset}: not one of the run's datasets ({', '.join(run.configs)})")
    dcfg = run.configs[dataset]
    n = cfg.fps_samples
    setups, fps = [], {}
    for row in map(Row.parse, cfg.methods):
        if redundant(row, dcfg):
            continue
        ecfg = engine_config(row, dcfg)
        augment = view_kind(row.method, dcfg, cfg.augment)
        setups.append((row.name, row.method, ecfg, augment))
        fps[row.name] = fingerprint({"dataset": dataset, "samples": n, "listing": cfg.listing,
                                     "views": views_used(row.method, ecfg, dcfg.bench.views), "augment": augment,
                                     "device": str(run.device), "precision": run.precision,
                                     "hyperparameters": dataclasses.asdict(ecfg)})
    fps = {name: fingerprint({"own": fp, "all": sorted(fps.values())}) for name, fp in fps.items()}
    if all((run.results.efficiency(backbone.name, backbone.pretrained, name) or {}).get("fingerprint") == fp
           for name, fp in fps.items()):
        return
    seed = cfg.seeds[0]
    files = [feature_key(dataset, backbone, run.precision, dcfg, seed, cfg.limit, cfg.listing, augment).path(cfg.store)
             for _, _, _, augment in setups]
    found = next((f for f in files if f.is_file()), None)
    if found is None:
        raise UserError(f"no feature file of {dataset} in {cfg.store} to take the text classifier from; run it first")
    text = load_features(found).text
    clip = run.models.get(backbone)
    timed = load_images(load_split(dataset, cfg.data_root, cfg.listing), n, seed)
    rows = measure_methods(clip, timed, text, setups, dcfg.bench.views, seed)
    for name, row in rows.items():
        run.results.record_efficiency({"backbone": backbone.name, "pretrained": backbone.pretrained,
                                       "method": name, "dataset": dataset, **row, "device": str(run.device),
                                       "precision": run.precision, "fingerprint": fps[name]})
