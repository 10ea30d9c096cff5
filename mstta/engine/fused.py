"""Forgetting's per-step work on a GPU as Triton kernels (`kernels`), one launch each where the tensor
path runs several to thirty small ops: the scene-cut detector's step (`drift_step_fused`, for
`drift.drift_step_t`), a cache's slot choice (`timeliness_slot_fused`: the gathers and RoTTA's score
of `forget.timeliness_slot_t`, at weight 0 the entropy rule), a reset's emptying of the bank's rows
or a cache's slots (`vacate`), and the idle rule's expiry and use mark (`expire`, `mark_used`).

A CUDA graph's step of tiny kernels costs about its kernel count (docs/engine.md, "The captured
step's ops"), so the step takes these kernels on a CUDA device where Triton imports (`wanted`). The
same statistic and rule, the same order of operations (torch's lerp formula, the products summed as
the tensor path sums them); a reduction's order inside it is the kernel's, so the state agrees with
the tensor path to float64 rounding, with the same cuts and slots (tests/test_fused.py, on a CPU
through Triton's interpreter, TRITON_INTERPRET=1). Each kernel is a torch custom op (`mstta::...`),
so `graphs.step_ops` counts it. A kernel that fails to build is logged once and the tensor ops run
from then on.
"""

from __future__ import annotations

import logging
import os

import torch

from ..errors import UserError
from .cache_rules import EMPTY_TIME

log = logging.getLogger(__name__)

KERNEL_ENV = "MSTTA_KERNELS"  # auto (default): on CUDA; torch: never; triton: wherever Triton runs them
_broken = False  # a build or launch failed once: the tensor ops run from then on
_built: list = []  # the kernels' module once imported (None: no Triton)


def wanted(device: torch.device) -> bool:
    """Whether the step runs the kernels on this device, by MSTTA_KERNELS: `auto` on CUDA, `triton` on
    any device (a CPU through Triton's interpreter, TRITON_INTERPRET=1), `torch` never; only where
    Triton imports and no launch has failed."""
    mode = os.environ.get(KERNEL_ENV, "auto")
    if mode == "torch" or (mode == "auto" and device.type != "cuda"):
        return False
    if mode not in ("auto", "triton"):
        raise UserError(f"{KERNEL_ENV}={mode!r}: use auto, triton or torch")
    return not _broken and _kernels() is not None


def drift_step_fused(d, x: torch.Tensor, fg, ok: torch.Tensor | None = None) -> torch.Tensor | None:
    """`drift.drift_step_t` as one launch: x [S, D] (view 0's features), the `Drift` record d stepped
    in place -> cut [S] bool; None where the kernel could not run (then nothing was written)."""
    state = (d.n, d.me, d.inv, d.acc, d.scale, d.start, d.table, d.terms)
    if not all(t.is_contiguous() for t in state):
        return None
    key = (fg.detect_slack, fg.detect_threshold)
    consts = _constants(d, key, (1 + fg.detect_slack, fg.detect_threshold, 1e-12), x.device)
    return _launch(lambda: torch.ops.mstta.drift_step(x, d.proj, *state, ok, consts, fg.detect_warmup + 1))[1]


def timeliness_slot_fused(
    cache, label: torch.Tensor, h: torch.Tensor, clock: torch.Tensor, horizon: int, weight: float, ln_c: float
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """`forget.timeliness_slot_t` on each stream's class row label [S] of the `Cache` record's
    entropies and times, as one launch -> (slot [S], inserted [S] bool); None where it could not run."""
    if not all(t.is_contiguous() for t in (cache.ent, cache.time, label, h, clock)):
        return None
    lt = weight * ln_c
    consts = _constants(cache, (horizon, weight, ln_c), (1 / horizon, lt, lt * 0.5), h.device)
    return _launch(lambda: torch.ops.mstta.timeliness_slot(cache.ent, cache.time, label, h, clock, consts))[1]


def vacate(record, cut: torch.Tensor, rows: int | None = None, clock: torch.Tensor | None = None) -> bool:
    """Empty whole streams where cut [S] (bool), as one launch: a `Cache` record's slots (its
    `forget`), or a `Bank`'s first `rows` rows (None: all) and its start set to clock (its `forget`)
    -> whether the kernel ran."""
    bank = clock is not None
    ent = None if bank else record.ent
    start = (record.start, clock) if bank else (None, None)
    held = [record.time, record.bias, cut, *(t for t in (ent, *start) if t is not None)]
    if not all(t.is_contiguous() for t in held):
        return False
    n = record.bias.shape[1] if rows is None else rows  # a stream's rows (bank) or C * Q slots (cache)
    return _launch(lambda: torch.ops.mstta.vacate(cut, record.time, record.bias, ent, *start, n))[0]


def expire(cache, clock: torch.Tensor, idle: int, ok: torch.Tensor | None) -> bool:
    """`Cache.expire` at clock [S] as one launch -> whether the kernel ran."""
    held = [cache.used, cache.time, cache.ent, cache.bias, clock, *([ok] if ok is not None else [])]
    if not all(t.is_contiguous() for t in held):
        return False
    return _launch(lambda: torch.ops.mstta.expire(cache.used, cache.time, cache.ent, cache.bias, clock, ok, idle))[0]


def mark_used(cache, w: torch.Tensor, clock: torch.Tensor, ok: torch.Tensor | None) -> bool:
    """`Cache._mark_used` of the weights w [S, C*Q] at clock [S] as one launch -> whether the kernel ran."""
    held = [w, cache.bias, cache.used, clock, *([ok] if ok is not None else [])]
    if not all(t.is_contiguous() for t in held):
        return False
    return _launch(lambda: torch.ops.mstta.mark_used(w, cache.bias, cache.used, clock, ok))[0]


def _launch(op) -> tuple[bool, object]:
    """(True, op()) where the kernel ran; (False, None) where it could not (logged once, the tensor
    ops from then on)."""
    global _broken
    try:
        return True, op()
    except Exception as exc:  # a Triton that cannot build the kernel here: the tensor ops, once logged
        _broken = True
        log.warning("a fused forgetting kernel could not run (%s); the tensor ops run instead", exc)
        return False, None


def _constants(record, key: tuple, values: tuple, device: torch.device) -> torch.Tensor:
    """values as a float64 tensor on the device (a Python float would reach a kernel as float32), made
    once per record and key, outside its dataclass fields (not state)."""
    hit = record.__dict__.get("_fused_constants")
    if hit is None or hit[0] != key:
        hit = record.__dict__["_fused_constants"] = (key, torch.tensor(values, dtype=torch.float64, device=device))
    return hit[1]


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
    """`kernels.drift_kernel`'s launch, one program per stream -> cut [S] bool."""
    S, D = x.shape
    k = me.shape[-1]
    cut = torch.empty(S, dtype=torch.bool, device=x.device)
    basis = proj if proj is not None else start  # an unused pointer where there is no map
    _kernels().drift_kernel[(S,)](
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


@torch.library.custom_op("mstta::timeliness_slot", mutates_args=())
def _timeliness_slot(
    ent: torch.Tensor,
    time: torch.Tensor,
    label: torch.Tensor,
    h: torch.Tensor,
    clock: torch.Tensor,
    constants: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`kernels.timeliness_kernel`'s launch, one program per stream -> (slot [S] long, inserted [S] bool)."""
    S, C, Q = ent.shape
    slot = torch.empty(S, dtype=torch.long, device=ent.device)
    fits = torch.empty(S, dtype=torch.bool, device=ent.device)
    _kernels().timeliness_kernel[(S,)](
        ent, time, label, h, clock, constants, slot, fits, C, Q, EMPTY=EMPTY_TIME, BLOCK_Q=_pow2(Q)
    )
    return slot, fits


BLOCK = 1024  # slots (rows) per program of the vacate and expire kernels; the mark kernel's loop step


@torch.library.custom_op("mstta::vacate", mutates_args=("time", "bias", "ent", "start"))
def _vacate(
    cut: torch.Tensor,
    time: torch.Tensor,
    bias: torch.Tensor,
    ent: torch.Tensor | None,
    start: torch.Tensor | None,
    clock: torch.Tensor | None,
    n: int,
) -> None:
    """`kernels.vacate_kernel`'s launch: programs (stream, block of BLOCK slots)."""
    S, stride = bias.shape[0], bias.numel() // bias.shape[0]
    grid = (S, max(1, -(-n // BLOCK)))
    _kernels().vacate_kernel[grid](
        cut,
        time,
        bias,
        ent if ent is not None else bias,
        start if start is not None else cut,
        clock if clock is not None else cut,
        n,
        stride,
        HAS_ENT=ent is not None,
        HAS_START=start is not None,
        BLOCK=BLOCK,
    )


@torch.library.custom_op("mstta::expire", mutates_args=("time", "ent", "bias"))
def _expire(
    used: torch.Tensor,
    time: torch.Tensor,
    ent: torch.Tensor,
    bias: torch.Tensor,
    clock: torch.Tensor,
    ok: torch.Tensor | None,
    idle: int,
) -> None:
    """`kernels.expire_kernel`'s launch: programs (stream, block of BLOCK slots)."""
    S, n = bias.shape
    _kernels().expire_kernel[(S, -(-n // BLOCK))](
        used, time, ent, bias, clock, ok if ok is not None else clock, idle, n, HAS_OK=ok is not None, BLOCK=BLOCK
    )


@torch.library.custom_op("mstta::mark_used", mutates_args=("used",))
def _mark_used(
    w: torch.Tensor, bias: torch.Tensor, used: torch.Tensor, clock: torch.Tensor, ok: torch.Tensor | None
) -> None:
    """`kernels.mark_kernel`'s launch: a program per stream."""
    S, n = bias.shape
    _kernels().mark_kernel[(S,)](
        w, bias, used, clock, ok if ok is not None else clock, n, HAS_OK=ok is not None, BLOCK=BLOCK
    )


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _kernels():
    """The kernels' module, imported on first use (Triton reads TRITON_INTERPRET then); None without Triton."""
    if not _built:
        try:
            from . import kernels
        except ImportError:
            kernels = None
        _built.append(kernels)
    return _built[0]
