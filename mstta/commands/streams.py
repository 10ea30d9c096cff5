"""Streams with scene cuts: every stateful method of the registry replayed over stored features in
stream orders (i.i.d.; a cut A->B; a return A->B->A; a chain A->B->C->D; StatA's label-correlated
orders), under arms (zero-shot, never forgetting, an oracle reset at every true cut, forgetting
rules), with accuracy per segment, windowed accuracy around each cut (plotted), recovery, regret,
stale share, the i.i.d. cost and the cut detector's delay and false cuts (results.json, results.csv,
report.md, plots/ in --out). `--digits` runs it offline on the shifted digits. See docs/streams.md."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UserError

DIGITS_DOMAINS = ("clean", "camera", "rotate", "blur")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `streams` command's flags: the domains, then the methods, arms and streams, sizes, outputs."""
    _add_domains(p)
    _add_matrix(p)
    _add_run(p)


def _add_domains(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("domains")
    src.add_argument("--features", metavar="A.npz,B.npz,...", help="one feature file per domain, A first")
    src.add_argument("--names", metavar="LIST", help="the domains' names (default: the files' stems)")
    src.add_argument(
        "--digits",
        action="store_true",
        help=f"the shifted digits ({', '.join(DIGITS_DOMAINS)}), "
        "generated and extracted under --store with the bundled mstta-digits model",
    )
    src.add_argument(
        "--store", default="features", metavar="DIR", help="--digits: the feature store (default features)"
    )
    src.add_argument(
        "--config",
        metavar="YAML",
        help="dataset config whose engine values every method uses (default: the built-in defaults)",
    )


def _add_matrix(p: argparse.ArgumentParser) -> None:
    from ..bench.streamorders import ORDERS
    from ..bench.streamrun import MAX_ARMS, MAX_SEEDS, MAX_STEPS, MAX_WINDOW

    p.add_argument("--methods", metavar="LIST", help="method rows (default: every stateful and episodic one)")
    p.add_argument(
        "--all-arms-for",
        default="ms-tta,tda",
        metavar="LIST",
        help="methods that run every rule arm (default ms-tta,tda); the others run --short-arms",
    )
    p.add_argument(
        "--arms",
        metavar="A;B;...",
        help=f"the rule arms, ';'-separated, each space-separated --set "
        f"overrides, e.g. 'forget.rule=periodic forget.every=200' (default: docs/streams.md; at most "
        f"{MAX_ARMS} with --short-arms)",
    )
    p.add_argument(
        "--short-arms", metavar="A;B;...", help="the rule arms of the other methods (default: the recommended rule)"
    )
    p.add_argument(
        "--streams", default=",".join(ORDERS), metavar="LIST", help=f"stream kinds (default all: {', '.join(ORDERS)})"
    )
    p.add_argument(
        "--short-streams",
        metavar="LIST",
        help="stream kinds of the methods outside --all-arms-for (default: --streams)",
    )
    p.add_argument(
        "--correlated-on",
        metavar="LIST",
        help="domains (by name) the label-correlated orders run on (default: every domain)",
    )
    p.add_argument(
        "--seeds", default="1,2,3", metavar="LIST", help=f"stream seeds (default 1,2,3; at most {MAX_SEEDS})"
    )
    for flag, default, what, top in (
        ("--lead", 200, "samples of the first segment", MAX_STEPS),
        ("--segment", 599, "samples of every later segment, capped by its domain", MAX_STEPS),
        ("--window", 50, "steps of the windowed accuracy (recovery holds for as many steps)", MAX_WINDOW),
        ("--regret-steps", 200, "steps after a cut over which regret is measured", MAX_STEPS),
        ("--within", 30, "a detected cut this many steps after a true one finds it", MAX_WINDOW),
    ):
        p.add_argument(flag, type=int, default=default, metavar="N", help=f"{what} (default {default}; 1..{top})")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a hyperparameter for every method and arm (repeatable)",
    )


def _add_run(p: argparse.ArgumentParser) -> None:
    from ..bench.streamjobs import MAX_JOBS

    p.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help=f"worker processes, each one (seed, method) at a time; the same results whatever N "
        f"(default: the cores, at most {MAX_JOBS}; 1..{MAX_JOBS})",
    )
    p.add_argument("--out", default="streams-results", metavar="DIR", help="output folder (default streams-results)")
    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    p.add_argument("--dry-run", action="store_true", help="print the plan; write nothing")


def _list(spec: str | None, flag: str) -> list[str]:
    items = [s.strip() for s in (spec or "").split(",") if s.strip()]
    if spec is not None and not items:
        raise UserError(f"{flag} {spec!r}: expected a comma list")
    return items


def options(args: argparse.Namespace, settings: dict):
    from ..bench.runner import parse_seeds
    from ..bench.streamrun import RULE_ARMS, SHORT_ARMS, StreamOptions, episodic_methods, stateful_methods

    arms = [a.strip() for a in args.arms.split(";") if a.strip()] if args.arms is not None else list(RULE_ARMS)
    short = [a.strip() for a in args.short_arms.split(";") if a.strip()] if args.short_arms is not None else None
    return StreamOptions(
        methods=_list(args.methods, "--methods") or stateful_methods() + episodic_methods(),
        all_arms_for=_list(args.all_arms_for, "--all-arms-for"),
        arms=arms,
        short_arms=list(SHORT_ARMS) if short is None else short,
        kinds=_list(args.streams, "--streams"),
        short_kinds=_list(args.short_streams, "--short-streams") or None,
        correlated_on=_list(args.correlated_on, "--correlated-on") or None,
        seeds=parse_seeds(args.seeds),
        lead=args.lead,
        segment=args.segment,
        window=args.window,
        regret_steps=args.regret_steps,
        within=args.within,
        settings=settings,
    )


def digits_files(store: Path, dry_run: bool) -> tuple[list[Path], float]:
    """--digits: the shifted digits under `store` (generated, then extracted once as `field --digits`
    does) -> each domain's feature file and the bundled model's logit scale."""
    from ..bench.context import dataset_config, feature_key
    from ..bench.store import Backbone, Models, ensure_features
    from ..data.digits import make_shifted_digits
    from ..features.models import bundled_checkpoint, load_clip

    ckpt = bundled_checkpoint("mstta-digits")
    if ckpt is None or not ckpt.is_file():
        raise UserError("--digits needs assets/mstta-digits.pt (a repository checkout); python assets/make_digits.py")
    try:
        ckpt = ckpt.relative_to(Path.cwd())
    except ValueError:
        pass
    root = make_shifted_digits(store / "shifted-digits", write=not dry_run)
    backbone, models = Backbone("mstta-digits", str(ckpt)), Models("cpu")
    paths = []
    for shift in DIGITS_DOMAINS:
        ds = f"imagefolder:{root / shift}"
        key = feature_key(ds, backbone, "fp32", dataset_config(ds, {}), 1)
        paths.append(key.path(store) if dry_run else ensure_features(key, store, models, None))
    return paths, load_clip("mstta-digits", str(ckpt), "cpu").logit_scale


def domains(args: argparse.Namespace, settings: dict):
    """The domains' files and names (--digits or --features), the scale added to `settings` for --digits."""
    if args.digits == bool(args.features):
        raise UserError("give either --digits or --features A.npz,B.npz,... (one feature file per domain)")
    if args.digits:
        paths, scale = digits_files(Path(args.store), args.dry_run)
        settings.setdefault("logit_scale", round(float(scale), 4))
        names = list(DIGITS_DOMAINS)
    else:
        paths = [Path(p).expanduser() for p in _list(args.features, "--features")]
        names = _list(args.names, "--names") or [p.stem for p in paths]
    if len(names) != len(paths):
        raise UserError(f"--names: {len(names)} names for {len(paths)} feature files")
    for p in paths:
        if not args.dry_run and not p.is_file():
            raise UserError(f"--features {p}: file not found")
    return paths, names


def run(args: argparse.Namespace) -> int:
    from ..atomic import output_lock, sweep_stale
    from ..bench.config import load_dataset_config
    from ..bench.streamjobs import MAX_JOBS, default_jobs
    from ..checks import int_in
    from ..configfile import parse_overrides
    from ..features.format import load_features
    from ..safety import check_output_dir

    jobs = default_jobs() if args.jobs is None else int_in(args.jobs, "--jobs", 1, MAX_JOBS)
    settings = parse_overrides(args.set)
    config = Path(args.config).expanduser() if args.config else None
    if config is not None and not config.is_file():
        raise UserError(f"--config {config}: file not found")
    load_dataset_config(config, settings)  # a bad --set or config: exit 2 before any work
    paths, names = domains(args, settings)
    opts = options(args, settings)
    unknown = [d for d in opts.correlated_on or () if d not in names]
    if unknown:
        raise UserError(f"--correlated-on: unknown domain '{unknown[0]}'; choose from: {', '.join(names)}")
    for arm in (*opts.arms, *opts.short_arms):  # a bad arm: exit 2 before any work
        over = parse_overrides(arm.split())
        try:
            load_dataset_config(config, {**settings, **over})
        except UserError as exc:
            raise UserError(f"--arms '{arm}': {exc}") from None
    out = Path(args.out)
    check_output_dir("--out", out, {f"--features ({n})": p for n, p in zip(names, paths)})
    if args.dry_run:
        print("\n".join(plan_lines(paths, names, opts, out)))
        return 0
    from ..bench.streamreport import write_reports
    from ..bench.streamrun import align, run_streams, settings_of
    from ..bench.streamsummary import summarise

    dom = align([load_features(p) for p in paths], names)
    result = run_streams(dom, opts, config, progress=True, jobs=jobs)
    with output_lock(out / "results.json", "--out"):
        sweep_stale(out)
        report = write_reports(
            out, settings_of(dom, opts, paths), result, summarise(result, opts.window), plots=not args.no_plots
        )
    print(f"ran {len(result['records'])} stream x method x arm runs; report: {report}")
    return 0


def plan_lines(paths, names, opts, out: Path) -> list[str]:
    from ..bench.streamrun import arms_for, stateful
    from ..engine.methods import get_method

    lines = [f"out: {out}; seeds {','.join(map(str, opts.seeds))}; streams: {', '.join(opts.kinds)}"]
    lines += [f"domain {n}: {p} ({'cached' if Path(p).is_file() else 'to extract'})" for n, p in zip(names, paths)]
    for m in opts.methods:
        arms = arms_for(m, opts) if stateful(get_method(m)) else ["never (i.i.d. streams only: episodic)"]
        lines.append(f"{m}: {'; '.join(arms)}")
    return lines
