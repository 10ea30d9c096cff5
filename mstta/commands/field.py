"""The field table: every registered method row over the stored features, with accuracy,
calibration (ECE, NLL), open-set detection (AUROC/FPR95), stability over stream orders and over
the stream, speed and state bytes, per backbone x dataset x method x text set x seed, beside the
published rows (results.json, results.csv, report.md, plots in --out). Rerunning skips finished
cells. `--digits` runs it offline on the bundled shifted-digits benchmark. See docs/field.md."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UserError
from .run import add_common, build_config, check_places, paper_table

ORDERS, DIGITS_ORDERS = 10, 5  # default stream orders per seed; --digits keeps `make field` within 10 CPU minutes
DIGITS_BATCH = 4096  # --digits: images per encoder forward unless --batch-size says (the 32 px digits model: a
# third of 256's CPU per view, the same features: each image's row is computed alone; docs/field.md)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `field` command's flags: `run`'s common ones, then rows, text sets, metrics, open set, scope, outputs."""
    add_common(p)
    p.set_defaults(out="field-results")
    _add_rows(p)
    _add_text_sets(p)
    _add_metrics(p)
    _add_open_set(p)
    _add_scope(p)
    _add_outputs(p)


def _add_rows(p: argparse.ArgumentParser) -> None:
    """The method rows."""
    from ..engine.methods import list_methods

    p.add_argument(
        "--methods",
        default=",".join(list_methods()),
        metavar="LIST",
        help="comma list of method rows, each optionally NAME@original or NAME@confident "
        "(default: every registered method)",
    )


def _add_text_sets(p: argparse.ArgumentParser) -> None:
    """The text sets and the files some of them need."""
    p.add_argument(
        "--text",
        default="peer",
        metavar="SETS",
        help="text sets, comma list: peer (default: the feature file's classifier, the dataset's templates, "
        "every row the same, as `run` uses), official (each row its authors' set), photo (TTA-VLM's uniform "
        "protocol), tip7, cupl (needs --cupl), user (needs --text-classifier)",
    )
    p.add_argument("--cupl", metavar="FILE.json", help="CuPL-style prompts {class name: [prompts]} of the dataset")
    p.add_argument("--text-classifier", metavar="FILE.npy", help="your own [C, d] text classifier (text set 'user')")


def _add_metrics(p: argparse.ArgumentParser) -> None:
    """Stream orders per seed and ECE bins."""
    from ..bench.field import MAX_ORDERS
    from ..bench.metrics import ECE_BINS, MAX_ECE_BINS

    p.add_argument(
        "--orders",
        type=int,
        metavar="R",
        help=f"stream orders per seed for mean ± std and the worst 10%% (order 0 = the stored one; "
        f"1..{MAX_ORDERS}; default {ORDERS}, {DIGITS_ORDERS} with --digits)",
    )
    p.add_argument(
        "--ece-bins",
        type=int,
        default=ECE_BINS,
        metavar="N",
        help=f"equal-width ECE bins (1..{MAX_ECE_BINS}, default {ECE_BINS})",
    )


def _add_open_set(p: argparse.ArgumentParser) -> None:
    """The open-set settings and the mixed-in dataset."""
    from ..bench.field import OPEN_SETTINGS

    p.add_argument(
        "--open",
        default=",".join(OPEN_SETTINGS),
        metavar="LIST",
        help="open-set settings: withheld (half the classes withheld), mixed (needs --mix-with), "
        "both (default) or none",
    )
    p.add_argument("--mix-with", metavar="DATASET", help="the dataset whose samples are mixed into every stream")
    p.add_argument(
        "--mix-share",
        type=float,
        default=0.5,
        metavar="F",
        help="foreign samples per own sample in the mixed setting (default 0.5)",
    )


def _add_scope(p: argparse.ArgumentParser) -> None:
    """Extra rows and the offline digits benchmark."""
    p.add_argument(
        "--label-tuned",
        action="store_true",
        help="also run the rows whose hyperparameters their authors chose on the test labels "
        "(resources/label_tuned.yaml); every output marks them",
    )
    p.add_argument(
        "--digits",
        action="store_true",
        help="the offline shifted-digits benchmark: generate it under --store, run every row on its "
        "shifts with the bundled mstta-digits model (docs/field.md)",
    )


def _add_outputs(p: argparse.ArgumentParser) -> None:
    """What is (re)written: figures, or only the report."""
    from ..bench.papertable import add_format_flag

    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    add_format_flag(p)
    p.add_argument(
        "--report-only", action="store_true", help="only rebuild results.csv, report.md and plots from --out"
    )


def options(args: argparse.Namespace):
    from ..bench.field import FieldOptions
    from ..bench.runner import parse_datasets
    from ..bench.textsets import parse_text_sets
    from ..safety import check_input_file

    opens = () if args.open.strip() == "none" else tuple(s.strip() for s in args.open.split(","))
    mix = None
    if args.mix_with:
        found = parse_datasets(args.mix_with)
        if len(found) != 1:
            raise UserError(f"--mix-with {args.mix_with}: name one dataset")
        mix = found[0]
    texts = parse_text_sets(args.text)
    cupl = Path(args.cupl).expanduser() if args.cupl else None
    user = Path(args.text_classifier).expanduser() if args.text_classifier else None
    for flag, path, expected in (
        ("--cupl", cupl, "a CuPL JSON file {class name: [prompts]}"),
        ("--text-classifier", user, "a .npy file holding a [C, d] float array"),
    ):
        if path is not None:
            check_input_file(flag, path, expected)
    if "cupl" in texts and cupl is None:
        raise UserError("--text cupl needs --cupl FILE.json (CuPL prompts {class name: [prompts]})")
    if "user" in texts and user is None:
        raise UserError("--text user needs --text-classifier FILE.npy (a [C, d] float array)")
    return FieldOptions(
        texts=texts,
        cupl=cupl,
        text_classifier=user,
        orders=ORDERS if args.orders is None else args.orders,
        ece_bins=args.ece_bins,
        open=opens,
        mix_with=mix,
        mix_share=args.mix_share,
        label_tuned=args.label_tuned,
    )


def digits_preset(args: argparse.Namespace) -> None:
    """--digits: generate the shifted-digits benchmark under --store and point the run at it."""
    from ..data.digits import SHIFTS, make_shifted_digits
    from ..features.models import bundled_checkpoint

    if args.datasets not in (None, "all") or args.mix_with:
        raise UserError("--digits chooses the datasets and the mixed-in one; drop --datasets/--mix-with")
    check_places(args)
    root = make_shifted_digits(Path(args.store) / "shifted-digits", write=not args.dry_run)
    args.datasets = ",".join(f"imagefolder:{root / s}" for s in SHIFTS)
    args.mix_with = f"imagefolder:{root / 'photos'}"
    ckpt = bundled_checkpoint("mstta-digits")  # the checkpoint file (the store has no 'bundled' tag)
    if ckpt is None or not ckpt.is_file():
        raise UserError(
            "--digits needs assets/mstta-digits.pt (a repository checkout); python assets/make_digits.py makes it"
        )
    try:
        ckpt = ckpt.relative_to(Path.cwd())
    except ValueError:
        pass
    args.backbone, args.pretrained = "mstta-digits", str(ckpt)
    if args.orders is None:
        args.orders = DIGITS_ORDERS
    if args.batch_size is None:
        args.batch_size = DIGITS_BATCH


def run(args: argparse.Namespace) -> int:
    from ..atomic import output_lock, sweep_stale
    from ..bench.field import plan_field, run_field
    from ..bench.fieldreport import write_field_reports
    from ..bench.runner import parse_methods

    if args.report_only:
        check_places(args)
        if not (Path(args.out) / "results.json").is_file():
            raise UserError(f"--report-only: no results.json in {args.out}; run the field table first")
        print(f"report: {write_field_reports(Path(args.out), plots=not args.no_plots)}")
        paper_table(args, "results.json", field=True)
        return 0
    if args.digits:
        digits_preset(args)
    opts = options(args)
    args.fps_samples = 0
    cfg = build_config(args, parse_methods(args.methods))
    if args.dry_run:
        print("\n".join(plan_field(cfg, opts)))
        return 0
    with output_lock(cfg.out / "results.json", "--out"):
        sweep_stale(cfg.out)
        summary = run_field(cfg, opts)
    missing = f", {len(summary['missing'])} dataset(s) missing" if summary["missing"] else ""
    print(f"ran {summary['ran']} cell(s), skipped {summary['skipped']} finished{missing}; report: {summary['report']}")
    paper_table(args, "results.json", field=True)
    return 0
