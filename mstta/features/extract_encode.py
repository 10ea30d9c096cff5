"""Encoding an extraction's shards: torchrun's process group (each rank encodes the shards
`k % world_size == rank`), and the loop from images to views to CLIP features, each shard written
(`mstta.features.shards.write_shard`) as soon as it is complete.

    dist, device = start_dist("auto")           # one rank without torchrun
    run_shards(clip, split, order, [0, 2], work, settings, shard_size, batch_size, workers, progress)
"""

from __future__ import annotations

import datetime
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..data import TestSplit
from ..errors import UserError
from .devices import resolve_device
from .extract_settings import ExtractSettings
from .extract_views import ViewSource, collate, on_device
from .models import ClipModel
from .shards import shard_batches, shard_path, shard_stamp, write_shard
from .tensor_views import TensorViewMaker
from .views import ViewMaker, split_preprocess, to_pixels


@dataclass
class Dist:
    """This process's place among torchrun's ranks (one rank without torchrun)."""

    rank: int = 0
    world: int = 1
    owned: bool = False  # we initialised the process group (and destroy it)

    def barrier(self) -> None:
        """Wait for every rank (nothing to wait for alone)."""
        if self.world > 1:
            torch.distributed.barrier()

    def close(self) -> None:
        """Leave the process group, if this process started it."""
        if self.owned and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def start_dist(device: str | torch.device) -> tuple[Dist, torch.device]:
    """Join torchrun's process group (gloo on CPU, nccl on CUDA) and pick this rank's device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist(), resolve_device(device)
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", local % torch.cuda.device_count())
    owned = not dist.is_initialized()
    if owned:
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", timeout=datetime.timedelta(hours=12))
    return Dist(dist.get_rank(), dist.get_world_size(), owned), dev


def _encode(clip: ClipModel, views: torch.Tensor, mean, std, batch_size: int) -> np.ndarray:
    """uint8 [B, V, 3, S, S] -> fp16 features [B, V, d], at most `batch_size` images per forward."""
    b, v = views.shape[:2]
    flat = views.reshape(b * v, *views.shape[2:])
    out = [
        clip.encode_images(to_pixels(flat[i : i + batch_size], mean, std, clip.device, clip.dtype))
        for i in range(0, b * v, batch_size)
    ]
    feats = torch.cat(out)
    if not bool(torch.isfinite(feats).all()):  # never written: a feature file holds finite rows only
        raise UserError(
            f"--pretrained {clip.pretrained}: --model {clip.name} gives non-finite image features (NaN "
            f"or inf) in {clip.precision}: its weights overflow there; pass --precision fp32 or a "
            "checkpoint with finite weights"
        )
    return feats.view(b, v, -1).half().cpu().numpy()


def run_shards(
    clip: ClipModel,
    split: TestSplit,
    order: list[int],
    shards: list[int],
    work: Path,
    s: ExtractSettings,
    shard_size: int,
    batch_size: int,
    workers: int,
    progress: bool,
    views_on: str = "cpu",
) -> None:
    """Encode the given shards of the stream, writing each one as soon as it is complete; views made
    where `views_on` says (`mstta.features.extract_views`)."""
    geometry, size, mean, std = split_preprocess(clip.preprocess)
    maker = ViewMaker(geometry, size, s.views, s.augment, s.seed)
    on_gpu = TensorViewMaker(maker) if views_on == "device" and clip.device.type == "cuda" else None
    per_batch = max(1, batch_size // s.views)
    n = len(order)
    loader = torch.utils.data.DataLoader(
        ViewSource([p for p, _ in split.items], order, maker, views_on, clip.device),
        batch_sampler=list(shard_batches(shards, shard_size, n, per_batch)),
        num_workers=workers,
        collate_fn=collate,
        pin_memory=clip.device.type == "cuda",
    )
    total = sum(min(n, (k + 1) * shard_size) - k * shard_size for k in shards)
    from tqdm import tqdm

    bar = tqdm(
        total=total, unit="img", desc=f"extract {s.dataset}", disable=None if progress else True, dynamic_ncols=True
    )  # None: shown on a terminal only
    buf: dict[int, tuple[list, list, list]] = {}
    t0 = time.perf_counter()
    try:
        for positions, views, failed in loader:
            k = (positions or [p for p, _ in failed])[0] // shard_size
            if on_gpu is not None and views is not None:
                positions, views, more = on_device(positions, views, on_gpu, clip.device)
                failed = failed + more
            pos, feats, skipped = buf.setdefault(k, ([], [], []))
            if views is not None:
                feats.append(_encode(clip, views, mean, std, batch_size))
                pos.extend(positions)
            skipped.extend(failed)
            bar.update(len(positions) + len(failed))
            if s.views > 1:
                bar.set_postfix(views_s=f"{bar.n * s.views / max(time.perf_counter() - t0, 1e-9):.0f}")
            if len(pos) + len(skipped) == min(n, (k + 1) * shard_size) - k * shard_size:
                write_shard(shard_path(work, k), pos, feats, skipped, shard_stamp(s, k))
                del buf[k]
    finally:
        bar.close()
