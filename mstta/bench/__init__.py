"""The paper's benchmark as a library: `mstta-bench run`, `sweep` and `tsne` are thin CLIs over it.

    from mstta.bench import BenchmarkConfig, run_benchmark, parse_datasets, parse_backbones
    cfg = BenchmarkConfig(datasets=parse_datasets("ood"), backbones=parse_backbones("ViT-B-16"),
                          data_root="/data", out="results")
    summary = run_benchmark(cfg)      # results/results.json, results.csv, report.md, plots/

Modules: `context` (run settings, report rows, per-cell engine config / feature file / key, the
run's state), `store` (feature store, extraction), `runner` (run: cells, resume, dry run),
`results` (results.json / csv), `report` (report.md beside the paper; `reportfmt` its cell
formatting, `efficiencyreport` its speed table), `paper` (the paper's numbers), `sweep`
(ablations), `efficiency` (end-to-end fps and memory), `plots` (accuracy curves, t-SNE), `field`,
`fieldreport`, `fieldplots`, `textsets` (`mstta-bench field`). `runner`, `sweep` and `efficiency`
build on `context`, never on each other's internals.
"""

from __future__ import annotations

from .context import BenchmarkConfig, Row, RunContext, default_methods
from .plots import mean_shifted, tsne_figure
from .report import write_reports
from .runner import parse_backbones, parse_datasets, parse_methods, parse_seeds, plan_benchmark, run_benchmark
from .store import Backbone, FeatureKey, ensure_features, resolve_backbone
from .sweep import parse_param, plan_sweep, run_sweep

__all__ = [
    "Backbone",
    "BenchmarkConfig",
    "FeatureKey",
    "Row",
    "RunContext",
    "default_methods",
    "ensure_features",
    "mean_shifted",
    "parse_backbones",
    "parse_datasets",
    "parse_methods",
    "parse_param",
    "parse_seeds",
    "plan_benchmark",
    "plan_sweep",
    "resolve_backbone",
    "run_benchmark",
    "run_sweep",
    "tsne_figure",
    "write_reports",
]
