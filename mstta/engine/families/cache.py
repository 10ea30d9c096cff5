"""The paper's cache family: the §3.1 training-free cache baseline, TDA, BoostAdapter, MS-TTA and
their combinations, as parts of one step that each row turns on: its `Switches` (`cache`,
`negative`, `boost`, `neg_policy`; `Method(settings=Switches(...))`) and the generic
`Method.mean_shift`. Its registry rows and its hyperparameters live here, as every family's do; its
step is its own vectorised runner, `mstta.engine.cache_runner.Streams` (Alg. 1: state on the device,
a CUDA graph on GPU), not pure functions run by the family runner. That runner and the family's
replay (`mstta.engine.replay`) are the only readers of the switches (`switches(row)`); every other
caller asks the row (`Method.stateful`, `keeps_cache`, `boosting_views`, which `Switches` answers).

Its `Params` are the top-level keys of `EngineConfig` (`engine: {capacity: 3, ...}` in a dataset
YAML, `--set lam=2`), as they were before the other families came: `EngineConfig.family_params("cache")`
gives them as this dataclass (the runner takes them once, at construction), and `EngineConfig`
checks them through it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ...checks import MAX_WEIGHT, check, check_int, check_num
from ...errors import UserError
from .base import CACHE, Method, RowSettings

NAME = CACHE
NEG_POLICIES = ("entropy", "fifo")


@dataclass(frozen=True)
class Switches(RowSettings):
    """Which parts of the step a row runs (`Method.settings` of the cache family's rows; all off: zero-shot)."""

    cache: bool = False  # positive cache of low-entropy samples (§3.1)
    negative: bool = False  # TDA's negative cache
    boost: bool = False  # BoostAdapter's throw-away boosted cache from the lowest-entropy views
    neg_policy: str = "entropy"  # negative-cache replacement: "entropy" (TDA) or "fifo" (BoostAdapter)

    def __post_init__(self) -> None:
        check(self.neg_policy in NEG_POLICIES, "neg_policy", self.neg_policy, f"one of {', '.join(NEG_POLICIES)}")

    @property
    def stateful(self) -> bool:
        """Without the positive cache nothing is kept (the bank and the other caches feed on it)."""
        return self.cache

    @property
    def keeps_cache(self) -> bool:
        return self.cache

    @property
    def boosting_views(self) -> bool:
        return self.boost


def switches(row: Method) -> Switches:
    """A cache-family row's switches; a row without them is refused (zero-shot's are `Switches()`)."""
    if not isinstance(row.settings, Switches):
        raise UserError(
            f"method {row.name!r} of the cache family has no switches: give it "
            "settings=mstta.engine.families.cache.Switches(...) (all off = zero-shot)"
        )
    return row.settings


# The paper's order: its main tables (CLIP, TDA, BoostAdapter, MS-TTA), then the ablation against
# the §3.1 baseline, then the plug-in tables (TDA + MS, BoostAdapter + MS). The `+boost` methods
# (issue 9) are MS-TTA and its baseline run on BoostAdapter's pipeline: the paper's other reading.
METHODS: tuple[Method, ...] = (
    Method(
        name="zero-shot",
        title="CLIP (zero-shot)",
        settings=Switches(),
        summary="CLIP zero-shot logits, no adaptation (Eq. 1)",
    ),
    Method(
        name="tda", title="TDA", settings=Switches(cache=True, negative=True), summary="TDA: positive + negative caches"
    ),
    Method(
        name="boostadapter",
        title="BoostAdapter",
        settings=Switches(cache=True, negative=True, boost=True, neg_policy="fifo"),
        summary="BoostAdapter: TDA's caches + the lowest-entropy views in a throw-away boosted cache",
    ),
    Method(
        name="ms-tta",
        title="MS-TTA",
        mean_shift=True,
        settings=Switches(cache=True),
        summary="MS-TTA: kNN mean shift + a cache of shifted embeddings (Alg. 1), on TDA's views",
    ),
    Method(
        name="ms-tta+boost",
        title="MS-TTA + boost",
        mean_shift=True,
        settings=Switches(cache=True, boost=True),
        summary="MS-TTA on BoostAdapter's pipeline: shifted keys, queries and boosting views",
    ),
    Method(
        name="baseline",
        title="Baseline (cache)",
        settings=Switches(cache=True),
        summary="the paper's training-free cache baseline: one positive cache (§3.1)",
    ),
    Method(
        name="baseline+boost",
        title="Baseline + boost",
        settings=Switches(cache=True, boost=True),
        summary="the §3.1 baseline with BoostAdapter's boosting views",
    ),
    Method(
        name="tda+ms",
        title="TDA + MS",
        mean_shift=True,
        settings=Switches(cache=True, negative=True),
        summary="TDA with mean-shifted keys and queries (plug-in)",
    ),
    Method(
        name="boostadapter+ms",
        title="BoostAdapter + MS",
        mean_shift=True,
        settings=Switches(cache=True, negative=True, boost=True, neg_policy="fifo"),
        summary="BoostAdapter with mean-shifted keys and queries (plug-in)",
    ),
)

KERNELS = ("exp", "linear")
MAX_CAPACITY = 256  # TDA: 3 positive, 2 negative per class; cache [C, Q, d] (+ [C, Q, C])


@dataclass
class Params:
    """The cache family's hyperparameters (names as in the paper: lam, capacity; TDA's alpha and beta
    as cache_alpha and beta), each bound checked here (docs/limits.md)."""

    capacity: int = 3  # Q: entries per class in the positive cache (TDA's shot capacity)
    lam: float = 1.0  # lambda: weight of the cache logits; 0 = the CLIP logits of the method's prediction path
    kernel: str = "exp"  # cache affinity: "exp" = exp(-beta(1 - qK^T)) (TDA), "linear" = qK^T (§3.1)
    cache_alpha: float = 2.0  # a: TDA's positive-cache alpha (per dataset in configs/<dataset>.yaml)
    beta: float = 5.0  # TDA's positive-cache beta (sharpness of the exp kernel)
    neg_capacity: int = 2  # negative cache entries per class (tda, tda+ms, boostadapter*)
    neg_alpha: float = 0.117  # negative-cache logit multiplier (subtracted)
    neg_beta: float = 1.0  # negative-cache kernel sharpness
    neg_entropy_lower: float = 0.2  # admit when lower < H/log2(C) < upper
    neg_entropy_upper: float = 0.5
    neg_mask_lower: float = 0.03  # negative value: 1 where lower < p < upper
    neg_mask_upper: float = 1.0
    delta: int = 0  # BoostAdapter: extra per-class capacity of the boosted cache

    def __post_init__(self) -> None:
        check_int(self, "capacity", 1, MAX_CAPACITY)
        check_num(self, "lam", 0.0, MAX_WEIGHT)
        check(self.kernel in KERNELS, "kernel", self.kernel, f"one of {', '.join(KERNELS)}")
        check_num(self, "cache_alpha", 0.0, MAX_WEIGHT)
        check_num(self, "beta", 0.0, MAX_WEIGHT)
        check_int(self, "neg_capacity", 1, MAX_CAPACITY)
        check_num(self, "neg_alpha", 0.0, MAX_WEIGHT)
        check_num(self, "neg_beta", 0.0, MAX_WEIGHT)
        for key in ("neg_entropy_lower", "neg_entropy_upper", "neg_mask_lower", "neg_mask_upper"):
            check_num(self, key, 0.0, 1.0)  # compared with normalised entropies and probabilities
        check(
            self.neg_entropy_lower < self.neg_entropy_upper,
            "neg_entropy_lower",
            self.neg_entropy_lower,
            f"below neg_entropy_upper ({self.neg_entropy_upper})",
        )
        check(
            self.neg_mask_lower < self.neg_mask_upper,
            "neg_mask_lower",
            self.neg_mask_lower,
            f"below neg_mask_upper ({self.neg_mask_upper})",
        )
        check_int(self, "delta", 0, MAX_CAPACITY)

    @classmethod
    def read(cls, source: Any) -> Params:
        """These keys as `source` holds them now (EngineConfig's top-level keys, checked when it was
        built): not checked again, as another family's section is not when a caller changes it."""
        p = object.__new__(cls)
        p.__dict__.update({f.name: getattr(source, f.name) for f in fields(cls)})
        return p


def state_bytes(C: int, d: int, p: Params) -> int:
    """The caches' bytes per stream at most (positive [C, Q, d] + slot data; TDA's negative
    [C, Qn, d + C]); the mean-shift bank is the runner's (its rows x (d + 4) floats)."""
    return C * p.capacity * (d + 3) * 4 + C * p.neg_capacity * (d + C + 4) * 4
