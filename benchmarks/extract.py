"""Extraction speed in views/s (samples x views encoded per second), random weights, no downloads.
Prints one JSON object.

Per model, on `--samples` generated 500x375 JPEGs (ImageNet-A's typical size) with `--views` views:
- `encoder_only`: the encoder alone on random uint8 pixels already on the device, `--batch-size`
  images per forward (the bound extraction can reach);
- `extract_cpu_views`: `mstta-bench extract --views-on cpu` (PIL views in data-loader workers);
- `extract_device_views`: `--views-on device` (on CUDA: JPEGs decoded and views made on the GPU; on
  a CPU: tensor views in the workers);
- `*_vs_encoder`: each extraction rate over the encoder-only rate;
- `view_making_ms_per_view`: one process making the 63 augmented views of one image, PIL against
  `mstta.features.tensor_views` on the device's tensors (no encoder; on a CPU one thread each, the fast path
  of `mstta.features.fast_views`); `view_making_224px_ms_per_view`: the
  same at 224 px (ViT-B/16's Resize + CenterCrop), whatever the model's size.

    .venv/bin/python benchmarks/extract.py [--models mstta-tiny,ViT-B-16] [--samples 64] [--views 64]
        [--augment augmix|crop] [--device cuda] [--batch-size 256] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers_data import make_fake_dataset  # the tests' dataset builder, on sys.path above
from test_tensor_views import smooth_image  # photo-like generated images

from mstta.data import load_split
from mstta.features.decode import pil_tensor
from mstta.features.extract import default_workers, run_extraction
from mstta.features.models import load_clip
from mstta.features.tensor_views import TensorViewMaker
from mstta.features.views import ViewMaker, split_preprocess, to_pixels


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def encoder_only(clip, batch_size: int, images: int) -> dict:
    """Random uint8 pixels already on the device -> normalise + encode, `batch_size` per forward."""
    _, size, mean, std = split_preprocess(clip.preprocess)
    x = torch.randint(0, 256, (batch_size, 3, size, size), dtype=torch.uint8, device=clip.device)
    clip.encode_images(to_pixels(x, mean, std, clip.device, clip.dtype))  # warm-up
    _sync(clip.device)
    done, t0 = 0, time.perf_counter()
    while done < images:
        clip.encode_images(to_pixels(x, mean, std, clip.device, clip.dtype))
        done += batch_size
    _sync(clip.device)
    seconds = time.perf_counter() - t0
    return {"views": done, "seconds": round(seconds, 2), "views_per_s": round(done / seconds, 1)}


def extraction(
    model: str,
    data: Path,
    out: Path,
    views: int,
    augment: str,
    samples: int,
    batch_size: int,
    device: str,
    workers: int,
    views_on: str,
) -> dict:
    res = run_extraction(
        "oxford_pets",
        out,
        data,
        model=model,
        pretrained="none",
        device=device,
        views=views,
        augment=augment,
        batch_size=batch_size,
        limit=samples,
        cache_dir=out.parent,
        workers=workers,
        views_on=views_on,
    )
    return {"views": res.n * views, "seconds": round(res.seconds, 2), "views_per_s": round(res.images_per_s, 1)}


def view_making(clip, path: Path, views: int, augment: str, repeats: int = 5, view_size: int = 0) -> dict:
    """ms per augmented view, one process (one thread on a CPU): PIL (the reference) vs tensor views on
    the model's device (on a CPU the fast path, `mstta.features.fast_views`), median of `repeats` samples."""
    from PIL import Image

    geometry, size, _, _ = split_preprocess(clip.preprocess)
    if view_size:  # ViT-B/16's own preprocessing at that size
        from mstta.features.views import Geometry

        geometry, size = Geometry(view_size), view_size
    maker = ViewMaker(geometry, size, views, augment, 1)
    tensor = TensorViewMaker(maker, exact=False)  # fast path on CPU tensors, exact on CUDA
    with Image.open(path) as im:
        img = im.convert("RGB")
    pixels = pil_tensor(img).to(clip.device)
    # on a CPU both run on one core: PIL always, tensor views by the library's policy (threads.small_ops)
    out = {"threads": 1 if clip.device.type == "cpu" else None, "loadavg_1m": round(os.getloadavg()[0], 2)}
    paths = (("pil", maker, img), ("tensor", tensor, pixels))
    times = {name: [] for name, _, _ in paths}
    for _, make, x in paths:
        make(x, 0)  # warm-up
    for i in range(repeats):  # interleaved: same load
        for name, make, x in paths:
            _sync(clip.device)
            t0 = time.perf_counter()
            make(x, i + 1)
            _sync(clip.device)
            times[name].append(time.perf_counter() - t0)
    for name in times:
        out[name] = round(statistics.median(times[name]) / (views - 1) * 1000, 3)
    out["tensor_vs_pil_speed"] = round(out["pil"] / out["tensor"], 2)
    return out


def bench_model(model: str, data: Path, tmp: Path, args) -> dict:
    clip = load_clip(model, "none", device=args.device)
    images = args.samples * args.views
    out = {
        "views": args.views,
        "samples": args.samples,
        "augment": args.augment,
        "image_size": clip.image_size,
        "precision": clip.precision,
        "batch_size": args.batch_size,
        "workers": args.workers,
        "encoder_only": encoder_only(clip, args.batch_size, images),
        "view_making_ms_per_view": view_making(
            clip, load_split("oxford_pets", data).items[0][0], args.views, args.augment
        ),
        "view_making_224px_ms_per_view": view_making(
            clip, load_split("oxford_pets", data).items[0][0], args.views, args.augment, view_size=224
        ),
    }
    del clip
    for where in ("cpu", "device"):
        out[f"extract_{where}_views"] = extraction(
            model,
            data,
            tmp / f"{model}-{where}.npz",
            args.views,
            args.augment,
            args.samples,
            args.batch_size,
            args.device,
            args.workers,
            where,
        )
        out[f"extract_{where}_views_vs_encoder"] = round(
            out[f"extract_{where}_views"]["views_per_s"] / out["encoder_only"]["views_per_s"], 3
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mstta-tiny,ViT-B-16")
    ap.add_argument("--samples", type=int, default=64, help="500x375 JPEG samples extracted per mode (default 64)")
    ap.add_argument("--views", type=int, default=64)
    ap.add_argument("--augment", default="augmix", choices=("augmix", "crop"))
    ap.add_argument("--batch-size", type=int, default=256, help="images per forward")
    ap.add_argument(
        "--workers", type=int, default=default_workers(), help="data-loader workers (default: free cores, <= 8)"
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    report = {
        "device": args.device,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "gpu": torch.cuda.get_device_name() if torch.device(args.device).type == "cuda" else None,
        "loadavg_1m_start": round(os.getloadavg()[0], 2),
        "models": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        per_class = -(-args.samples // 4)
        fake = make_fake_dataset(data, "oxford_pets", classes=4, per_class=per_class)
        for k, (path, _) in enumerate(fake.items):
            smooth_image(500, 375, k).save(path, quality=90)
        for model in args.models.split(","):
            report["models"][model] = bench_model(model, data, Path(tmp), args)
    report["loadavg_1m_end"] = round(os.getloadavg()[0], 2)  # other work on the machine skews CPU numbers
    print(json.dumps(report))


if __name__ == "__main__":
    main()
