"""`EngineConfig`: the hyperparameters of every method, one dataclass that rejects unknown keys
(its values checked in `__post_init__`; its families' sections are their modules' `Params`).

Loading a YAML file or `--set` overrides onto it is `mstta.configfile`'s; a dataset's file
(`engine:` and `bench:` sections) is `mstta.bench.config.load_dataset_config`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..checks import MAX_WEIGHT
from ..checks import check as _check
from ..checks import check_int as _int
from ..checks import check_num as _num
from .families import (
    FAMILIES,
    BcaParams,
    CtptParams,
    DmnParams,
    DotaParams,
    DpeParams,
    MtaParams,
    OnzetaParams,
    TptParams,
    ZeroParams,
)

KERNELS = ("exp", "linear")
# Every dataset of the paper has fewer test samples (ImageNet-Sketch, the largest, 50,889), so
# benchmark results equal the unbounded bank's bit for bit, while an endless stream (a webcam)
# keeps flat memory and a flat step time.
DEFAULT_BANK_SIZE = 65_536
FAMILY_SECTIONS = tuple(FAMILIES)  # EngineConfig's family sections, one per family module
# How a multi-view sample becomes one query: TDA's confident views, view 0, or a family's own view
# combination (ZERO's voters, MTA's mode: combinations no paper reports for the cache methods).
VIEW_MODES = ("confident", "original", *(n for n, f in FAMILIES.items() if hasattr(f, "aggregate")))

# Upper bounds of the values that memory or time grows with (docs/limits.md gives each reason).
# Each is far above anything the paper or its peers use, and low enough that a typo (an extra
# zero run) gets a one-line refusal instead of a MemoryError or a run that never ends.
MAX_K = 256  # paper: k = 2 (ablation up to 16); kNN gathers [chunk, k, d] floats
MAX_MS_STEPS = 64  # paper: 1 step (ablation 2, 4); time grows linearly with steps
MAX_CAPACITY = 256  # TDA: 3 positive, 2 negative per class; cache [C, Q, d] (+ [C, Q, C])
MAX_BANK_SIZE = 2**24  # 16,777,216 > 300x ImageNet's test set; the bank is [M, d] floats
MIN_LOGIT_SCALE = 1e-3  # CLIP's is 100; below 1e-3 the scaled logits are ~0 (1e-320 underflows to 0
# in float32) and every sample gets the same prediction


@dataclass
class EngineConfig:
    """Hyperparameters of every method (names as in the paper: k, alpha, lam, beta, capacity)."""

    k: int = 2  # kNN neighbours of the mean shift, Eq. (9)
    alpha: float = 0.8  # mean-shift weight: z ~ (1-alpha) f + alpha/m sum_nn f_j, Eq. (10)
    ms_steps: int = 1  # mean-shift steps (the paper uses 1; its ablation 2 and 4)
    bank_size: int | None = (
        DEFAULT_BANK_SIZE  # FIFO bound of the feature bank M; None = unbounded (the paper's literal setting)
    )
    capacity: int = 3  # Q: entries per class in the positive cache (TDA's shot capacity)
    lam: float = 1.0  # lambda: weight of the cache logits; 0 = the CLIP logits of the method's prediction path
    kernel: str = "exp"  # cache affinity: "exp" = exp(-beta(1 - qK^T)) (TDA), "linear" = qK^T (§3.1)
    cache_alpha: float = 2.0  # a: TDA's positive-cache alpha (per dataset in configs/<dataset>.yaml)
    beta: float = 5.0  # TDA's positive-cache beta (sharpness of the exp kernel)
    logit_scale: float = 100.0  # CLIP's logit scale
    neg_capacity: int = 2  # negative cache entries per class (tda, tda+ms, boostadapter*)
    neg_alpha: float = 0.117  # negative-cache logit multiplier (subtracted)
    neg_beta: float = 1.0  # negative-cache kernel sharpness
    neg_entropy_lower: float = 0.2  # admit when lower < H/log2(C) < upper
    neg_entropy_upper: float = 0.5
    neg_mask_lower: float = 0.03  # negative value: 1 where lower < p < upper
    neg_mask_upper: float = 1.0
    delta: int = 0  # BoostAdapter: extra per-class capacity of the boosted cache
    view_mode: str = "confident"  # multi-view samples: "confident" (TDA, OOD) or "original" (view 0)
    view_ratio: float = 0.1  # fraction of views kept by confidence (floor(0.1*64) = 6)
    bank_dtype: str = (
        "float32"  # storage of the kNN bank: float32 (exact) or float16/bfloat16 (half the bytes; sums in float32)
    )
    # The other families' hyperparameters, one section each (`engine: dota: {eta: 0.3}` in a dataset
    # YAML, `--set dota.eta=0.3`); each section's defaults and sources are in its module's `Params`.
    zero: ZeroParams = field(default_factory=ZeroParams)
    mta: MtaParams = field(default_factory=MtaParams)
    dmn: DmnParams = field(default_factory=DmnParams)
    dota: DotaParams = field(default_factory=DotaParams)
    onzeta: OnzetaParams = field(default_factory=OnzetaParams)
    bca: BcaParams = field(default_factory=BcaParams)
    dpe: DpeParams = field(default_factory=DpeParams)
    tpt: TptParams = field(default_factory=TptParams)
    ctpt: CtptParams = field(default_factory=CtptParams)

    def __post_init__(self) -> None:
        _int(self, "k", 1, MAX_K)
        _num(self, "alpha", 0.0, 1.0)
        _int(self, "ms_steps", 1, MAX_MS_STEPS)
        if self.bank_size is not None:
            _int(self, "bank_size", 1, MAX_BANK_SIZE, " or none (unbounded)")
        _int(self, "capacity", 1, MAX_CAPACITY)
        _num(self, "lam", 0.0, MAX_WEIGHT)
        _check(self.kernel in KERNELS, "kernel", self.kernel, f"one of {', '.join(KERNELS)}")
        _num(self, "cache_alpha", 0.0, MAX_WEIGHT)
        _num(self, "beta", 0.0, MAX_WEIGHT)
        _num(self, "logit_scale", MIN_LOGIT_SCALE, MAX_WEIGHT)
        _int(self, "neg_capacity", 1, MAX_CAPACITY)
        _num(self, "neg_alpha", 0.0, MAX_WEIGHT)
        _num(self, "neg_beta", 0.0, MAX_WEIGHT)
        for key in ("neg_entropy_lower", "neg_entropy_upper", "neg_mask_lower", "neg_mask_upper"):
            _num(self, key, 0.0, 1.0)  # compared with normalised entropies and probabilities
        _check(
            self.neg_entropy_lower < self.neg_entropy_upper,
            "neg_entropy_lower",
            self.neg_entropy_lower,
            f"below neg_entropy_upper ({self.neg_entropy_upper})",
        )
        _check(
            self.neg_mask_lower < self.neg_mask_upper,
            "neg_mask_lower",
            self.neg_mask_lower,
            f"below neg_mask_upper ({self.neg_mask_upper})",
        )
        _int(self, "delta", 0, MAX_CAPACITY)
        _check(self.view_mode in VIEW_MODES, "view_mode", self.view_mode, f"one of {', '.join(VIEW_MODES)}")
        _num(self, "view_ratio", 0.0, 1.0, low_open=True)
        _check(
            self.bank_dtype in ("float32", "float16", "bfloat16"),
            "bank_dtype",
            self.bank_dtype,
            "one of float32 (exact), float16, bfloat16",
        )
