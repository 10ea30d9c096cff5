"""`run_benchmark(cfg)`: the paper's experiments as cells (dataset x backbone x method x seed).

For each backbone and dataset: resolve `configs/<dataset>.yaml` + `--set`; per seed make sure
the feature file exists (extracting it once, shared by every method); replay each unfinished
method over it and record the cell in `results.json` at once. Then measure end-to-end speed and
memory per method (optional) and write the reports (`report.py`). A dataset whose data, weights
or features cannot be had is reported and skipped; the others still run.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ..config import DatasetConfig, EngineConfig, dataset_config_path, load_dataset_config
from ..devices import resolve_device
from ..errors import UserError, one_line
from ..features import FeatureSet, load_features
from ..methods import list_methods
from ..replay import replay
from . import paper
from .memory import MemoryMeter
from .results import RUN_KEY, ResultsStore, fingerprint, predictions_path, save_predictions, versions
from .store import Backbone, FeatureKey, Models, ensure_features, resolve_backbone, resolved_precision, weights_status

log = logging.getLogger(__name__)

RESULTS_FILE = "results.json"


@dataclass
class BenchmarkConfig:
    """Everything one `mstta-bench run` does (the CLI only fills this in)."""

    datasets: list[str]                                  # dataset keys (see parse_datasets)
    backbones: list[Backbone]
    methods: list[str] = field(default_factory=list_methods)
    seeds: list[int] = field(default_factory=lambda: [1])
    data_root: Path | None = None
    out: Path = Path("results")
    store: Path = Path("features")
    overrides: list[str] = field(default_factory=list)   # --set KEY=VALUE (engine or bench keys)
    device: str = "auto"
    precision: str | None = None
    batch_size: int | None = None                        # extraction: images per forward (None: extractor's)
    workers: int | None = None                           # extraction data-loader workers (None: extractor's)
    limit: int | None = None                             # only the first N samples of each stream (quick runs)
    fps_samples: int = 0                                 # end-to-end speed samples per method; 0 = skip
    fps_dataset: str | None = None                       # dataset to time on (default: the first that ran)
    plots: bool = True
    progress: bool = False                               # tqdm bars (the CLI turns them on)
    notify: Callable[[str], None] = log.warning          # one line per skipped dataset, as it happens


# ---------------------------------------------------------------------- parsing helpers
def parse_list(spec: str, flag: str) -> list[str]:
    items = [s.strip() for s in str(spec).split(",")]
    if not spec or any(not s for s in items):
        raise UserError(f"{flag} {spec!r}: expected a comma-separated list without empty entries")
    return list(dict.fromkeys(items))


def parse_datasets(spec: str) -> list[str]:
    """`ood`, `cross`, `all` (= ood + cross, the paper's tables), dataset names/aliases,
    `imagefolder:PATH`, or a comma-separated mix -> dataset keys in order, without repeats."""
    from ..data import resolve_key

    out: list[str] = []
    for item in parse_list(spec, "--datasets"):
        keys = paper.GROUPS.get(item.lower())
        if keys is None:
            try:
                keys = (resolve_key(item),)
            except UserError:
                raise UserError(f"--datasets: unknown dataset '{item}'; use ood, cross, all, or names from: "
                                f"{', '.join(_dataset_names())} (or imagefolder:PATH)") from None
        out += [k for k in keys if k not in out]
    return out


def _dataset_names() -> list[str]:
    from ..data import list_datasets

    return list_datasets()


def parse_methods(spec: str) -> list[str]:
    methods = parse_list(spec, "--methods")
    for m in methods:
        if m not in list_methods():
            raise UserError(f"--methods: unknown method '{m}'; choose from: {', '.join(list_methods())}")
    return methods


def parse_seeds(spec: str) -> list[int]:
    seeds = []
    for s in parse_list(spec, "--seeds"):
        try:
            v = int(s)
        except ValueError:
            raise UserError(f"--seeds: '{s}' is not an integer; pass e.g. --seeds 1,2,3,4,5") from None
        if v < 0:
            raise UserError(f"--seeds: '{s}' is negative; seeds are integers >= 0 (1 = the peers' stream order)")
        seeds.append(v)
    return seeds


def parse_backbones(spec: str, pretrained: str | None = None) -> list[Backbone]:
    """Comma-separated backbones (`ViT-B-16,RN50`), each resolved as `resolve_backbone`; an
    unknown pretrained tag or a missing checkpoint file is a UserError here, before any work."""
    out = list(dict.fromkeys(resolve_backbone(b, pretrained) for b in parse_list(spec, "--backbone")))
    for b in out:
        status = weights_status(b)
        if status.startswith("missing: "):
            raise UserError(f"--pretrained {b.pretrained}: {status[len('missing: '):]} (--backbone {b.name}); "
                            "pass an open_clip tag, an existing checkpoint file, or none")
    return out


def dataset_config(dataset: str, overrides: list[str]) -> DatasetConfig:
    """`configs/<dataset>.yaml` (built-in defaults for datasets without one) + `--set` overrides."""
    path = dataset_config_path(dataset) if not dataset.startswith("imagefolder:") else None
    return load_dataset_config(path if path is not None and path.is_file() else None, overrides)


def engine_config_for(method: str, dcfg: DatasetConfig) -> EngineConfig:
    """The engine config a method runs with: the dataset's, except that zero-shot CLIP always
    scores the original image (view 0), as the paper's CLIP rows do."""
    if method == "zero-shot":
        return dataclasses.replace(dcfg.engine, view_mode="original")
    return dcfg.engine


def feature_key(dataset: str, backbone: Backbone, precision: str, dcfg: DatasetConfig, seed: int,
                limit: int | None = None) -> FeatureKey:
    return FeatureKey(dataset, backbone, precision, dcfg.bench.views, dcfg.bench.augment, seed, limit)


def cell_fingerprint(ecfg: EngineConfig, fkey: FeatureKey, extra: dict[str, Any] | None = None) -> str:
    return fingerprint({"hyperparameters": dataclasses.asdict(ecfg), "views": fkey.views,
                        "augment": fkey.augment if fkey.views > 1 else None, "precision": fkey.precision,
                        "limit": fkey.limit, **(extra or {})})


def zero_shot_accuracy(fs: FeatureSet) -> float:
    """CLIP zero-shot top-1 (%) on the original image (view 0) over the labelled samples."""
    f0 = fs.features if fs.features.dim() == 2 else fs.features[:, 0]
    pred = (f0.float() @ fs.text.T).argmax(-1).numpy()
    return accuracy(pred, fs.labels)


def accuracy(pred: np.ndarray, labels: np.ndarray) -> float:
    known = labels >= 0
    return float((pred[known] == labels[known]).mean() * 100)


def load_stream(path: Path, fkey: FeatureKey) -> FeatureSet:
    """A feature file of the store, checked against what the benchmark expects of it."""
    fs = load_features(path)
    if fs.labels is None or not (fs.labels >= 0).any():
        raise UserError(f"{path}: no labels, so no accuracy; re-extract it (delete the file) from a labelled dataset")
    if fs.num_views != fkey.views:
        raise UserError(f"{path}: holds {fs.num_views} views per sample but the config asks for {fkey.views}; "
                        "delete the file to re-extract it")
    return fs


def replay_cell(fs: FeatureSet, ecfg: EngineConfig, method: str, key: dict[str, Any], fkey: FeatureKey,
                path: Path, zs: float, device: torch.device, vers: dict[str, str],
                out: Path | None = None) -> dict[str, Any]:
    """Replay one method over a loaded stream -> the cell's run record (and, with `out`, its
    per-sample predictions saved for the plots)."""
    meter = MemoryMeter(device)
    with meter:
        r = replay(fs.features, fs.text, method, ecfg, device=device)
    run = {
        **key,
        "benchmark": paper.benchmark_of(key["dataset"]),
        "accuracy": round(accuracy(r.predictions, fs.labels), 4),
        "zero_shot_accuracy": round(zs, 4),
        "clip_view_accuracy": round(accuracy(r.clip_predictions, fs.labels), 4),
        "n": int(fs.num_samples), "classes": int(fs.num_classes),
        "views": fkey.views, "augment": fkey.augment if fkey.views > 1 else None,
        "view_mode": ecfg.view_mode, "precision": fkey.precision,
        "fps": None, "adapt_fps": round(r.samples_per_s, 2), "seconds": round(r.seconds, 4),
        "peak_memory_mb": meter.peak_mb, "memory_kind": meter.kind, "device": str(device),
        "hyperparameters": dataclasses.asdict(ecfg), "versions": vers,
        "features": str(path), "fingerprint": cell_fingerprint(ecfg, fkey),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    if out is not None:
        save_predictions(predictions_path(out, run), r.predictions, r.clip_predictions, fs.labels)
    return run


# ---------------------------------------------------------------------- the run
class _Run:
    """State of one run_benchmark call (kept off the config)."""

    def __init__(self, cfg: BenchmarkConfig, results_file: str = RESULTS_FILE, key: tuple[str, ...] = RUN_KEY):
        self.cfg = cfg
        self.configs = {d: dataset_config(d, cfg.overrides) for d in cfg.datasets}   # bad --set fails here
        self.device = resolve_device(cfg.device)
        self.precision = resolved_precision(self.device, cfg.precision)
        self.models = Models(self.device, cfg.precision)
        self.results = ResultsStore(Path(cfg.out) / results_file, key)
        self.versions = versions()
        self.ran = self.skipped = 0
        self.missing: list[dict[str, str]] = []
        self.ok: dict[Backbone, list[str]] = {}

    def bar(self, items, **kw):
        from tqdm.auto import tqdm

        return tqdm(items, disable=not self.cfg.progress, dynamic_ncols=True, **kw)

    def each_dataset(self, backbone: Backbone, work, desc: str) -> list[str]:
        """`work(dataset)` for every dataset; a UserError skips that dataset (one warning line, listed
        as missing) and the others still run. Returns the datasets that ran."""
        done: list[str] = []
        for dataset in self.bar(self.cfg.datasets, desc=desc, unit="dataset"):
            try:
                work(dataset)
            except UserError as exc:
                self.skip(backbone, dataset, exc)
                continue
            done.append(dataset)
            self.results.set_missing(dataset, backbone.name, backbone.pretrained, None)
        self.ok[backbone] = done
        return done

    def dataset(self, backbone: Backbone, dataset: str) -> None:
        dcfg = self.configs[dataset]
        for seed in self.cfg.seeds:
            fkey = feature_key(dataset, backbone, self.precision, dcfg, seed, self.cfg.limit)
            pending = []
            for method in self.cfg.methods:
                key = self.cell_key(dataset, backbone, method, seed)
                if self.results.is_done(key, cell_fingerprint(engine_config_for(method, dcfg), fkey)):
                    self.skipped += 1
                else:
                    pending.append(method)
            if not pending:
                continue
            path, fs, zs = self.stream(fkey)
            for method in self.bar(pending, desc=f"{dataset} seed {seed}", leave=False, unit="method"):
                self.cell(backbone, dataset, seed, method, dcfg, fkey, fs, path, zs)

    def stream(self, fkey: FeatureKey) -> tuple[Path, FeatureSet, float]:
        """(path, loaded features, zero-shot accuracy) of a stream, extracting it first if needed."""
        path = ensure_features(fkey, self.cfg.store, self.models, self.cfg.data_root,
                               batch_size=self.cfg.batch_size, workers=self.cfg.workers, progress=self.cfg.progress)
        fs = load_stream(path, fkey)
        return path, fs, zero_shot_accuracy(fs)

    def cell_key(self, dataset: str, backbone: Backbone, method: str, seed: int) -> dict[str, Any]:
        return {"dataset": dataset, "backbone": backbone.name, "pretrained": backbone.pretrained,
                "method": method, "seed": seed}

    def cell(self, backbone, dataset, seed, method, dcfg, fkey, fs, path, zs) -> None:
        ecfg = engine_config_for(method, dcfg)
        run = replay_cell(fs, ecfg, method, self.cell_key(dataset, backbone, method, seed), fkey, path, zs,
                          self.device, self.versions, Path(self.cfg.out))
        eff = self.results.efficiency(backbone.name, backbone.pretrained, method)
        if eff is not None:
            run["fps"] = eff["fps"]
        self.results.record(run)
        self.ran += 1

    def skip(self, backbone: Backbone, dataset: str, exc: Exception) -> None:
        """Report a dataset that cannot run (as it happens, unless it is the run's only one: then
        the final error says it) and go on with the others."""
        reason = one_line(exc)
        self.missing.append({"dataset": dataset, "backbone": backbone.name, "pretrained": backbone.pretrained,
                             "reason": reason})
        if len(self.cfg.datasets) * len(self.cfg.backbones) > 1:
            self.cfg.notify(f"dataset {dataset} skipped for {backbone.label}: {reason}")


def run_benchmark(cfg: BenchmarkConfig) -> dict[str, Any]:
    """Run every unfinished cell, then write results.csv, report.md and the plots.

    Returns {"ran", "skipped", "missing", "out", "report"}. Raises UserError when no requested
    dataset could run at all (the first reason in the message); KeyboardInterrupt between cells
    leaves `results.json` valid and a rerun continues where it stopped.
    """
    from .efficiency import measure_backbone
    from .report import write_reports

    if not cfg.datasets or not cfg.backbones or not cfg.methods or not cfg.seeds:
        raise UserError("nothing to run: give at least one dataset, backbone, method and seed")
    run = _Run(cfg)
    for backbone in cfg.backbones:
        done = run.each_dataset(backbone, lambda d, b=backbone: run.dataset(b, d), backbone.label)
        if cfg.fps_samples > 0 and done:
            try:
                measure_backbone(run, backbone, cfg.fps_dataset or done[0])
            except UserError as exc:
                cfg.notify(f"efficiency not measured for {backbone.label}: {one_line(exc)}")
    if not any(run.ok.values()):
        first = run.missing[0]["reason"] if run.missing else "nothing ran"
        raise UserError(f"no dataset could run: {first}")
    for m in run.missing:
        run.results.set_missing(m["dataset"], m["backbone"], m["pretrained"], m["reason"])
    report = write_reports(Path(cfg.out), plots=cfg.plots)
    return {"ran": run.ran, "skipped": run.skipped, "missing": run.missing, "out": str(cfg.out),
            "report": str(report)}


def stream_features(cfg: BenchmarkConfig, dataset: str, backbone: Backbone, seed: int
                    ) -> tuple[Path, FeatureSet, DatasetConfig]:
    """One stream from the store (extracted first when absent): (path, features, dataset config)."""
    dcfg = dataset_config(dataset, cfg.overrides)
    device = resolve_device(cfg.device)
    fkey = feature_key(dataset, backbone, resolved_precision(device, cfg.precision), dcfg, seed, cfg.limit)
    path = ensure_features(fkey, cfg.store, Models(device, cfg.precision), cfg.data_root,
                           batch_size=cfg.batch_size, workers=cfg.workers, progress=cfg.progress)
    return path, load_stream(path, fkey), dcfg


# ---------------------------------------------------------------------- dry run
def plan_benchmark(cfg: BenchmarkConfig) -> list[str]:
    """What `run_benchmark(cfg)` would do, as lines: per backbone its weights, per dataset its
    data, per seed its feature file (cached or to extract) and cells (done or to run). Writes nothing."""
    from ..data import load_split

    configs = {d: dataset_config(d, cfg.overrides) for d in cfg.datasets}
    device = resolve_device(cfg.device)
    precision = resolved_precision(device, cfg.precision)
    path = Path(cfg.out) / RESULTS_FILE
    results = ResultsStore(path) if path.exists() else None
    lines = [f"out: {cfg.out} ({'resuming: ' + str(len(results.runs)) + ' cells recorded' if results else 'new'}); "
             f"feature store: {cfg.store}; device: {device} ({precision})"]
    todo = 0
    data_status: dict[str, str] = {}
    for backbone in cfg.backbones:
        lines.append(f"backbone {backbone.label} [{backbone.name} / {backbone.pretrained}]: weights {weights_status(backbone)}")
        for dataset in cfg.datasets:
            dcfg = configs[dataset]
            if dataset not in data_status:
                try:
                    split = load_split(dataset, cfg.data_root)
                    data_status[dataset] = f"data ok ({len(split)} images, {split.num_classes} classes)"
                except UserError as exc:
                    data_status[dataset] = f"data MISSING: {one_line(exc)}"
            data = data_status[dataset]
            lines.append(f"  {dataset}: views {dcfg.bench.views}"
                         f"{' ' + dcfg.bench.augment if dcfg.bench.views > 1 else ''}, "
                         f"view_mode {dcfg.engine.view_mode}; {data}")
            for seed in cfg.seeds:
                fkey = feature_key(dataset, backbone, precision, dcfg, seed, cfg.limit)
                fpath = fkey.path(cfg.store)
                cells = []
                for method in cfg.methods:
                    key = {"dataset": dataset, "backbone": backbone.name, "pretrained": backbone.pretrained,
                           "method": method, "seed": seed}
                    done = results is not None and results.is_done(
                        key, cell_fingerprint(engine_config_for(method, dcfg), fkey))
                    todo += not done
                    cells.append(f"{method} {'done' if done else 'to run'}")
                lines.append(f"    seed {seed}: features {'cached' if fpath.is_file() else 'to extract'} "
                             f"({fpath})" + ("; " + ", ".join(cells) if cells else ""))
    lines.append(f"{todo} cell(s) to run")
    return lines
