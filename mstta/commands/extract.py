"""Encode a dataset's test split into a feature file for `replay`: [N, V, d] image features (view 0 =
the original image), the text classifier, labels and class names, in the seeded stream order.
Resumable (rerun the same command); scale out with `torchrun --nproc-per-node N -m mstta.cli extract ...`."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ..bench.config import BenchConfig, dataset_config_path, load_dataset_config
from ..checks import check_seed, int_in
from ..data import FOLDER_PREFIX, LISTINGS, list_datasets, resolve_key
from ..errors import UserError
from ..features.devices import resolve_device
from ..features.extract import run_extraction
from ..features.extract_views import VIEWS_ON
from ..features.models import DEFAULT_MODEL, DEFAULT_TAG, PRECISIONS
from ..features.views import AUGMENTS, MAX_VIEWS


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `extract` command's flags: inputs, model, stream, speed, outputs (in --help order)."""
    _add_inputs(p)
    _add_model(p)
    _add_stream(p)
    _add_speed(p)
    _add_outputs(p)


def _add_inputs(p: argparse.ArgumentParser) -> None:
    """What to extract: the dataset and where it lives."""
    p.add_argument(
        "--dataset",
        required=True,
        metavar="NAME",
        help=f"one of {', '.join(list_datasets())}; short names I/A/V/R/S; or imagefolder:PATH",
    )
    p.add_argument("--data-root", metavar="DIR", help="folder holding the datasets in the CoOp/TDA layout")


def _add_model(p: argparse.ArgumentParser) -> None:
    """The model: architecture, weights, precision and device."""
    p.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"open_clip architecture (default {DEFAULT_MODEL}); mstta-digits: the bundled digits model "
        "(its shipped checkpoint, recorded as 'bundled'); mstta-tiny: random weights, for tests",
    )
    p.add_argument(
        "--pretrained",
        default=DEFAULT_TAG,
        metavar="TAG|PATH",
        help="open_clip pretrained tag, a local checkpoint file (OpenAI .pt files need --model NAME-quickgelu), "
        "bundled (mstta-digits' shipped checkpoint, which the default openai means for it), or none (random weights)",
    )
    p.add_argument("--precision", choices=PRECISIONS, help="default: fp16 on GPU, fp32 on CPU")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1, ...")


def _add_stream(p: argparse.ArgumentParser) -> None:
    """The stream: views per sample, where and how they are made, its order and listing."""
    p.add_argument(
        "--views",
        type=int,
        help=f"images per sample, the original included, 1..{MAX_VIEWS} "
        "(default: the dataset config's bench.views, else 1)",
    )
    p.add_argument(
        "--views-on",
        default="auto",
        choices=VIEWS_ON,
        help="where the augmented views are made: cpu (PIL in the data-loader workers, the reference), "
        "device (tensors on the encoder's device: the GPU on CUDA, the workers on a CPU), "
        "auto (default: device on CUDA, else cpu)",
    )
    p.add_argument(
        "--augment",
        choices=AUGMENTS,
        help="augmented views: augmix (TDA) or crop (BoostAdapter); default from the dataset config",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=1,
        help="stream shuffle and view augmentation seed (default 1): torch.randperm(n) seeded with it over "
        "the sorted file list; no seed reproduces the peers' order (a second random draw over an "
        "unsorted directory listing)",
    )
    p.add_argument(
        "--listing",
        default="full",
        choices=LISTINGS,
        help="full: every image (default); peer: the peers' file lists, which drop every ImageNet-A/R/"
        "Sketch/V2 file whose name contains 'sh' (ImageNet-A: 6,862 of 7,500)",
    )


def _add_speed(p: argparse.ArgumentParser) -> None:
    """How fast: images per forward and data-loader workers."""
    p.add_argument("--batch-size", type=int, default=256, help="images per encoder forward (default 256)")
    p.add_argument("--workers", type=int, help="data-loader worker processes (default: free CPU cores, at most 8)")


def _add_outputs(p: argparse.ArgumentParser) -> None:
    """What is written: the feature file, its samples and templates, caches, shards, the summary."""
    p.add_argument(
        "--out",
        metavar="DIR|FILE.npz",
        help="output file, or a folder for an automatic name, {dataset}_{model}_{pretrained}_v{views}[-{augment}]"
        "_s{seed}.npz (default features/)",
    )
    p.add_argument(
        "--store",
        metavar="DIR",
        help="write into the feature store that run, field and sweep read (their --store): "
        "<DIR>/<model>-<pretrained>-<precision>/<dataset>/views<V>-<augment>-seed<S>.npz; instead of --out",
    )
    p.add_argument("--limit", type=int, metavar="N", help="only the first N samples of the shuffled stream")
    p.add_argument(
        "--template",
        action="append",
        metavar="TEXT",
        help="prompt template with {} for the class name (repeatable; default: the dataset's set)",
    )
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        default=os.environ.get("MSTTA_CACHE", "~/.cache/mstta"),
        help="text-classifier cache (default $MSTTA_CACHE or ~/.cache/mstta)",
    )
    p.add_argument("--shard-size", type=int, metavar="N", help="samples per resumable shard (default 4096 / views)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a text summary")


def bench_defaults(dataset: str) -> BenchConfig:
    """The dataset config's `bench:` section (views, augment), or the defaults without a config."""
    key = resolve_key(dataset)
    path = dataset_config_path(key) if not key.startswith(FOLDER_PREFIX) else None
    return load_dataset_config(path).bench if path is not None and path.is_file() else BenchConfig()


def output(args: argparse.Namespace, views: int, augment: str) -> str | Path:
    """--out as given (default features/), or with --store the store's file of these settings
    (`mstta.bench.store.FeatureKey.path`: the file `run`/`field`/`sweep --store` read)."""
    if args.store is None:
        return args.out or "features"
    if args.out is not None:
        raise UserError("--out and --store: give one (--store writes the benchmark's store layout)")
    from ..bench.store import Backbone, FeatureKey, resolved_precision
    from ..features.extract_views import view_path
    from ..features.models import recorded_tag

    int_in(views, "--views", 1, MAX_VIEWS)
    dev = resolve_device(args.device)
    backbone = Backbone(args.model, recorded_tag(args.model, str(args.pretrained), quiet=True))
    made = view_path(args.views_on, dev) if views > 1 else "pil"
    key = FeatureKey(
        resolve_key(args.dataset),
        backbone,
        resolved_precision(dev, args.precision),
        views,
        augment,
        args.seed,
        args.limit,
        args.listing,
        made,
    )
    return key.path(Path(args.store))


def run(args: argparse.Namespace) -> int:
    check_seed(args.seed, "--seed")
    bench = bench_defaults(args.dataset)
    views, augment = bench.views if args.views is None else args.views, args.augment or bench.augment
    # one writer per output file, however --out spells it: run_extraction locks the resolved file
    result = run_extraction(
        args.dataset,
        output(args, views, augment),
        args.data_root,
        model=args.model,
        pretrained=args.pretrained,
        precision=args.precision,
        device=args.device,
        views=views,
        augment=augment,
        seed=args.seed,
        batch_size=args.batch_size,
        workers=args.workers,
        limit=args.limit,
        templates=args.template,
        cache_dir=args.cache_dir,
        shard_size=args.shard_size,
        progress=True,
        listing=args.listing,
        views_on=args.views_on,
    )
    if int(os.environ.get("RANK", "0")) != 0:
        return 0
    report = {
        "out": str(result.path),
        "reused": result.reused,
        "n": result.n,
        "skipped": result.skipped,
        "seconds": round(result.seconds, 3),
        "images_per_s": round(result.images_per_s, 1),
    }
    if args.json:
        print(json.dumps(report, allow_nan=False))
    elif result.reused:
        print(f"{result.path}: already extracted with these settings; reused (delete it to re-extract)")
    else:
        skipped = f", skipped {result.skipped} unreadable image(s)" if result.skipped else ""
        print(f"wrote {result.path}: {result.n} samples{skipped}, {result.images_per_s:.1f} images/s")
    return 0
