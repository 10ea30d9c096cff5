"""Ablations: one engine hyperparameter swept over values on chosen datasets, reported like the
paper's ablation tables (k, alpha, lam, ms_steps; any EngineConfig field can be swept).

    run_sweep(cfg, "k", [2, 4, 6, 8, 16])  ->  <out>/sweep_k.{json,csv,md,png}

Cells are (dataset, backbone, method, seed, value), resumable like `run`; all values replay the
same feature file. `ms_steps=0` means the cache baseline without mean shift (the paper's row 0).
"""
from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import yaml

from ..atomic import atomic_open
from ..config import EngineConfig
from ..errors import UserError
from . import paper
from .report import DASH, diff, fmt, fmt_stats, stats, table
from .results import SWEEP_KEY, ResultsStore, write_csv
from .runner import BenchmarkConfig, _Run, cell_fingerprint, dataset_config, feature_key, replay_cell

PARAM_LABEL = {"k": "k", "alpha": "α", "lam": "λ", "ms_steps": "MS steps"}


def _scalar(raw: str, param: str) -> Any:
    try:
        v = yaml.safe_load(raw)
    except yaml.YAMLError:
        v = raw
    if isinstance(v, bool) or v is None:
        raise UserError(f"--param {param}: bad value {raw!r}; expected numbers, e.g. --param {param}=1,2,4")
    return v


def expand(tokens: list[str], param: str) -> list[Any]:
    """Values from `a,b,c` with an optional `...` before the last one: `0,0.2,...,1` steps by b-a."""
    if "..." not in tokens:
        return [_scalar(t, param) for t in tokens]
    i = tokens.index("...")
    head, tail = tokens[:i], tokens[i + 1:]
    if len(head) < 2 or len(tail) != 1 or "..." in tail:
        raise UserError(f"--param {param}: '...' needs two values before it and one after, e.g. {param}=0,0.2,...,1")
    vals = [_scalar(t, param) for t in head]
    end = _scalar(tail[0], param)
    if not all(isinstance(v, (int, float)) for v in vals + [end]):
        raise UserError(f"--param {param}: '...' works with numbers only")
    step = vals[-1] - vals[-2]
    if step <= 0 or end < vals[-1]:
        raise UserError(f"--param {param}: '...' needs increasing values up to the last one")
    cur = vals[-1]
    while cur + step <= end + 1e-9 * max(1.0, abs(end)):
        cur = round(cur + step, 10)
        vals.append(cur)
    is_int = all(isinstance(v, int) for v in vals + [end])
    return [int(v) if is_int else v for v in vals]


def parse_param(spec: str) -> tuple[str, list[Any]]:
    """`k=2,4,8` -> ("k", [2, 4, 8]); a bare `k` takes the paper's values for it."""
    name, sep, raw = str(spec).partition("=")
    name = name.strip()
    fields = [f.name for f in dataclasses.fields(EngineConfig)]
    if name not in fields:
        raise UserError(f"--param {spec}: '{name}' is not an engine hyperparameter; choose one of: {', '.join(fields)}")
    if not sep:
        found = paper.ablation(name)
        if found is None:
            raise UserError(f"--param {name}: give the values, e.g. --param {name}=1,2,4 (the paper has no grid for it)")
        return name, [row[paper.ABLATION[name][1]] for row in found[1]]
    tokens = [t.strip() for t in raw.split(",")]
    if not raw.strip() or any(not t for t in tokens):
        raise UserError(f"--param {spec}: expected NAME=V1,V2,..., e.g. --param {name}=1,2,4")
    values = list(dict.fromkeys(expand(tokens, name)))
    return name, values


def sweep_method(param: str, value: Any, method: str) -> str:
    """The method a sweep value runs: `ms_steps=0` is the cache baseline (no mean shift)."""
    if param == "ms_steps" and value == 0:
        return "baseline" if method == "ms-tta" else method.replace("+ms", "")
    return method


def engine_for(dataset: str, overrides: list[str], param: str, value: Any) -> EngineConfig:
    """The dataset's engine config with `param=value` on top (`ms_steps=0` keeps the default steps)."""
    extra = [] if (param == "ms_steps" and value == 0) else [f"{param}={value}"]
    return dataset_config(dataset, overrides + extra).engine


def default_datasets(param: str) -> str:
    found = paper.ablation(param)
    if found is None:
        raise UserError(f"--param {param}: the paper has no ablation for it; pass --datasets")
    return ",".join(found[0])


def run_sweep(cfg: BenchmarkConfig, param: str, values: Sequence[Any], method: str = "ms-tta") -> dict[str, Any]:
    """Run every unfinished (dataset, backbone, seed, value) cell; write sweep_<param>.{json,csv,md,png}.
    Datasets that cannot run are reported and skipped; UserError when none could."""
    for d in cfg.datasets:                       # every value must be valid before anything runs
        for v in values:
            engine_for(d, cfg.overrides, param, v)
    cfg = dataclasses.replace(cfg, methods=[method])
    run = _Run(cfg, f"sweep_{param}.json", SWEEP_KEY)
    for backbone in cfg.backbones:
        run.each_dataset(backbone, lambda d, b=backbone: _sweep_dataset(run, b, d, param, values, method),
                         f"sweep {param} {backbone.label}")
    if not any(run.ok.values()):
        raise UserError(f"no dataset could run: {run.missing[0]['reason'] if run.missing else 'nothing ran'}")
    for m in run.missing:
        run.results.set_missing(m["dataset"], m["backbone"], m["pretrained"], m["reason"])
    report = write_sweep_reports(Path(cfg.out), param, plots=cfg.plots)
    return {"ran": run.ran, "skipped": run.skipped, "missing": run.missing, "out": str(cfg.out), "report": str(report)}


def _sweep_dataset(run: _Run, backbone, dataset: str, param: str, values: Sequence[Any], method: str) -> None:
    cfg = run.cfg
    dcfg = run.configs[dataset]
    for seed in cfg.seeds:
        fkey = feature_key(dataset, backbone, run.precision, dcfg, seed, cfg.limit)
        todo = []
        for v in values:
            m = sweep_method(param, v, method)
            ecfg = engine_for(dataset, cfg.overrides, param, v)
            key = {**run.cell_key(dataset, backbone, m, seed), "param": param, "value": v}
            if run.results.is_done(key, cell_fingerprint(ecfg, fkey)):
                run.skipped += 1
            else:
                todo.append((v, m, ecfg, key))
        if not todo:
            continue
        path, fs, zs = run.stream(fkey)
        for v, m, ecfg, key in run.bar(todo, desc=f"{dataset} seed {seed}", leave=False, unit="value"):
            rec = replay_cell(fs, ecfg, m, key, fkey, path, zs, run.device, run.versions, Path(cfg.out))
            rec["sweep_method"] = method
            run.results.record(rec)
            run.ran += 1


def plan_sweep(cfg: BenchmarkConfig, param: str, values: Sequence[Any], method: str = "ms-tta") -> list[str]:
    """What run_sweep would do, as lines (data, feature files, cells done/to run). Writes nothing."""
    from .runner import plan_benchmark

    lines = plan_benchmark(dataclasses.replace(cfg, methods=[]))[:-1]
    path = Path(cfg.out) / f"sweep_{param}.json"
    results = ResultsStore(path, SWEEP_KEY) if path.exists() else None
    todo = 0
    for backbone in cfg.backbones:
        for dataset in cfg.datasets:
            for seed in cfg.seeds:
                fkey = feature_key(dataset, backbone, _precision(cfg), dataset_config(dataset, cfg.overrides), seed,
                                   cfg.limit)
                for v in values:
                    m = sweep_method(param, v, method)
                    key = {"dataset": dataset, "backbone": backbone.name, "pretrained": backbone.pretrained,
                           "method": m, "seed": seed, "param": param, "value": v}
                    fp = cell_fingerprint(engine_for(dataset, cfg.overrides, param, v), fkey)
                    todo += not (results is not None and results.is_done(key, fp))
    lines.append(f"sweep {param} = {', '.join(map(str, values))} with {method}: {todo} cell(s) to run "
                 f"(-> {cfg.out}/sweep_{param}.md)")
    return lines


def _precision(cfg: BenchmarkConfig) -> str:
    from ..devices import resolve_device
    from .store import resolved_precision

    return resolved_precision(resolve_device(cfg.device), cfg.precision)


# ---------------------------------------------------------------------- reports
def sweep_table(runs: list[dict[str, Any]], param: str, pkey: str | None, method: str) -> list[str]:
    """Rows per value: ours / paper / Δ per dataset, the average, and adaptation samples/s."""
    order = list(paper.ablation(param)[0]) if paper.ablation(param) else []
    present = list(dict.fromkeys(r["dataset"] for r in runs))
    cols = [d for d in order if d in present] + [d for d in present if d not in order]
    acc: dict = defaultdict(lambda: defaultdict(list))
    speed: dict = defaultdict(list)
    for r in sorted(runs, key=lambda r: r["seed"]):
        acc[r["value"]][r["dataset"]].append(float(r["accuracy"]))
        speed[r["value"]].append(float(r["adapt_fps"]))
    with_paper = pkey == "vit_b16" and method == "ms-tta" and paper.ablation(param) is not None
    rows = []
    for v in sorted(acc, key=lambda x: (isinstance(x, str), x)):
        ours = [stats(acc[v].get(d, [])) for d in cols]
        avg = statistics.fmean(s[0] for s in ours) if len(cols) > 1 and all(ours) else None
        row = paper.ablation_row(param, v) if with_paper else None
        ref = [row.get(d) if row else None for d in cols] + [row.get("average") if row else None]
        means = [s[0] if s else None for s in ours] + [avg]
        rows.append([str(v), "ours"] + [fmt_stats(s) for s in ours] + [fmt(avg), fmt(statistics.fmean(speed[v]))])
        rows.append(["", "paper"] + [fmt(x) for x in ref] + [fmt(row.get("fps")) if row else DASH])
        rows.append(["", "Δ"] + [fmt(diff(a, b), True) for a, b in zip(means, ref)] + [DASH])
    return table([PARAM_LABEL.get(param, param), ""] + [paper.dataset_label(d) for d in cols]
                 + ["Average", "samples/s"], rows)


def write_sweep_reports(out: Path, param: str, plots: bool = True) -> Path:
    """sweep_<param>.csv, .md (and .png) from sweep_<param>.json."""
    from .report import backbone_label

    store = ResultsStore(out / f"sweep_{param}.json", SWEEP_KEY)
    write_csv(out / f"sweep_{param}.csv", store.runs, extra=("param", "value"))
    groups: dict = defaultdict(list)
    for r in store.runs:
        groups[(r["backbone"], r["pretrained"], r.get("sweep_method", r["method"]))].append(r)
    lines = [f"# Ablation: {param}", "",
             "Top-1 accuracy (%) per value. `ours`: this sweep (mean ± sample std over seeds); `paper`: the paper's "
             "ablation table (ViT-B/16, MS-TTA), — where it has no number; `Δ` = ours − paper. `samples/s`: "
             "adaptation throughput of the replay (encoder excluded); the paper's row is its end-to-end FPS "
             "(RTX 3090), so the two are not comparable.", ""]
    if param == "ms_steps":
        lines += ["MS steps 0 is the cache baseline without mean shift.", ""]
    for (bb, pre, method), runs in groups.items():
        pkey = paper.backbone_key(bb, pre)
        lines += [f"## {paper.METHOD_LABEL.get(method, method)} · {backbone_label(bb, pre)}", ""]
        lines += sweep_table(runs, param, pkey, method) + [""]
    missing = store.data.get("missing", [])
    if missing:
        lines += ["## Missing datasets", ""] + table(["Dataset", "Backbone", "Reason"], [
            [m["dataset"], backbone_label(m["backbone"], m["pretrained"]), m["reason"].replace("|", "\\|")]
            for m in missing]) + [""]
    if plots and store.runs:
        png = sweep_plot(out / f"sweep_{param}.png", param, store.runs)
        lines += [f"![accuracy vs {param}]({png.name})", ""]
    path = out / f"sweep_{param}.md"
    with atomic_open(path, "w") as fh:
        fh.write("\n".join(lines))
    return path


def sweep_plot(path: Path, param: str, runs: list[dict[str, Any]]) -> Path:
    """Accuracy (mean over seeds) vs value, one line per (dataset, backbone, method)."""
    from matplotlib.figure import Figure

    from .plots import _save

    series: dict = defaultdict(lambda: defaultdict(list))
    for r in runs:
        series[(r["dataset"], r["backbone"], r.get("sweep_method", r["method"]))][r["value"]].append(r["accuracy"])
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for (ds, bb, m), by_v in series.items():
        xs = sorted(v for v in by_v if isinstance(v, (int, float)))
        ax.plot(xs, [statistics.fmean(by_v[x]) for x in xs], marker="o",
                label=f"{paper.dataset_label(ds)} · {bb}" + (f" · {m}" if m != "ms-tta" else ""))
    ax.set_xlabel(PARAM_LABEL.get(param, param))
    ax.set_ylabel("top-1 accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)
