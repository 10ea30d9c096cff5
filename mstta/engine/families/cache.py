"""The paper's cache family: the §3.1 training-free cache baseline, TDA, BoostAdapter, MS-TTA and
their combinations, as switches on one step (`Method.cache`, `mean_shift`, `negative`, `boost`,
`neg_policy`). Its registry rows and its hyperparameters live here, as every family's do; its step
is its own vectorised runner, `mstta.engine.cache_runner.Streams` (Alg. 1: state on the device, a
CUDA graph on GPU), not pure functions run by the family runner.

Its `Params` are the top-level keys of `EngineConfig` (`engine: {capacity: 3, ...}` in a dataset
YAML, `--set lam=2`), as they were before the other families came: `EngineConfig.family_params("cache")`
gives them as this dataclass, and `EngineConfig` checks them through it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...checks import MAX_WEIGHT, check, check_int, check_num
from .base import CACHE, Method

NAME = CACHE

# The paper's order: its main tables (CLIP, TDA, BoostAdapter, MS-TTA), then the ablation against
# the §3.1 baseline, then the plug-in tables (TDA + MS, BoostAdapter + MS). The `+boost` methods
# (issue 9) are MS-TTA and its baseline run on BoostAdapter's pipeline: the paper's other reading.
METHODS: tuple[Method, ...] = (
    Method(name="zero-shot", title="CLIP (zero-shot)", summary="CLIP zero-shot logits, no adaptation (Eq. 1)"),
    Method(name="tda", title="TDA", cache=True, negative=True, summary="TDA: positive + negative caches"),
    Method(
        name="boostadapter",
        title="BoostAdapter",
        cache=True,
        negative=True,
        boost=True,
        neg_policy="fifo",
        summary="BoostAdapter: TDA's caches + the lowest-entropy views in a throw-away boosted cache",
    ),
    Method(
        name="ms-tta",
        title="MS-TTA",
        cache=True,
        mean_shift=True,
        summary="MS-TTA: kNN mean shift + a cache of shifted embeddings (Alg. 1), on TDA's views",
    ),
    Method(
        name="ms-tta+boost",
        title="MS-TTA + boost",
        cache=True,
        mean_shift=True,
        boost=True,
        summary="MS-TTA on BoostAdapter's pipeline: shifted keys, queries and boosting views",
    ),
    Method(
        name="baseline",
        title="Baseline (cache)",
        cache=True,
        summary="the paper's training-free cache baseline: one positive cache (§3.1)",
    ),
    Method(
        name="baseline+boost",
        title="Baseline + boost",
        cache=True,
        boost=True,
        summary="the §3.1 baseline with BoostAdapter's boosting views",
    ),
    Method(
        name="tda+ms",
        title="TDA + MS",
        cache=True,
        mean_shift=True,
        negative=True,
        summary="TDA with mean-shifted keys and queries (plug-in)",
    ),
    Method(
        name="boostadapter+ms",
        title="BoostAdapter + MS",
        cache=True,
        mean_shift=True,
        negative=True,
        boost=True,
        neg_policy="fifo",
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


def state_bytes(C: int, d: int, p: Params) -> int:
    """The caches' bytes per stream at most (positive [C, Q, d] + slot data; TDA's negative
    [C, Qn, d + C]); the mean-shift bank is the runner's (its rows x (d + 4) floats)."""
    return C * p.capacity * (d + 3) * 4 + C * p.neg_capacity * (d + C + 4) * 4
