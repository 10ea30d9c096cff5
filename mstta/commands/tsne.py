"""t-SNE of CLIP embeddings vs MS-TTA's mean-shifted embeddings (the paper's figure), coloured by
class, for a subset of classes: from a feature file (--features) or a dataset through the feature
store (--dataset, extracted first if needed)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..checks import int_in
from ..data import LISTINGS
from ..errors import UserError
from ..features.models import DEFAULT_MODEL, PRECISIONS


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--features", metavar="F.npz", help="a labelled feature file")
    src.add_argument(
        "--dataset", metavar="NAME", help="a dataset (name, alias or imagefolder:PATH) via the feature store"
    )
    p.add_argument("--out", default="tsne.png", metavar="PNG", help="figure to write (default tsne.png)")
    p.add_argument("--classes", type=int, default=10, metavar="N", help="draw N random classes (0 = all; default 10)")
    p.add_argument("--class-ids", metavar="LIST", help="draw these class indices instead, e.g. 16,33")
    p.add_argument(
        "--class-seed", type=int, default=0, metavar="S", help="seed of the class subset and of t-SNE (default 0)"
    )
    p.add_argument("--config", metavar="YAML", help="hyperparameters (k, alpha, ...); default configs/<dataset>.yaml")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a hyperparameter, e.g. --set k=4"
    )
    g = p.add_argument_group("with --dataset (as `mstta-bench run`)")
    g.add_argument("--data-root", metavar="DIR", help="folder holding the datasets")
    g.add_argument(
        "--backbone",
        default=DEFAULT_MODEL,
        metavar="NAME",
        help="ViT-B-16, RN50, mstta-digits, mstta-tiny or any open_clip model",
    )
    g.add_argument("--pretrained", metavar="TAG|PATH|none", help="weights (default openai; none for mstta-tiny)")
    g.add_argument("--store", default="features", metavar="DIR", help="feature store (default features/)")
    g.add_argument("--seed", type=int, default=1, metavar="S", help="stream-order seed (default 1; as `run --seeds`)")
    g.add_argument(
        "--listing",
        default="full",
        choices=LISTINGS,
        help="full: every image (default); peer: the peers' file lists (no names containing 'sh')",
    )
    g.add_argument("--views", type=int, metavar="N", help="images per sample (same as --set views=N)")
    g.add_argument("--limit", type=int, metavar="N", help="only the first N samples of the stream")
    g.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    g.add_argument("--precision", choices=PRECISIONS, help="model precision for extraction")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")


def _class_ids(spec: str | None) -> list[int] | None:
    if not spec:
        return None
    try:
        ids = [int(s) for s in spec.split(",")]
    except ValueError:
        raise UserError(f"--class-ids {spec!r}: expected comma-separated class indices, e.g. 16,33") from None
    if any(i < 0 for i in ids):
        raise UserError(f"--class-ids {spec!r}: class indices are >= 0")
    return ids


def run(args: argparse.Namespace) -> int:
    from ..atomic import sweep_stale
    from ..bench.plots import tsne_figure
    from ..checks import check_seed
    from ..safety import check_output_dir, check_outputs

    out = Path(args.out)
    if out.suffix.lower() != ".png":
        raise UserError(f"--out {out}: the figure is a PNG; pass a path ending in .png")
    check_outputs({"--out": out}, {"--features": args.features, "--config": args.config})
    if args.dataset:
        check_output_dir("--store", args.store, {"--data-root": args.data_root})
    check_seed(args.class_seed, "--class-seed")
    check_seed(args.seed, "--seed")
    int_in(args.classes, "--classes", 0, extra=" (0 = all classes)")
    ids = _class_ids(args.class_ids)
    if args.features:
        fs, ecfg, name = _from_file(args)
    else:
        fs, ecfg, name = _from_store(args)
    sweep_stale(out.parent)
    drawn = tsne_figure(
        fs.features,
        fs.text,
        fs.labels,
        out,
        ecfg,
        args.classes,
        ids,
        fs.classnames,
        args.class_seed,
        title=f"{name}: CLIP vs mean-shifted (k={ecfg.k}, α={ecfg.alpha})",
    )
    print(f"t-SNE of {drawn['samples']} samples from {len(drawn['classes'])} classes -> {drawn['out']}")
    return 0


def _from_file(args):
    from ..bench.config import dataset_config_path, load_dataset_config
    from ..bench.paper import dataset_label
    from ..features.format import load_features

    fs = load_features(args.features)
    dataset = str(fs.meta.get("dataset", ""))
    path = args.config
    if path is None and dataset and dataset_config_path(dataset).is_file():
        path = dataset_config_path(dataset)
    for flag, v in (
        ("--views", args.views),
        ("--limit", args.limit),
        ("--data-root", args.data_root),
        ("--listing", None if args.listing == "full" else args.listing),
    ):
        if v is not None:
            raise UserError(f"{flag} works with --dataset; a feature file is used as it is")
    cfg = load_dataset_config(path, args.set)
    return fs, cfg.engine, dataset_label(dataset) if dataset else Path(args.features).name


def _from_store(args):
    from ..bench.paper import dataset_label
    from ..bench.runner import BenchmarkConfig, parse_datasets, stream_features
    from ..bench.store import resolve_backbone

    datasets = parse_datasets(args.dataset)
    if len(datasets) != 1:
        raise UserError(f"--dataset {args.dataset}: name one dataset (not a group)")
    if args.config:
        raise UserError(
            "--config works with --features; with --dataset the dataset's configs/<dataset>.yaml applies "
            "(change values with --set)"
        )
    for flag, v in (("--views", args.views), ("--limit", args.limit)):
        if v is not None:
            int_in(v, flag, 1)
    backbone = resolve_backbone(args.backbone, args.pretrained)
    cfg = BenchmarkConfig(
        datasets=datasets,
        backbones=[backbone],
        seeds=[args.seed],
        data_root=Path(args.data_root).expanduser() if args.data_root else None,
        store=Path(args.store),
        overrides=list(args.set) + ([f"views={args.views}"] if args.views else []),
        listing=args.listing,
        device=args.device,
        precision=args.precision,
        limit=args.limit,
        progress=not args.no_progress,
    )
    _, fs, dcfg = stream_features(cfg, datasets[0], backbone, args.seed)
    return fs, dcfg.engine, dataset_label(datasets[0])
