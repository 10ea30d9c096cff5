"""Run a method over a precomputed feature file (see README, "Feature files") and report."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from ..atomic import atomic_open, sweep_stale
from ..bench.config import load_dataset_config
from ..configfile import parse_overrides
from ..engine.family_runner import forget_marks
from ..engine.methods import get_method, list_methods
from ..engine.protocol import clip_label, describe
from ..engine.replay import ReplayResult, replay
from ..engine.scale import scale_set, with_file_scale
from ..errors import UserError
from ..features.devices import resolve_device
from ..features.format import FeatureSet, load_features
from ..safety import check_memory, check_outputs

OUT_FORMATS = (".npy", ".csv", ".jsonl")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--features", required=True, metavar="F.npz", help="feature file to replay")
    p.add_argument(
        "--method", default="ms-tta", metavar="NAME", help=f"one of: {', '.join(list_methods())} (default ms-tta)"
    )
    p.add_argument(
        "--config", metavar="YAML", help="dataset config, e.g. configs/oxford_pets.yaml (default: built-in defaults)"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a hyperparameter, e.g. --set k=4 (repeatable)",
    )
    p.add_argument(
        "--out",
        metavar="PATH",
        help="write predictions: .npy (class index per sample), .csv or .jsonl (with CLIP's prediction and scores); "
        "never an input, a link or a special file (docs/limits.md)",
    )
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1, ...")
    p.add_argument(
        "--online",
        action="store_true",
        help="feed samples one by one to the online engine instead of the vectorised replay",
    )
    p.add_argument(
        "--search-on-labels",
        action="store_true",
        help="dmn-zs rows only: choose DMN's fusion weight on the file's TEST labels (the paper's protocol, "
        "YBZh/DMN issue #2); every output is marked label-tuned",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (last line, always valid JSON: a non-finite number is null, named in "
        "'notes') instead of a text summary",
    )


def summarise(fs: FeatureSet, result: ReplayResult, method: str, engine_cfg) -> dict:
    """The replay's report: accuracy on labelled samples, speed, resolved hyperparameters."""
    out = {
        "method": method,
        "n": int(fs.num_samples),
        "classes": int(fs.num_classes),
        "views": int(fs.num_views),
        "samples_per_s": round(result.samples_per_s, 1),
        "seconds": round(result.seconds, 4),
        "hyperparameters": dataclasses.asdict(engine_cfg),
        "protocol": describe(method, engine_cfg, int(fs.num_views), fs.meta.get("augment"), "the file's (peer)"),
        "zero_shot_label": clip_label(method, engine_cfg, int(fs.num_views)),
    }
    m = get_method(method)
    marks = m.marks + engine_cfg.forget.marks + forget_marks(m, engine_cfg.forget)  # e.g. "not training-free"
    if marks:
        out["marks"] = marks
    if result.cuts is not None:  # forget's resets: the samples each one came before (mstta.engine.forget)
        out["cuts"] = [int(i) for i in result.cuts.nonzero()[0]]
    if fs.labels is not None and (fs.labels >= 0).any():
        known = fs.labels >= 0
        out["labelled"] = int(known.sum())
        out["accuracy"] = float((result.predictions[known] == fs.labels[known]).mean() * 100)
        out["zero_shot_accuracy"] = float((result.clip_predictions[known] == fs.labels[known]).mean() * 100)
    return out


def json_safe(report: dict) -> dict:
    """The report with every non-finite number (e.g. samples/s of a run too short to time) as
    null, named in `notes`: `--json` always prints valid JSON (json.dumps(allow_nan=False))."""
    notes: list[str] = []

    def clean(value, where: str):
        if isinstance(value, float) and not math.isfinite(value):
            notes.append(f"{where} was {value} (not representable in JSON); null")
            return None
        if isinstance(value, dict):
            return {k: clean(v, f"{where}.{k}" if where else k) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value

    out = clean(report, "")
    if notes:
        out["notes"] = out.get("notes", []) + notes
    return out


def _rows(fs: FeatureSet, result: ReplayResult, mark: str | None = None):
    names = fs.classnames
    for i in range(fs.num_samples):
        row = {
            "index": i,
            "prediction": int(result.predictions[i]),
            "score": round(float(result.confidence[i]), 6),
            "clip_prediction": int(result.clip_predictions[i]),
            "clip_score": round(float(result.clip_confidence[i]), 6),
            "entropy": round(float(result.entropy[i]), 6),
        }
        if names is not None:
            row["prediction_name"] = names[row["prediction"]]
            row["clip_prediction_name"] = names[row["clip_prediction"]]
        if fs.labels is not None:
            row["label"] = int(fs.labels[i])
        if mark is not None:
            row["label_tuned"] = mark
        if result.cuts is not None:
            row["cut"] = bool(result.cuts[i])
        yield row


def write_predictions(path: Path, fs: FeatureSet, result: ReplayResult, mark: str | None = None) -> None:
    """Predictions per sample in the format the extension names, streamed row by row into a
    pid-tagged temp file renamed into place when complete (atomic; removed on Ctrl-C/SIGTERM);
    `mark` (.csv/.jsonl): a column every row carries (the label-tuned note)."""
    if path.suffix == ".npy":
        with atomic_open(path, "wb") as fh:
            np.save(fh, result.predictions.astype(np.int64))
        return
    rows = _rows(fs, result, mark)
    with atomic_open(path, "w", encoding="utf-8") as fh:
        if path.suffix == ".jsonl":
            for row in rows:
                fh.write(json.dumps(row, allow_nan=False) + "\n")
        else:
            first = next(rows)
            w = csv.DictWriter(fh, fieldnames=list(first))
            w.writeheader()
            w.writerow(first)
            w.writerows(rows)


def replay_bytes(fs: FeatureSet) -> int:
    """Working memory of a replay beyond the loaded file: float32 queries, shifted and cache
    features [N, d] x 3 and logits, CLIP logits, probabilities [N, C] x 6 (see mstta/engine/replay.py)."""
    n, c, d = fs.num_samples, fs.num_classes, fs.features.shape[-1]
    return 4 * n * (3 * d + 6 * c)


def feature_file_tower(fs: FeatureSet, method: str, path, device):
    """A prompt-tuning method's text tower: the feature file's own model (its meta's `model` and
    `pretrained`, loaded in fp32 as TPT keeps its weights) over its class names; None for the others."""
    from ..engine.methods import needs_text_tower
    from ..features.models import load_clip
    from ..features.text_tower import text_tower

    if not needs_text_tower(method):
        return None
    if not fs.meta.get("model") or not fs.classnames:
        raise UserError(
            f"--features {path}: names no model or no classes (meta 'model', array 'classnames'); "
            f"{method} tunes a prompt through that model's text tower: use a file made by mstta-bench extract"
        )
    clip = load_clip(fs.meta["model"], fs.meta.get("pretrained", "none"), device, "fp32")
    return text_tower(clip, fs.classnames)


def run(args: argparse.Namespace) -> int:
    check_outputs({"--out": args.out}, inputs={"--features": args.features, "--config": args.config})
    out = Path(args.out) if args.out else None
    if out is not None and out.suffix not in OUT_FORMATS:
        raise UserError(f"--out {out}: unknown format '{out.suffix}'; use one of {', '.join(OUT_FORMATS)}")
    if args.method not in list_methods():
        raise UserError(f"--method: unknown method '{args.method}'; choose one of: {', '.join(list_methods())}")
    cfg = load_dataset_config(args.config, args.set)
    device = resolve_device(args.device)
    fs = load_features(args.features)
    check_memory(
        replay_bytes(fs),
        f"replaying {fs.num_samples:,} samples x {fs.num_classes:,} classes "
        f"x {fs.features.shape[-1]:,} dims (--features {args.features})",
        fix="replay a smaller feature file",
    )
    engine, scale_from = with_file_scale(cfg.engine, fs.meta, scale_set(parse_overrides(args.set)), args.features)
    searched = search_on_labels(fs, args.method, engine, device, out) if args.search_on_labels else None
    tower = feature_file_tower(fs, args.method, args.features, device)
    result = replay(fs.features, fs.text, args.method, engine, device=device, online=args.online, text_tower=tower)
    report = summarise(fs, result, args.method, engine)
    report.update(features=str(args.features), logit_scale=engine.logit_scale, logit_scale_from=scale_from)
    mark = None
    if searched is not None:
        from ..engine.families.dmn import LABEL_TUNED

        mark = LABEL_TUNED
        report.update(label_tuned=mark, searched_weight=searched[0], searched_accuracy=searched[1])
    if out is not None:
        sweep_stale(out.parent)  # a killed run's .<name>.<pid>-<token>.tmp
        write_predictions(out, fs, result, mark)
        report["out"] = str(out)
    if args.json:
        print(json.dumps(json_safe(report), allow_nan=False))
    else:
        acc = (
            f", accuracy {report['accuracy']:.2f}% ({report['zero_shot_label']} {report['zero_shot_accuracy']:.2f}%)"
            if "accuracy" in report
            else ""
        )
        tuned = f" [{mark}: weight {searched[0]:g}]" if mark else ""
        tuned += "".join(f" [{m}]" for m in report.get("marks", []))
        print(
            f"{args.method}: {report['n']} samples, {report['classes']} classes{acc}, "
            f"{report['samples_per_s']:.0f} samples/s{tuned}"
        )
        print(f"  {report['protocol']}; logit scale {engine.logit_scale:g} ({scale_from})")
    return 0


def search_on_labels(fs: FeatureSet, method: str, engine_cfg, device, out: Path | None) -> tuple[float, float]:
    """--search-on-labels: DMN's fusion weight with the best accuracy on the file's test labels
    (`mstta.engine.families.dmn.search_weight`), written into `engine_cfg.dmn.weight` -> (weight, accuracy %)."""
    import torch

    from ..engine.families import dmn
    from ..engine.methods import get_method

    row = get_method(method)
    if row.family != dmn.NAME:
        rows = ", ".join(m.name for m in dmn.METHODS)
        raise UserError(f"--search-on-labels: only for the dmn-zs rows ({rows}), not '{method}'")
    if fs.labels is None or not (fs.labels >= 0).any():
        raise UserError("--search-on-labels: the feature file has no labels to search on")
    if out is not None and out.suffix == ".npy":
        raise UserError(
            f"--out {out}: a .npy cannot carry the label-tuned mark; use .csv or .jsonl with --search-on-labels"
        )
    text = torch.as_tensor(fs.text).to(device)
    dtype = torch.float64 if text.dtype == torch.float64 else torch.float32
    feats = torch.as_tensor(fs.features).to(device, dtype)
    feats = feats.unsqueeze(1) if feats.dim() == 2 else feats
    with torch.inference_mode():
        _, p_text, p_mem = dmn.replay_parts(
            torch.nn.functional.normalize(feats, dim=-1),
            torch.nn.functional.normalize(text.to(dtype), dim=-1),
            engine_cfg.dmn,
            engine_cfg.logit_scale,
            engine_cfg.shift_settings() if row.mean_shift else None,
        )
    weight, acc = dmn.search_weight(p_text, p_mem, fs.labels)
    engine_cfg.dmn.weight = weight
    return weight, acc
