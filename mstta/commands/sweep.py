"""An ablation as one command: sweep one engine hyperparameter (k, alpha, lam, ms_steps, ...) over
values on chosen datasets and report it like the paper's ablation tables
(<out>/sweep_<param>.md, .json, .csv, .png). Reruns skip finished cells."""

from __future__ import annotations

import argparse

from ..engine.methods import list_methods
from .run import add_common, build_config


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..bench.sweep import DEFAULT_METHOD

    p.add_argument(
        "--param",
        required=True,
        metavar="NAME[=V1,V2,...]",
        help="hyperparameter and values, e.g. k=2,4,6,8,16, alpha=0,0.2,...,1.0 ('...' continues the "
        "step), lam=0,0.5,1,2,10, ms_steps=0,1,2,4 (0 = the baseline); a bare name takes the paper's grid",
    )
    p.add_argument(
        "--method",
        default=DEFAULT_METHOD,
        metavar="NAME",
        help=f"method to sweep (default {DEFAULT_METHOD}, the reading held against the paper on OOD; "
        f"one of: {', '.join(list_methods())}, optionally NAME@original or NAME@confident)",
    )
    add_common(p, datasets_default="paper")
    p.add_argument("--no-plots", action="store_true", help="skip the accuracy-vs-value PNG")


def run(args: argparse.Namespace) -> int:
    from ..atomic import output_lock, sweep_stale
    from ..bench.context import Row
    from ..bench.sweep import check_grid, default_datasets, parse_param, plan_sweep, run_sweep

    method = Row.parse(args.method, "--method").name
    param, values = parse_param(args.param)
    if args.datasets is None:
        args.datasets = default_datasets(param)
    cfg = build_config(args, [method])
    check_grid(cfg, values)
    if args.dry_run:
        print("\n".join(plan_sweep(cfg, param, values, method)))
        return 0
    with output_lock(cfg.out / f"sweep_{param}.json", "--out"):  # two sweeps of one file: the second is refused
        sweep_stale(cfg.out)
        summary = run_sweep(cfg, param, values, method)
    missing = f", {len(summary['missing'])} dataset(s) missing" if summary["missing"] else ""
    print(f"ran {summary['ran']} cell(s), skipped {summary['skipped']} finished{missing}; report: {summary['report']}")
    return 0
