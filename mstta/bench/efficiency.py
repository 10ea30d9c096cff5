"""End-to-end speed and memory per method, as the paper's efficiency table: batch 1, per sample
make the views the method uses, encode them in one forward, then `Engine.step`.

Images are decoded before timing (disk speed is not the method's); view making, the encoder and
the adaptation step are timed. Views per method: zero-shot and the cache methods in `original`
view mode encode the original image only; the others encode every configured view, of their own
kind (crops for the boosting methods, `context.view_kind`). Views are made as a user's extraction
makes them (`mstta.features.extract_views`): on a GPU, on the device from the image tensor
(`mstta.features.tensor_views`), inside each sample's time; on a CPU, by data-loader workers
(`default_workers()`; with PIL, or on CPU tensors under `--views-on device`) that make the next
samples' views while the encoder runs, so a sample's time
is the interval between two finished samples (the pipeline's throughput, as the peers' 8 workers).

Same conditions for every method: one untimed warm-up pass runs every method first (kernels,
allocator, caches); then each of ROUNDS rounds times every method over the same samples (the
order rotating per round; a method's pass keeps one batch shape, as a switch of shape costs the
next forward a re-plan); a sample's best time over the rounds counts, and fps = 1 / the median of
those (robust to samples whose every round met a busy machine, to the first sample of a pass and
to the workers' start-up). So no method is charged for warm-up or for another's shapes, and
zero-shot, a subset of every other method's work, comes out fastest. Peak memory comes from one
more untimed pass per method.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from typing import Any, Sequence

import torch

from ..engine.config import EngineConfig
from ..engine.engine import Engine
from ..engine.methods import needs_text_tower
from ..engine.protocol import views_read
from ..errors import UserError
from ..features.extract_views import view_path
from ..features.format import load_features
from ..features.tensor_views import TensorViewMaker
from ..features.views import ViewMaker, split_preprocess, to_pixels
from .context import Row, RunContext, feature_key, redundant, row_engine_config
from .memory import MemoryMeter
from .results import fingerprint
from .store import Backbone
from .viewpolicy import view_kind

log = logging.getLogger(__name__)

WARMUP = 4  # untimed samples per method in the warm-up pass (on CUDA an engine captures its graph after 3)
ROUNDS = 3  # timed rounds; each sample's best time counts


TPT_VIEWS = 64  # azshue/TPT scripts/test_tpt.sh -b 64: the original + 63 views (tpt_classification.py:164-173)


def views_used(method: str, ecfg: EngineConfig, views: int) -> int:
    """How many images per sample a method actually encodes (`mstta.engine.protocol.views_read`: a row with views
    of its own, ZERO, MTA, DMN-ZS, encodes them under `view_mode: original` too; TPT/C-TPT their 64)."""
    if needs_text_tower(method):
        return TPT_VIEWS  # TPT/C-TPT tune on their own views whatever the dataset's protocol
    return views_read(method, ecfg, views)


class _Made(torch.utils.data.Dataset):
    """Sample i -> its views, made in a data-loader worker by `maker` (PIL, or `_CpuTensorViews`)."""

    def __init__(self, images: Sequence, maker):
        self.images, self.maker = images, maker

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.maker(self.images[i], i)


class _CpuTensorViews:
    """A PIL image's views made by `mstta.features.tensor_views` on CPU tensors, the fast path, as
    `--views-on device` makes them for extraction without CUDA."""

    def __init__(self, maker: ViewMaker):
        self.tensor = TensorViewMaker(maker, exact=False)

    def __call__(self, img, index: int) -> torch.Tensor:
        from ..features.decode import pil_tensor

        return self.tensor(pil_tensor(img), index)


@dataclasses.dataclass
class Timed:
    """One method set up for timing: its views, its engine, and its best round so far."""

    name: str
    make: Any
    engine: Engine
    views: int
    best: list = dataclasses.field(default_factory=list)  # per sample: its best time over the rounds
    peak_mb: float | None = None

    def stream(self, images: Sequence, workers: int):
        """Each sample's views, in order: made on the device (tensor images) or by `workers` processes."""
        if images and isinstance(images[0], torch.Tensor):
            tensor = TensorViewMaker(self.make)
            return (tensor(img, i) for i, img in enumerate(images))
        return iter(torch.utils.data.DataLoader(_Made(images, self.make), batch_size=None, num_workers=workers))

    def run(self, clip, images: Sequence, mean, std, workers: int) -> list[float]:
        """One pass over the images -> per sample the time since the previous one finished."""
        times, last = [], time.perf_counter()
        for views in self.stream(images, workers):
            x = to_pixels(views, mean, std, clip.device, clip.dtype)
            _ = self.engine.step(clip.encode_images(x)).prediction  # reading it syncs the device
            now = time.perf_counter()
            times.append(now - last)
            last = now
        return times


def views_made(device: torch.device, views_on: str = "auto") -> tuple[str, int]:
    """Where the timed views are made, as extraction makes them (`view_path`) -> (a line for the
    table, data-loader workers; 0 = on the device)."""
    from ..features.extract import default_workers

    path = view_path(views_on, device)
    if path == "gpu":
        return f"on the device ({device}), mstta.features.tensor_views", 0
    workers = default_workers()
    how = "with PIL" if path == "pil" else "on CPU tensors (mstta.features.tensor_views, the fast path)"
    return f"{how} by {workers} data-loader worker(s), overlapped with the encoder", workers


def _tower(clip, method: str, classnames):
    """A prompt-tuning row's text tower over the classes (None for the others)."""
    from ..features.text_tower import text_tower

    return text_tower(clip, classnames) if needs_text_tower(method) and classnames else None


def measure_methods(
    clip,
    images: Sequence,
    text: torch.Tensor,
    setups: Sequence[tuple[str, str, EngineConfig]],
    views: int,
    seed: int = 1,
    rounds: int = ROUNDS,
    views_on: str = "auto",
    classnames: Sequence[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Time every (name, method, engine config, augment) setup over the same images (PIL RGB) under
    the same conditions (module docstring) -> {name: {"fps", "peak_memory_mb", "memory_kind",
    "samples", "views", "views_made"}}; `classnames`: the prompt-tuning rows' text tower's classes."""
    from ..features.decode import pil_tensor

    geometry, size, mean, std = split_preprocess(clip.preprocess)
    where, workers = views_made(clip.device, views_on)
    if not workers:
        images = [pil_tensor(img).to(clip.device) for img in images]  # decoded before timing, on the device
    wrap = _CpuTensorViews if view_path(views_on, clip.device) == "cpu-tensors" else (lambda maker: maker)
    timed = [
        Timed(
            name,
            wrap(ViewMaker(geometry, size, views_used(method, ecfg, views), augment, seed)),
            Engine(text.to(clip.device), method, ecfg, text_tower=_tower(clip, method, classnames)),
            views_used(method, ecfg, views),
        )
        for name, method, ecfg, augment in setups
    ]
    for t in timed:  # one warm-up pass over every method
        t.run(clip, images[:WARMUP], mean, std, workers)
        t.best = [float("inf")] * len(images)
    for r in range(rounds):
        k = r % len(timed)
        for t in timed[k:] + timed[:k]:
            t.engine.reset()
            t.best = [min(a, b) for a, b in zip(t.best, t.run(clip, images, mean, std, workers))]
    kind = MemoryMeter(clip.device).kind
    for t in timed:  # memory: one more untimed pass per method
        t.engine.reset()
        meter = MemoryMeter(clip.device)
        with meter:
            t.run(clip, images, mean, std, workers)
        t.peak_mb = meter.peak_mb
    return {
        t.name: {
            "fps": round(1 / statistics.median(t.best), 3) if statistics.median(t.best) > 0 else None,
            "peak_memory_mb": t.peak_mb,
            "memory_kind": kind,
            "samples": len(images),
            "views": t.views,
            "views_made": where,
        }
        for t in timed
    }


def load_images(split, n: int, seed: int = 1) -> list:
    """The first n images of a test split's stream (its seeded shuffle), decoded to RGB."""
    from PIL import Image

    from ..features.extract import stream_order

    out = []
    for i in stream_order(len(split), seed)[:n]:
        path = split.items[i][0]
        try:
            with Image.open(path) as im:
                out.append(im.convert("RGB"))
        except (OSError, ValueError) as exc:  # an unreadable image is skipped, as in extraction
            log.warning("efficiency: skipping unreadable image %s (%s)", path, type(exc).__name__)
    if not out:
        raise UserError(f"dataset {split.key}: none of the first {n} images could be read for timing")
    return out


def timing_setups(run: RunContext, dataset: str) -> tuple[list[tuple], dict[str, str]]:
    """The run's rows to time on `dataset` -> their (name, method, engine config, augment) setups and
    each one's fingerprint (its own settings and every other row's, as all are timed together)."""
    cfg, dcfg = run.cfg, run.configs[dataset]
    setups, fps = [], {}
    for row in map(Row.parse, cfg.methods):
        if redundant(row, dcfg):
            continue
        ecfg = row_engine_config(row, dcfg)
        augment = view_kind(row.method, dcfg, cfg.augment, dataset)
        setups.append((row.name, row.method, ecfg, augment))
        fps[row.name] = fingerprint(
            {
                "dataset": dataset,
                "samples": cfg.fps_samples,
                "listing": cfg.listing,
                "views": views_used(row.method, ecfg, dcfg.bench.views),
                "augment": augment,
                "device": str(run.device),
                "precision": run.precision,
                "views_made": views_made(run.device, cfg.views_on)[0],
                "hyperparameters": dataclasses.asdict(ecfg),
            }
        )
    return setups, {name: fingerprint({"own": fp, "all": sorted(fps.values())}) for name, fp in fps.items()}


def stored_text(run: RunContext, backbone: Backbone, dataset: str, setups: Sequence[tuple]) -> torch.Tensor:
    """The text classifier of the first stored feature file of `dataset` among the setups' view kinds."""
    cfg, dcfg, seed = run.cfg, run.configs[dataset], run.cfg.seeds[0]
    made = view_path(cfg.views_on, run.device)
    files = [
        feature_key(dataset, backbone, run.precision, dcfg, seed, cfg.limit, cfg.listing, augment, made).path(cfg.store)
        for _, _, _, augment in setups
    ]
    found = next((f for f in files if f.is_file()), None)
    if found is None:
        raise UserError(f"no feature file of {dataset} in {cfg.store} to take the text classifier from; run it first")
    return load_features(found).text


def measure_backbone(run: RunContext, backbone: Backbone, dataset: str) -> None:
    """Measure every method of the run on `dataset` for one backbone, all in the same rounds, and
    record them in results.json (nothing is timed when every method is already measured with the
    same settings; otherwise all are timed again together, so they share their conditions)."""
    from ..data import load_split

    cfg = run.cfg
    if dataset not in run.configs:
        raise UserError(f"--fps-dataset {dataset}: not one of the run's datasets ({', '.join(run.configs)})")
    setups, fps = timing_setups(run, dataset)
    if all(
        (run.results.efficiency(backbone.name, backbone.pretrained, name) or {}).get("fingerprint") == fp
        for name, fp in fps.items()
    ):
        return
    seed, views = cfg.seeds[0], run.configs[dataset].bench.views
    text = stored_text(run, backbone, dataset, setups)
    clip = run.models.get(backbone)
    split = load_split(dataset, cfg.data_root, cfg.listing)
    timed = load_images(split, cfg.fps_samples, seed)
    rows = measure_methods(clip, timed, text, setups, views, seed, views_on=cfg.views_on, classnames=split.classnames)
    for name, row in rows.items():
        run.results.record_efficiency(
            {
                "backbone": backbone.name,
                "pretrained": backbone.pretrained,
                "method": name,
                "dataset": dataset,
                **row,
                "device": str(run.device),
                "precision": run.precision,
                "fingerprint": fps[name],
            }
        )
