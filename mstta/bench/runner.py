"""`run_benchmark(cfg)`: the paper's experiments as cells (dataset x backbone x method x seed).

For each backbone and dataset: resolve `configs/<dataset>.yaml` + `--set`; per seed make sure
the feature file of each view kind the methods read exists (extracting each once, shared by every
method that reads that kind: `context.view_spec`); replay each unfinished method over its file
(the views it reads of it)
and record the cell in `results.json` at once. Then measure end-to-end speed and
memory per method (optional) and write the reports (`report.py`). A dataset whose data, weights
or features cannot be had is reported and skipped; the others still run.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any, Callable

import torch

from ..checks import check_seed
from ..engine.protocol import clip_path
from ..engine.replay import replay
from ..errors import UserError, one_line
from ..features.devices import resolve_device
from ..features.extract_views import view_path
from ..features.format import FeatureSet
from . import paper
from .config import DatasetConfig
from .context import (
    BenchmarkConfig,
    Cell,
    Row,
    RunContext,
    dataset_config,
    feature_key,
    load_stream,
    protocol,
    redundant,
)
from .memory import MemoryMeter
from .metrics import accuracy
from .results import predictions_path, save_predictions
from .store import Backbone, FeatureKey, Models, ensure_features, resolve_backbone, resolved_precision, weights_status
from .textsets import PEER

log = logging.getLogger(__name__)

__all__ = [
    "BenchmarkConfig",
    "parse_backbones",
    "parse_datasets",
    "parse_methods",
    "parse_seeds",
    "plan_benchmark",
    "replay_cell",
    "run_benchmark",
    "stream_features",
]


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
                raise UserError(
                    f"--datasets: unknown dataset '{item}'; use ood, cross, all, or names from: "
                    f"{', '.join(_dataset_names())} (or imagefolder:PATH)"
                ) from None
        out += [k for k in keys if k not in out]
    return out


def _dataset_names() -> list[str]:
    from ..data import list_datasets

    return list_datasets()


def parse_methods(spec: str) -> list[str]:
    """Comma-separated row names: methods, each optionally `@original`/`@confident` (Row.parse)."""
    return [Row.parse(m).name for m in parse_list(spec, "--methods")]


def parse_seeds(spec: str) -> list[int]:
    """`1,2,3` -> [1, 2, 3]: each an integer seed in [0, 2^63 - 1] (`config.check_seed`)."""
    return [check_seed(s, "--seeds") for s in parse_list(spec, "--seeds")]


def parse_backbones(spec: str, pretrained: str | None = None) -> list[Backbone]:
    """Comma-separated backbones (`ViT-B-16,RN50`), each resolved as `resolve_backbone`; an
    unknown pretrained tag or a missing checkpoint file is a UserError here, before any work."""
    out = list(dict.fromkeys(resolve_backbone(b, pretrained) for b in parse_list(spec, "--backbone")))
    for b in out:
        status = weights_status(b)
        if status.startswith("missing: "):
            raise UserError(
                f"--pretrained {b.pretrained}: {status[len('missing: ') :]} (--backbone {b.name}); "
                "pass an open_clip tag, an existing checkpoint file, or none"
            )
    return out


def zero_shot_accuracy(fs: FeatureSet) -> float:
    """CLIP zero-shot top-1 (%) on the original image (view 0) over the labelled samples."""
    f0 = fs.features if fs.features.dim() == 2 else fs.features[:, 0]
    pred = (f0.float() @ fs.text.T).argmax(-1).numpy()
    return accuracy(pred, fs.labels)


def replay_cell(
    fs: FeatureSet,
    cell: Cell,
    path: Path,
    zs: float,
    device: torch.device,
    vers: dict[str, str],
    out: Path | None = None,
    tower=None,
) -> dict[str, Any]:
    """Replay one cell's method over a loaded stream -> the cell's run record (and, with `out`, its
    per-sample predictions saved for the plots). Two CLIP references ride along: `zero_shot_accuracy`
    (CLIP on the original image, the paper's CLIP row) and `clip_view_accuracy` (CLIP logits of the
    method's own prediction path with no cache: this protocol's λ = 0), with the gain over each."""
    cell, scale_from = cell.scaled(fs, path)  # the checkpoint's logit scale unless --set gives one
    ecfg, fkey, method = cell.ecfg, cell.fkey, cell.row.method
    fs = cell.features(fs)  # the views this row reads of its file's (`context.view_spec`)
    meter = MemoryMeter(device)
    with meter:
        r = replay(fs.features, fs.text, method, ecfg, device=device, text_tower=tower)
    acc, clip_views = accuracy(r.predictions, fs.labels), accuracy(r.clip_predictions, fs.labels)
    augment = cell.augment
    run = {
        **cell.key,
        "benchmark": paper.benchmark_of(cell.key["dataset"]),
        "accuracy": round(acc, 4),
        "zero_shot_accuracy": round(zs, 4),
        "clip_view_accuracy": round(clip_views, 4),
        "gain_over_clip": round(acc - zs, 4),
        "gain_over_clip_views": round(acc - clip_views, 4),
        "protocol": protocol(method, ecfg, cell.read, augment, PEER),
        "text": PEER,
        "clip_path": clip_path(method, ecfg, cell.read, augment),
        "logit_scale": ecfg.logit_scale,
        "logit_scale_from": scale_from,
        "n": int(fs.num_samples),
        "classes": int(fs.num_classes),
        "listing": fkey.listing,
        "views": cell.read,
        "store_views": fkey.views,
        "augment": augment,
        "view_mode": ecfg.view_mode,
        "precision": fkey.precision,
        "limit": fkey.limit,
        "fps": None,
        "adapt_fps": round(r.samples_per_s, 2),
        "seconds": round(r.seconds, 4),
        "peak_memory_mb": meter.peak_mb,
        "memory_kind": meter.kind,
        "device": str(device),
        "hyperparameters": dataclasses.asdict(ecfg),
        "versions": vers,
        "features": str(path),
        "fingerprint": cell.fingerprint,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    if out is not None:
        save_predictions(predictions_path(out, run), r.predictions, r.clip_predictions, fs.labels)
    return run


def _run_dataset(run: RunContext, backbone: Backbone, dataset: str) -> None:
    """Every unfinished cell of one dataset: per seed, per feature file (loaded once), per row."""
    for seed in run.cfg.seeds:
        todo = run.pending(_row_cells(run, dataset, backbone, seed))
        for cells, path, fs in run.streams(todo):
            zs = zero_shot_accuracy(fs)
            for cell in run.bar(cells, desc=f"{dataset} seed {seed}", leave=False, unit="method"):
                tower = run.models.tower(backbone, cell.row.method, fs.classnames)
                rec = replay_cell(fs, cell, path, zs, run.device, run.versions, Path(run.cfg.out), tower)
                eff = run.results.efficiency(backbone.name, backbone.pretrained, cell.row.name)
                if eff is not None:
                    rec["fps"] = eff["fps"]
                run.results.record(rec)
                run.ran += 1


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
    run = RunContext(cfg)
    for backbone in cfg.backbones:
        done = run.each_dataset(backbone, lambda d, b=backbone: _run_dataset(run, b, d), backbone.label)
        if cfg.fps_samples > 0 and done:
            try:
                measure_backbone(run, backbone, cfg.fps_dataset or done[0])
            except UserError as exc:
                cfg.notify(f"efficiency not measured for {backbone.label}: {one_line(exc)}")
    run.finish()
    report = write_reports(Path(cfg.out), plots=cfg.plots)
    return {"ran": run.ran, "skipped": run.skipped, "missing": run.missing, "out": str(cfg.out), "report": str(report)}


def stream_features(
    cfg: BenchmarkConfig, dataset: str, backbone: Backbone, seed: int
) -> tuple[Path, FeatureSet, DatasetConfig]:
    """One stream from the store (extracted first when absent), in the dataset's own view kind
    (or --augment): (path, features, dataset config)."""
    dcfg = dataset_config(dataset, cfg.settings)
    device = resolve_device(cfg.device)
    fkey = feature_key(
        dataset,
        backbone,
        resolved_precision(device, cfg.precision),
        dcfg,
        seed,
        cfg.limit,
        cfg.listing,
        cfg.augment,
        view_path(cfg.views_on, device),
    )
    path = ensure_features(
        fkey,
        cfg.store,
        Models(device, cfg.precision),
        cfg.data_root,
        batch_size=cfg.batch_size,
        workers=cfg.workers,
        progress=cfg.progress,
    )
    return path, load_stream(path, fkey), dcfg


# ---------------------------------------------------------------------- dry run
def plan_benchmark(
    cfg: BenchmarkConfig,
    run: RunContext | None = None,
    cells: Callable[[RunContext, str, Backbone, int], list[Cell]] | None = None,
) -> list[str]:
    """What `run_benchmark(cfg)` would do, as lines: per backbone its weights, per dataset its
    data, per seed its feature files (cached or to extract) and cells (done or to run), each cell as
    `RunContext.cell` builds it (`cells` makes a sweep's). Writes nothing."""
    run = run or RunContext(cfg)
    cells = cells or _row_cells
    lines = [
        f"out: {cfg.out} ({_resume_note(run)}); "
        f"feature store: {cfg.store}; device: {run.device} ({run.precision}); listing: {cfg.listing}"
    ]
    todo = 0
    data_status: dict[str, str] = {}
    for backbone in cfg.backbones:
        lines.append(
            f"backbone {backbone.label} [{backbone.name} / {backbone.pretrained}]: weights {weights_status(backbone)}"
        )
        for dataset in cfg.datasets:
            dcfg = run.configs[dataset]
            if dataset not in data_status:
                data_status[dataset] = _data_status(dataset, cfg)
            lines.append(
                f"  {dataset}: views {dcfg.bench.views}, view_mode {dcfg.engine.view_mode}; {data_status[dataset]}"
            )
            for seed in cfg.seeds:
                files: dict[FeatureKey, list[str]] = {}
                for cell in cells(run, dataset, backbone, seed):
                    done = run.results.is_done(cell.key, cell.fingerprint)
                    todo += not done
                    name = cell.row.name if "value" not in cell.key else f"{cell.row.name}={cell.key['value']}"
                    files.setdefault(cell.fkey, []).append(f"{name} {'done' if done else 'to run'}")
                for fkey, names in files.items():
                    fpath = fkey.path(cfg.store)
                    lines.append(
                        f"    seed {seed}: features {'cached' if fpath.is_file() else 'to extract'} "
                        f"({fpath}); " + ", ".join(names)
                    )
    lines.append(f"{todo} cell(s) to run")
    return lines


def _row_cells(run: RunContext, dataset: str, backbone: Backbone, seed: int) -> list[Cell]:
    """The cells of `run`'s rows on one dataset and seed (a forced view mode that changes nothing skipped)."""
    dcfg = run.configs[dataset]
    return [
        run.cell(dataset, backbone, row, seed) for row in map(Row.parse, run.cfg.methods) if not redundant(row, dcfg)
    ]


def _data_status(dataset: str, cfg: BenchmarkConfig) -> str:
    from ..data import load_split

    try:
        split = load_split(dataset, cfg.data_root, cfg.listing)
        return f"data ok ({len(split)} images, {split.num_classes} classes)"
    except UserError as exc:
        return f"data MISSING: {one_line(exc)}"


def _resume_note(run) -> str:
    """How a plan describes its output: resuming N recorded cells, or new."""
    return f"resuming: {len(run.results.runs)} cells recorded" if run.results.path.exists() else "new"
