"""Extraction speed in encoded images/s (samples x views), random weights, no downloads. Prints one JSON object.

Modes per model: `batch1` encodes one image per forward (batch size 1); `per_sample` is the peers'
loop (batch size 1 sample: its V views in one forward, views built in the main process);
`batched` is `mstta-bench extract` (data-loader workers build the views, `--batch-size` images per
forward, fp16 storage, shards, merge); on CPU also `batched_bf16` (`--precision bf16`).

    .venv/bin/python benchmarks/extract.py [--models mstta-tiny,ViT-B-16] [--views 64] [--device cpu]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers_data import make_fake_dataset  # noqa: E402

from mstta.data import load_split  # noqa: E402
from mstta.extract import run_extraction  # noqa: E402
from mstta.models import load_clip  # noqa: E402
from mstta.views import ViewMaker, split_preprocess, to_pixels  # noqa: E402

# samples per mode: ViT-B-16 on a 2-core CPU encodes ~1-5 images/s, so keep its runs short
SIZES = {"mstta-tiny": {"batch1": 256, "per_sample": 16, "batched": 64},
         "ViT-B-16": {"batch1": 12, "per_sample": 2, "batched": 4}}


def _views_of(clip, split, index: int, views: int) -> torch.Tensor:
    geometry, size, _, _ = split_preprocess(clip.preprocess)
    with Image.open(split.items[index][0]) as im:
        return ViewMaker(geometry, size, views, "augmix", 1)(im.convert("RGB"), index)


def loop_rate(clip, split, views: int, images: int, per_forward: int) -> dict:
    """The peers' loop: per sample, build its views in this process, encode `per_forward` images at a time."""
    _, _, mean, std = split_preprocess(clip.preprocess)
    clip.encode_images(to_pixels(_views_of(clip, split, 0, 1), mean, std, clip.device, clip.dtype))  # warm-up
    done, t0, i = 0, time.perf_counter(), 0
    while done < images:
        v = _views_of(clip, split, i % len(split), views)[: images - done]
        for j in range(0, len(v), per_forward):
            clip.encode_images(to_pixels(v[j:j + per_forward], mean, std, clip.device, clip.dtype))
        done, i = done + len(v), i + 1
    if clip.device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return {"images": done, "seconds": round(seconds, 2), "images_per_s": round(done / seconds, 2)}


def batched_rate(model: str, data: Path, out: Path, views: int, samples: int, batch_size: int, device: str,
                 precision: str | None) -> dict:
    res = run_extraction("oxford_pets", out, data, model=model, pretrained="none", device=device, precision=precision,
                         views=views, augment="augmix", batch_size=batch_size, limit=samples, cache_dir=out.parent)
    return {"images": res.n * views, "seconds": round(res.seconds, 2), "images_per_s": round(res.images_per_s, 2),
            "batch_size": batch_size}


def bench_model(model: str, data: Path, tmp: Path, views: int, device: str, batch_size: int) -> dict:
    clip = load_clip(model, "none", device=device)
    split = load_split("oxford_pets", data)
    sizes = SIZES.get(model, SIZES["ViT-B-16"])
    out = {"views": views, "image_size": clip.image_size, "precision": clip.precision,
           "batch1": loop_rate(clip, split, views, sizes["batch1"], 1),
           "per_sample": loop_rate(clip, split, views, sizes["per_sample"] * views, views)}
    del clip
    out["batched"] = batched_rate(model, data, tmp / f"{model}.npz", views, sizes["batched"], batch_size, device, None)
    if torch.device(device).type == "cpu":
        out["batched_bf16"] = batched_rate(model, data, tmp / f"{model}-bf16.npz", views, sizes["batched"], batch_size,
                                           device, "bf16")
    for mode in ("batched", "batched_bf16"):
        if mode in out:
            for ref in ("batch1", "per_sample"):
                out[f"{mode}_vs_{ref}"] = round(out[mode]["images_per_s"] / out[ref]["images_per_s"], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mstta-tiny,ViT-B-16")
    ap.add_argument("--views", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=256, help="images per forward in the batched mode")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    report = {"device": args.device, "torch": torch.__version__, "threads": torch.get_num_threads(),
              "cpu": platform.processor() or platform.machine(),
              "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        make_fake_dataset(data, "oxford_pets", classes=4, per_class=16)   # 64 images
        for path, _ in load_split("oxford_pets", data).items:             # realistic size: 500 x 375 JPEG
            make_big = Image.open(path).resize((500, 375))
            make_big.save(path, quality=90)
        for model in args.models.split(","):
            report["models"][model] = bench_model(model, data, Path(tmp), args.views, args.device, args.batch_size)
    report["loadavg_1m"] = round(os.getloadavg()[0], 2)  # other work on the machine skews CPU numbers
    print(json.dumps(report))


if __name__ == "__main__":
    main()
