"""The paper's benchmark as a library: `mstta-bench run`, `sweep` and `tsne` are thin CLIs over it.

    from mstta.bench.runner import BenchmarkConfig, parse_backbones, parse_datasets, run_benchmark
    cfg = BenchmarkConfig(datasets=parse_datasets("ood"), backbones=parse_backbones("ViT-B-16"),
                          data_root="/data", out="results")
    summary = run_benchmark(cfg)      # results/results.json, results.csv, report.md, plots/

Modules (imported by name: the package itself imports nothing, so `mstta.bench.config`, the
dataset file that `import mstta` reads, comes without the rest): `config` (a dataset's
`engine:`/`bench:` file, `load_dataset_config`), `metrics` (the field table's metrics), `context`
(run settings, report rows, per-cell engine config / feature file / key, the run's state), `store`
(feature store, extraction), `runner` (run: cells, resume, dry run), `results` (results.json /
csv), `report` (report.md beside the paper; `reportfmt` its cell formatting, `efficiencyreport`
its speed table), `paper` (the paper's numbers), `sweep` (ablations), `efficiency` (end-to-end fps
and memory), `plots` (accuracy curves, t-SNE), `field`, `fieldreport`, `fieldplots`, `textsets`
(`mstta-bench field`). `runner`, `sweep` and `efficiency` build on `context`, never on each other's
internals.
"""
