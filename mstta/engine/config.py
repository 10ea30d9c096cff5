"""`EngineConfig`: the hyperparameters of every method, one dataclass that rejects unknown keys
(its values checked in `__post_init__`; its families' sections are their modules' `Params`).

Loading a YAML file or `--set` overrides onto it is `mstta.configfile`'s; a dataset's file
(`engine:` and `bench:` sections) is `mstta.bench.config.load_dataset_config`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from ..checks import MAX_WEIGHT
from ..checks import check as _check
from ..checks import check_int as _int
from ..checks import check_num as _num
from .cache import ShiftSettings
from .families import (
    CACHE,
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
from .families.cache import Params as CacheParams
from .forget import ForgetConfig

# Every dataset of the paper has fewer test samples (ImageNet-Sketch, the largest, 50,889), so
# benchmark results equal the unbounded bank's bit for bit, while an endless stream (a webcam)
# keeps flat memory and a flat step time.
DEFAULT_BANK_SIZE = 65_536
FAMILY_SECTIONS = tuple(n for n in FAMILIES if n != CACHE)  # EngineConfig's family sections, one per module
SECTIONS = (*FAMILY_SECTIONS, "forget")  # EngineConfig's sections (--set SECTION.KEY=VALUE)
# How a multi-view sample becomes one query: TDA's confident views, view 0, or a family's own view
# combination (ZERO's voters, MTA's mode: combinations no paper reports for the cache methods).
VIEW_MODES = ("confident", "original", *(n for n, f in FAMILIES.items() if hasattr(f, "aggregate")))

# Upper bounds of the values that memory or time grows with (docs/limits.md gives each reason).
# Each is far above anything the paper or its peers use, and low enough that a typo (an extra
# zero run) gets a one-line refusal instead of a MemoryError or a run that never ends.
MAX_K = 256  # paper: k = 2 (ablation up to 16); kNN gathers [chunk, k, d] floats
MAX_MS_STEPS = 64  # paper: 1 step (ablation 2, 4); time grows linearly with steps
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
    # The cache family's hyperparameters (its `Params`, mstta/engine/families/cache.py: their meaning,
    # defaults and bounds), at the top level as the paper's configs give them.
    capacity: int = CacheParams.capacity
    lam: float = CacheParams.lam
    kernel: str = CacheParams.kernel
    cache_alpha: float = CacheParams.cache_alpha
    beta: float = CacheParams.beta
    logit_scale: float = 100.0  # CLIP's logit scale (every family's, passed beside its Params)
    neg_capacity: int = CacheParams.neg_capacity
    neg_alpha: float = CacheParams.neg_alpha
    neg_beta: float = CacheParams.neg_beta
    neg_entropy_lower: float = CacheParams.neg_entropy_lower
    neg_entropy_upper: float = CacheParams.neg_entropy_upper
    neg_mask_lower: float = CacheParams.neg_mask_lower
    neg_mask_upper: float = CacheParams.neg_mask_upper
    delta: int = CacheParams.delta
    # multi-view samples: "original" (view 0: the cross-dataset protocol, the default wherever no dataset
    # config chooses, docs/engine.md "Views and the logit scale") or "confident" (TDA's OOD protocol)
    view_mode: str = "original"
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
    # Forgetting on streams (`--set forget.rule=timeliness`; mstta.engine.forget, docs/engine.md "Forgetting").
    forget: ForgetConfig = field(default_factory=ForgetConfig)

    def __post_init__(self) -> None:
        _int(self, "k", 1, MAX_K)
        _num(self, "alpha", 0.0, 1.0)
        _int(self, "ms_steps", 1, MAX_MS_STEPS)
        if self.bank_size is not None:
            _int(self, "bank_size", 1, MAX_BANK_SIZE, " or none (unbounded)")
        CacheParams(**{f.name: getattr(self, f.name) for f in fields(CacheParams)})  # the cache family's keys
        _num(self, "logit_scale", MIN_LOGIT_SCALE, MAX_WEIGHT)
        _check(self.view_mode in VIEW_MODES, "view_mode", self.view_mode, f"one of {', '.join(VIEW_MODES)}")
        _num(self, "view_ratio", 0.0, 1.0, low_open=True)
        _check(
            self.bank_dtype in ("float32", "float16", "bfloat16"),
            "bank_dtype",
            self.bank_dtype,
            "one of float32 (exact), float16, bfloat16",
        )

    def shift_settings(self) -> ShiftSettings:
        """The mean shift's settings, as a `+ms` row's bank reads them."""
        return ShiftSettings(self.k, self.alpha, self.ms_steps, self.bank_size)

    def family_params(self, family: str):
        """A family's own `Params` (the runner passes them, with `logit_scale`, to the family's
        functions: never the whole config; the cache family's runner takes its own once): the cache
        family's top-level keys as its `Params`, another family's section (its `Params`' defaults where
        this config has no such section); as they are now, checked when this config was built."""
        if family == CACHE:
            return CacheParams.read(self)
        section = getattr(self, family, None)
        return section if section is not None else FAMILIES[family].Params()
