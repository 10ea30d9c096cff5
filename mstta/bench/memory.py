"""Peak memory of a block: CUDA `max_memory_allocated` on a GPU, else the process's peak RSS."""

from __future__ import annotations

import sys

import torch


def process_peak_rss_mb() -> float | None:
    """Peak resident set size of this process so far (MB), or None where unavailable."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


class MemoryMeter:
    """`with MemoryMeter(device) as m: ...` then `m.peak_mb` and `m.kind`.

    On CUDA the peak counter is reset on entry, so the figure is the block's peak of allocated
    memory (model weights included, as the paper's memory column). On the CPU it is the
    process's lifetime peak RSS (it never goes down, so later blocks read at least as much).
    """

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.kind = "cuda_max_allocated" if self.device.type == "cuda" else "process_peak_rss"
        self.peak_mb: float | None = None

    def __enter__(self) -> "MemoryMeter":
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_mb = round(torch.cuda.max_memory_allocated(self.device) / 2**20, 1)
        else:
            self.peak_mb = process_peak_rss_mb()
