"""Ablations: one engine hyperparameter swept over values on chosen datasets, reported like the
paper's ablation tables (k, alpha, lam, ms_steps; any EngineConfig field can be swept).

    run_sweep(cfg, "k", [2, 4, 6, 8, 16])  ->  <out>/sweep_k.{json,csv,md,png}

Cells are (dataset, backbone, method, seed, value), resumable like `run`; all values replay the
same feature file. `ms_steps=0` means the cache baseline without mean shift (the paper's row 0).
Sweeps run the reading of MS-TTA held against the paper's OOD rows by default, `ms-tta+boost@original`
(on the cross-dataset sets it equals `ms-tta+boost`: they predict from the original image already).
A grid of more than MAX_CELLS cells is refused before any work.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import yaml

from ..atomic import atomic_open
from ..configfile import from_dict
from ..engine.config import FAMILY_SECTIONS, EngineConfig
from ..errors import UserError
from . import paper
from .config import DatasetConfig
from .context import BenchmarkConfig, Cell, Row, RunContext, row_engine_config, row_title
from .plots import save_png
from .reportfmt import DASH, diff, fmt, fmt_stats, stats, table
from .results import SWEEP_KEY, ResultsStore, write_csv
from .runner import plan_benchmark, replay_cell, zero_shot_accuracy
from .store import Backbone

PARAM_LABEL = {"k": "k", "alpha": "α", "lam": "λ", "ms_steps": "MS steps"}
DEFAULT_METHOD = "ms-tta+boost@original"  # the reading held against the paper on OOD (docs/benchmark.md)
MAX_CELLS = 10_000  # datasets x backbones x seeds x values; more is refused before any work


def _scalar(raw: str, param: str) -> Any:
    """A value as the user typed it: an integer, else a finite number (`1e-5` included), else a word."""
    text = raw.strip()
    for kind in (int, float):
        try:
            v = kind(text)
        except ValueError:
            continue
        if isinstance(v, float) and not math.isfinite(v):
            raise UserError(f"--param {param}: bad value {raw!r}; values must be finite numbers")
        return v
    try:
        v = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError):  # ValueError: over 4,300 digits
        v = text
    if isinstance(v, bool) or v is None or not isinstance(v, (int, float, str)):
        raise UserError(f"--param {param}: bad value {raw!r}; expected numbers, e.g. --param {param}=1,2,4")
    return v


def expand(tokens: list[str], param: str) -> list[Any]:
    """Values from `a,b,c` with an optional `...` before the last one: `0,0.2,...,1` steps by b-a."""
    if "..." not in tokens:
        return [_scalar(t, param) for t in tokens]
    i = tokens.index("...")
    head, tail = tokens[:i], tokens[i + 1 :]
    if len(head) < 2 or len(tail) != 1 or "..." in tail:
        raise UserError(f"--param {param}: '...' needs two values before it and one after, e.g. {param}=0,0.2,...,1")
    vals = [_scalar(t, param) for t in head]
    end = _scalar(tail[0], param)
    if not all(isinstance(v, (int, float)) for v in vals + [end]):
        raise UserError(f"--param {param}: '...' works with numbers only")
    step = vals[-1] - vals[-2]
    if step <= 0 or end < vals[-1]:
        raise UserError(f"--param {param}: '...' needs increasing values up to the last one")
    count = math.floor((end - vals[-1]) / step + 1e-9) + len(vals)
    if count > MAX_CELLS:
        raise UserError(
            f"--param {param}: '...' makes {count:,} values; at most {MAX_CELLS:,} cells per sweep, use a larger step"
        )
    cur = vals[-1]
    while cur + step <= end + 1e-9 * max(1.0, abs(end)):
        cur = round(cur + step, 10)
        vals.append(cur)
    is_int = all(isinstance(v, int) for v in vals + [end])
    return [int(v) if is_int else v for v in vals]


def sweepable() -> list[str]:
    """Every key a sweep can vary: the engine's scalar keys, then each family section's as `section.key`."""
    out = []
    for f in dataclasses.fields(EngineConfig):
        if f.name in FAMILY_SECTIONS:
            out += [f"{f.name}.{g.name}" for g in dataclasses.fields(getattr(EngineConfig(), f.name))]
        else:
            out.append(f.name)
    return out


def parse_param(spec: str) -> tuple[str, list[Any]]:
    """`k=2,4,8` -> ("k", [2, 4, 8]); a bare `k` takes the paper's values for it."""
    name, sep, raw = str(spec).partition("=")
    name = name.strip()
    fields = sweepable()
    if name not in fields:
        raise UserError(
            f"--param {spec}: '{name}' is not a hyperparameter; choose one of: {', '.join(fields)} "
            f"(a family's key as SECTION.KEY, e.g. dota.eta)"
        )
    if not sep:
        found = paper.ablation(name)
        if found is None:
            raise UserError(
                f"--param {name}: give the values, e.g. --param {name}=1,2,4 (the paper has no grid for it)"
            )
        return name, [row[paper.ABLATION[name][1]] for row in found[1]]
    if raw.count(",") >= MAX_CELLS:
        raise UserError(
            f"--param {name}: {raw.count(',') + 1:,} values; at most {MAX_CELLS:,} cells per sweep, pass fewer values"
        )
    tokens = [t.strip() for t in raw.split(",")]
    if not raw.strip() or any(not t for t in tokens):
        raise UserError(f"--param {spec}: expected NAME=V1,V2,..., e.g. --param {name}=1,2,4")
    values = list(dict.fromkeys(expand(tokens, name)))
    return name, values


NO_SHIFT = {"ms-tta": "baseline", "ms-tta+boost": "baseline+boost"}


def sweep_method(param: str, value: Any, method: str) -> str:
    """The row a sweep value runs: `ms_steps=0` is the cache baseline (no mean shift) of the same
    pipeline (`ms-tta+boost` -> `baseline+boost`, `X+ms` -> `X`)."""
    if param == "ms_steps" and value == 0:
        row = Row.parse(method)
        base = NO_SHIFT.get(row.method, row.method.replace("+ms", ""))
        return Row(base, row.view_mode).name
    return method


def engine_for(dcfg: DatasetConfig, param: str, value: Any, method: str = DEFAULT_METHOD) -> EngineConfig:
    """The engine config of one sweep cell: the row's (dataset config + --set, its view mode) with
    `param` set to the parsed value itself (`ms_steps=0` keeps the default steps: it runs the baseline)."""
    ecfg = row_engine_config(Row.parse(method), dcfg)
    if param == "ms_steps" and value == 0:
        return ecfg
    section, dot, key = param.partition(".")
    return from_dict(EngineConfig, {section: {key: value}} if dot else {param: value}, f"--param {param}", base=ecfg)


def check_grid(cfg: BenchmarkConfig, values: Sequence[Any]) -> int:
    """The number of cells of a sweep; more than MAX_CELLS is refused at once."""
    cells = len(cfg.datasets) * len(cfg.backbones) * len(cfg.seeds) * len(values)
    if cells > MAX_CELLS:
        raise UserError(
            f"--param: the sweep has {cells:,} cells ({len(cfg.datasets)} dataset(s) x "
            f"{len(cfg.backbones)} backbone(s) x {len(cfg.seeds)} seed(s) x {len(values):,} values); "
            f"at most {MAX_CELLS:,}: pass fewer values"
        )
    return cells


def default_datasets(param: str) -> str:
    found = paper.ablation(param)
    if found is None:
        raise UserError(f"--param {param}: the paper has no ablation for it; pass --datasets")
    return ",".join(found[0])


def run_sweep(cfg: BenchmarkConfig, param: str, values: Sequence[Any], method: str = DEFAULT_METHOD) -> dict[str, Any]:
    """Run every unfinished (dataset, backbone, seed, value) cell; write sweep_<param>.{json,csv,md,png}.
    Datasets that cannot run are reported and skipped; UserError when none could."""
    check_grid(cfg, values)
    cfg = dataclasses.replace(cfg, methods=[method])
    run = RunContext(cfg, f"sweep_{param}.json", SWEEP_KEY)
    for dcfg in run.configs.values():  # every value must be valid before anything runs
        for v in values:
            engine_for(dcfg, param, v, method)
    for backbone in cfg.backbones:
        run.each_dataset(
            backbone,
            lambda d, b=backbone: _sweep_dataset(run, b, d, param, values, method),
            f"sweep {param} {backbone.label}",
        )
    run.finish()
    report = write_sweep_reports(Path(cfg.out), param, plots=cfg.plots)
    return {"ran": run.ran, "skipped": run.skipped, "missing": run.missing, "out": str(cfg.out), "report": str(report)}


def sweep_cells(
    run: RunContext, dataset: str, backbone: Backbone, seed: int, param: str, values: Sequence[Any], method: str
) -> list[Cell]:
    """The cells of one dataset and seed, one per value (`RunContext.cell` with the value's engine config)."""
    dcfg = run.configs[dataset]
    return [
        run.cell(
            dataset,
            backbone,
            Row.parse(sweep_method(param, v, method)),
            seed,
            engine_for(dcfg, param, v, method),
            param=param,
            value=v,
        )
        for v in values
    ]


def _sweep_dataset(
    run: RunContext, backbone: Backbone, dataset: str, param: str, values: Sequence[Any], method: str
) -> None:
    for seed in run.cfg.seeds:
        cells = sweep_cells(run, dataset, backbone, seed, param, values, method)
        for todo, path, fs in run.streams(run.pending(cells)):
            zs = zero_shot_accuracy(fs)
            for cell in run.bar(todo, desc=f"{dataset} seed {seed}", leave=False, unit="value"):
                tower = run.models.tower(backbone, cell.row.method, fs.classnames)
                rec = replay_cell(fs, cell, path, zs, run.device, run.versions, Path(run.cfg.out), tower)
                rec["sweep_method"] = method
                run.results.record(rec)
                run.ran += 1


def plan_sweep(cfg: BenchmarkConfig, param: str, values: Sequence[Any], method: str = DEFAULT_METHOD) -> list[str]:
    """What run_sweep would do, as lines (data, feature files, cells done/to run). Writes nothing."""
    check_grid(cfg, values)
    cfg = dataclasses.replace(cfg, methods=[method])
    run = RunContext(cfg, f"sweep_{param}.json", SWEEP_KEY)
    lines = plan_benchmark(cfg, run, lambda r, d, b, s: sweep_cells(r, d, b, s, param, values, method))
    todo = lines.pop().split()[0]
    lines.append(
        f"sweep {param} = {', '.join(map(str, values))} with {method}: {todo} cell(s) to run "
        f"(-> {cfg.out}/sweep_{param}.md)"
    )
    return lines


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
    with_paper = (
        pkey == "vit_b16"
        and Row.parse(method).method in ("ms-tta", "ms-tta+boost")
        and paper.ablation(param) is not None
    )
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
    return table(
        [PARAM_LABEL.get(param, param), ""] + [paper.dataset_label(d) for d in cols] + ["Average", "samples/s"], rows
    )


def write_sweep_reports(out: Path, param: str, plots: bool = True) -> Path:
    """sweep_<param>.csv, .md (and .png) from sweep_<param>.json."""
    from .papertable import caption
    from .reportfmt import backbone_label

    store = ResultsStore(out / f"sweep_{param}.json", SWEEP_KEY)
    write_csv(out / f"sweep_{param}.csv", store.runs, extra=("param", "value"))
    groups: dict = defaultdict(list)
    for r in store.runs:
        groups[(r["backbone"], r["pretrained"], r.get("sweep_method", r["method"]))].append(r)
    lines = [
        f"# Ablation: {param}",
        "",
        "Top-1 accuracy (%) per value. `ours`: this sweep (mean ± sample std over seeds); `paper`: the paper's "
        "ablation table (ViT-B/16, MS-TTA; held against every reading of MS-TTA swept — by default "
        "`ms-tta+boost@original`, the reading its λ = 0 row supports on ImageNet-A), — where it has no number; "
        "`Δ` = ours − paper. `samples/s`: "
        "adaptation throughput of the replay (encoder excluded); the paper's row is its end-to-end FPS "
        "(RTX 3090), so the two are not comparable.",
        "",
        caption(store.runs),
        "",
    ]
    if param == "ms_steps":
        lines += [
            "MS steps 0 is the cache baseline without mean shift, on the same pipeline "
            "(`ms-tta+boost` -> `baseline+boost`, `ms-tta` -> `baseline`).",
            "",
        ]
    for (bb, pre, method), runs in groups.items():
        pkey = paper.backbone_key(bb, pre)
        lines += [f"## {row_title(method)} · {backbone_label(bb, pre)}", ""]
        lines += sweep_table(runs, param, pkey, method) + [""]
    missing = store.data.get("missing", [])
    if missing:
        lines += (
            ["## Missing datasets", ""]
            + table(
                ["Dataset", "Backbone", "Reason"],
                [
                    [m["dataset"], backbone_label(m["backbone"], m["pretrained"]), m["reason"].replace("|", "\\|")]
                    for m in missing
                ],
            )
            + [""]
        )
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

    series: dict = defaultdict(lambda: defaultdict(list))
    for r in runs:
        series[(r["dataset"], r["backbone"], r.get("sweep_method", r["method"]))][r["value"]].append(r["accuracy"])
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for (ds, bb, m), by_v in series.items():
        xs = sorted(v for v in by_v if isinstance(v, (int, float)))
        ax.plot(
            xs,
            [statistics.fmean(by_v[x]) for x in xs],
            marker="o",
            label=f"{paper.dataset_label(ds)} · {bb} · {row_title(m)}",
        )
    ax.set_xlabel(PARAM_LABEL.get(param, param))
    ax.set_ylabel("top-1 accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_png(fig, path)
