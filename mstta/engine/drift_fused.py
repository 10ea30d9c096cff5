"""The scene-cut detector's step on a GPU as one Triton kernel (`drift_step_fused`): `drift.drift_step_t`'s
ops, about thirty small float64 kernels a step inside a CUDA graph, fused into one program per stream.

A graph's step of tiny kernels costs about its kernel count (docs/engine.md, "The captured step's ops"),
so `drift_step_t` runs this kernel on a CUDA device when Triton is there (`wanted`). The same
statistic, the same order of operations (torch's lerp formula, the products summed as `drift_step_t`
sums them); the sums' order inside a reduction is the kernel's, so the state agrees with the tensor
path to float64 rounding and the cuts are the same (tests/test_drift_fused.py, on a CPU through
Triton's interpreter, `TRITON_INTERPRET=1`). A kernel that fails to build is logged once and the
tensor path runs from then on.
"""

from __future__ import annotations

import logging
import os

import torch

from ..errors import UserError

log = logging.getLogger(__name__)

_broken = False  # a build or launch failed once: the tensor path runs from then on


KERNEL_ENV = "MSTTA_DETECTOR_KERNEL"  # auto (default): on CUDA; torch: never; triton: wherever Triton runs it


def wanted(device: torch.device) -> bool:
    """Whether `drift_step_t` runs the fused kernel on this device: by MSTTA_DETECTOR_KERNEL, `auto` on
    CUDA, `triton` on any device (a CPU through Triton's interpreter, TRITON_INTERPRET=1), `torch`
    never; only where Triton imports and no launch has failed."""
    mode = os.environ.get(KERNEL_ENV, "auto")
    if mode == "torch" or (mode == "auto" and device.type != "cuda"):
        return False
    if mode not in ("auto", "triton"):
        raise UserError(f"{KERNEL_ENV}={mode!r}: use auto, triton or torch")
    return not _broken and _kernel() is not None


def drift_step_fused(d, x: torch.Tensor, fg, ok: torch.Tensor | None = None) -> torch.Tensor | None:
    """`drift.drift_step_t` as one kernel launch: x [S, D] (view 0's features), the `Drift` record d
    stepped in place -> cut [S] bool; None where the kernel could not run (then nothing was written)."""
    global _broken
    state = (d.n, d.me, d.inv, d.acc, d.scale, d.start, d.table, d.terms)
    if _kernel() is None or not all(t.is_contiguous() for t in state):
        return None
    try:
        return torch.ops.mstta.drift_step(x, d.proj, *state, ok, _constants(d, fg), fg.detect_warmup + 1)
    except Exception as exc:  # a Triton that cannot build this kernel here: the tensor path, once logged
        _broken = True
        log.warning("the fused scene-cut detector could not run (%s); the tensor ops run instead", exc)
        return None


@torch.library.custom_op("mstta::drift_step", mutates_args=("n", "me", "inv", "acc", "scale"))
def _drift_step(
    x: torch.Tensor,
    proj: torch.Tensor | None,
    n: torch.Tensor,
    me: torch.Tensor,
    inv: torch.Tensor,
    acc: torch.Tensor,
    scale: torch.Tensor,
    start: torch.Tensor,
    table: torch.Tensor,
    terms: torch.Tensor,
    ok: torch.Tensor | None,
    constants: torch.Tensor,
    top: int,
) -> torch.Tensor:
    """The kernel's launch as one op of torch's dispatcher (so `graphs.step_ops` counts it): one
    program per stream."""
    S, D = x.shape
    k = me.shape[-1]
    cut = torch.empty(S, dtype=torch.bool, device=x.device)
    basis = proj if proj is not None else start  # an unused pointer where there is no map
    _kernel()[(S,)](
        x,
        *x.stride(),
        basis,
        *basis.stride(),
        n,
        me,
        inv,
        acc,
        scale,
        start,
        table,
        terms,
        ok if ok is not None else cut,
        cut,
        constants,
        D,
        k,
        top,
        HAS_PROJ=proj is not None,
        HAS_OK=ok is not None,
        BLOCK_K=_pow2(k),
        BLOCK_D=64,
        num_warps=8,  # a [64, 64] float64 tile: 16 per thread
    )
    return cut


def _constants(d, fg) -> torch.Tensor:
    """[1 + slack, threshold, 1e-12] in float64 on the record's device (a Python float would reach the
    kernel as float32), made once per record and setting, outside its dataclass fields (not state)."""
    key = (fg.detect_slack, fg.detect_threshold)
    hit = d.__dict__.get("_fused_constants")
    if hit is None or hit[0] != key:
        values = [1 + fg.detect_slack, fg.detect_threshold, 1e-12]
        hit = d.__dict__["_fused_constants"] = (key, torch.tensor(values, dtype=torch.float64, device=d.acc.device))
    return hit[1]


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


_built: list = []


def _kernel():
    """The Triton kernel, defined on first use (Triton reads TRITON_INTERPRET then); None without Triton."""
    if not _built:
        try:
            from .drift_kernel import drift_kernel
        except ImportError:
            drift_kernel = None
        _built.append(drift_kernel)
    return _built[0]
