"""The paper's benchmark: extract features once per (dataset, backbone, view kind, seed), replay
every method over the views its own code reads, and report beside the paper (results/results.json,
results.csv, report.md, plots). Rerunning skips finished cells; see docs/benchmark.md, "Reproduce
the paper", for the paper's tables."""

from __future__ import annotations

import argparse
import sys

from ..checks import int_in
from ..data import LISTINGS
from ..engine.config import VIEW_MODES
from ..errors import UserError
from ..features.extract_views import VIEWS_ON
from ..features.models import DEFAULT_MODEL, PRECISIONS
from ..features.views import AUGMENTS

SEEDS_HELP = (
    "stream-order seeds, e.g. 1,2,3,4,5 (default 1). Seed S orders the stream by torch.randperm(n) "
    "seeded with S over the sorted file list; no seed reproduces the peers' order, a second random "
    "draw over an unsorted directory listing"
)


def add_common(p: argparse.ArgumentParser, datasets_default: str = "all") -> None:
    """Flags shared by `run` and `sweep`: what to run on, where data/features/results live."""
    _add_data(p, datasets_default)
    _add_backbones(p)
    _add_streams(p)
    _add_places(p)
    _add_overrides(p)
    _add_compute(p)
    _add_run_mode(p)


def _add_data(p: argparse.ArgumentParser, datasets_default: str) -> None:
    """What to run on: the datasets and where they live."""
    p.add_argument(
        "--data-root",
        metavar="DIR",
        help="folder holding the datasets in the CoOp/TDA layout "
        "(not needed for imagefolder:PATH or when every feature file is already in the store)",
    )
    p.add_argument(
        "--datasets",
        default=None if datasets_default == "paper" else datasets_default,
        metavar="SPEC",
        help="ood (ImageNet-A/R/S/V2), cross (the 10 cross-dataset ones), all (both), or a comma list "
        "of dataset names/aliases/imagefolder:PATH, mixable: 'ood,dtd' (default "
        + ("the datasets of the paper's ablation of --param" if datasets_default == "paper" else datasets_default)
        + ")",
    )


def _add_backbones(p: argparse.ArgumentParser) -> None:
    """The models: backbones and their weights."""
    p.add_argument(
        "--backbone",
        default=DEFAULT_MODEL,
        metavar="NAME[,NAME]",
        help="ViT-B-16, RN50 (OpenAI weights), mstta-digits (the bundled digits model), mstta-tiny (random "
        "weights) or any open_clip architecture; a comma list runs each (default ViT-B-16)",
    )
    p.add_argument(
        "--pretrained",
        metavar="TAG|PATH|none",
        help="weights for every --backbone: an open_clip tag, a checkpoint file, or none "
        "(default: openai for ViT-B-16/RN50, bundled for mstta-digits, none for mstta-tiny)",
    )


def _add_streams(p: argparse.ArgumentParser) -> None:
    """The streams: seeds, file listing and where many views are made."""
    p.add_argument("--seeds", default="1", metavar="LIST", help=SEEDS_HELP)
    p.add_argument(
        "--listing",
        default="full",
        choices=LISTINGS,
        help="full: every image (default); peer: the peers' file lists, which drop every ImageNet-A/R/"
        "Sketch/V2 file whose name contains 'sh' (ImageNet-A: 6,862 of 7,500)",
    )
    p.add_argument(
        "--views-on",
        default="auto",
        choices=VIEWS_ON,
        help="where the views of a many-view stream are made: cpu (PIL, the peers' pixels), device "
        "(tensors on the model's device: exact crops on CUDA, the fast path on a CPU), auto "
        "(default: device on CUDA, else cpu); each has its own feature file in the store",
    )


def _add_places(p: argparse.ArgumentParser) -> None:
    """Where results and feature files go."""
    p.add_argument("--out", default="results", metavar="DIR", help="results folder (default %(default)s/)")
    p.add_argument(
        "--store", default="features", metavar="DIR", help="feature store shared by runs and sweeps (default features/)"
    )


def _add_overrides(p: argparse.ArgumentParser) -> None:
    """Config overrides for every dataset: any key, views, view mode, view kind, stream length."""
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a configs/<dataset>.yaml value for every dataset, e.g. --set k=4 (repeatable)",
    )
    p.add_argument(
        "--views", type=int, metavar="N", help="images per sample incl. the original (same as --set views=N)"
    )
    p.add_argument("--view-mode", choices=VIEW_MODES, help="same as --set view_mode=...")
    p.add_argument(
        "--augment",
        choices=AUGMENTS,
        help="make every method read this view kind (default: each method its own: crop for the "
        "boosting methods, the dataset's bench.augment for the others)",
    )
    p.add_argument("--limit", type=int, metavar="N", help="use only the first N samples of each stream (quick checks)")


def _add_compute(p: argparse.ArgumentParser) -> None:
    """Where and how fast: device, precision, extraction batch size and workers."""
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1, ...")
    p.add_argument("--precision", choices=PRECISIONS, help="model precision (default fp16 on GPU, fp32 on CPU)")
    p.add_argument("--batch-size", type=int, metavar="N", help="extraction: images per encoder forward")
    p.add_argument("--workers", type=int, metavar="N", help="extraction: data-loader worker processes")


def _add_run_mode(p: argparse.ArgumentParser) -> None:
    """How the run reports: progress bars, or a dry run that writes nothing."""
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="list what would run, what is cached and which data/weights are missing; write nothing",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..bench.context import default_methods
    from ..bench.papertable import add_format_flag

    add_common(p)
    p.add_argument(
        "--methods",
        default=",".join(default_methods()),
        metavar="LIST",
        help="comma list of methods, each optionally NAME@original or NAME@confident to force its view "
        f"mode (default: {', '.join(default_methods())})",
    )
    p.add_argument(
        "--fps-samples",
        type=int,
        default=32,
        metavar="N",
        help="images per method for the efficiency table (end to end, batch 1); 0 skips it (default 32)",
    )
    p.add_argument("--fps-dataset", metavar="NAME", help="dataset to time on (default: the first that ran)")
    p.add_argument("--no-plots", action="store_true", help="skip the accuracy-over-stream PNGs")
    add_format_flag(p)
    p.add_argument(
        "--report-only",
        action="store_true",
        help="only rebuild results.csv, report.md and plots from --out's results.json",
    )


def overrides(args: argparse.Namespace) -> list[str]:
    """--set pairs plus the --views/--view-mode shortcuts (shortcuts win)."""
    out = list(args.set)
    if args.views is not None:
        int_in(args.views, "--views", 1)
        out.append(f"views={args.views}")
    if args.view_mode:
        out.append(f"view_mode={args.view_mode}")
    return out


def build_config(args: argparse.Namespace, methods: list[str]):
    """argparse namespace -> BenchmarkConfig (every bad value is a one-line UserError)."""
    from pathlib import Path

    from ..bench.runner import BenchmarkConfig, parse_backbones, parse_datasets, parse_seeds

    check_places(args)
    for flag, value, low in (
        ("--limit", args.limit, 1),
        ("--batch-size", args.batch_size, 1),
        ("--workers", args.workers, 0),
        ("--fps-samples", getattr(args, "fps_samples", 0), 0),
    ):
        if value is not None:
            int_in(value, flag, low)
    return BenchmarkConfig(
        datasets=parse_datasets(args.datasets),
        backbones=parse_backbones(args.backbone, args.pretrained),
        methods=methods,
        seeds=parse_seeds(args.seeds),
        data_root=Path(args.data_root).expanduser() if args.data_root else None,
        out=Path(args.out),
        store=Path(args.store),
        overrides=overrides(args),
        listing=args.listing,
        views_on=args.views_on,
        augment=args.augment,
        device=args.device,
        precision=args.precision,
        batch_size=args.batch_size,
        workers=args.workers,
        limit=args.limit,
        fps_samples=getattr(args, "fps_samples", 0),
        fps_dataset=getattr(args, "fps_dataset", None),
        plots=not getattr(args, "no_plots", False),
        progress=not args.no_progress,
        notify=warn,
    )


def check_places(args: argparse.Namespace) -> None:
    """--out and --store are folders that never are, or sit inside, an input: --data-root or the
    other folder (a results file written into the feature store or the dataset would mix them)."""
    from ..safety import check_output_dir

    root = getattr(args, "data_root", None)
    check_output_dir("--out", args.out, {"--data-root": root, "--store": args.store})
    check_output_dir("--store", args.store, {"--data-root": root})
    for flag, folder in (("--out", args.out), ("--store", args.store)):
        if root and _inside(folder, root):
            raise UserError(
                f"{flag} {folder}: is inside --data-root {root}; keep results and features out of the dataset folder"
            )


def _inside(path, folder) -> bool:
    from pathlib import Path

    p, f = Path(path).expanduser().resolve(), Path(folder).expanduser().resolve()
    return p == f or f in p.parents


def warn(message: str) -> None:
    """One warning line on stderr, printed above any progress bar."""
    from tqdm import tqdm

    tqdm.write(f"mstta-bench: warning: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..atomic import output_lock, sweep_stale
    from ..bench.report import write_reports
    from ..bench.runner import parse_datasets, parse_methods, plan_benchmark, run_benchmark

    if args.report_only:
        check_places(args)
        if not (Path(args.out) / "results.json").is_file():
            raise UserError(f"--report-only: no results.json in {args.out}; run the benchmark first")
        print(f"report: {write_reports(Path(args.out), plots=not args.no_plots)}")
        paper_table(args, "results.json")
        return 0
    cfg = build_config(args, parse_methods(args.methods))
    if args.fps_dataset:
        fps = parse_datasets(args.fps_dataset)
        if len(fps) != 1 or fps[0] not in cfg.datasets:
            raise UserError(
                f"--fps-dataset {args.fps_dataset}: name one of the run's datasets ({', '.join(cfg.datasets)})"
            )
        cfg.fps_dataset = fps[0]
    if args.dry_run:
        print("\n".join(plan_benchmark(cfg)))
        return 0
    with output_lock(cfg.out / "results.json", "--out"):  # two runs on one --out: the second is refused
        sweep_stale(cfg.out)
        summary = run_benchmark(cfg)
    missing = f", {len(summary['missing'])} dataset(s) missing" if summary["missing"] else ""
    print(f"ran {summary['ran']} cell(s), skipped {summary['skipped']} finished{missing}; report: {summary['report']}")
    paper_table(args, "results.json")
    return 0


def paper_table(args: argparse.Namespace, results: str, field: bool = False) -> None:
    """--format: the paper-ready table of --out's results (`mstta.bench.papertable`)."""
    from pathlib import Path

    from ..bench.papertable import FIELD_METRICS, RUN_METRICS, write_table
    from ..bench.results import ResultsStore

    if getattr(args, "format", None):
        runs = ResultsStore(Path(args.out) / results).runs
        print(f"table: {write_table(Path(args.out), runs, FIELD_METRICS if field else RUN_METRICS, args.format)}")
