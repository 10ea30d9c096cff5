"""BCA (CVPR-25, "Bayesian Test-Time Adaptation for Vision-Language Models", arXiv 2503.09248):
Bayesian class adaptation, a likelihood from adapted class centres times an adapted class prior.

The authors' code (buerzlh/Bayesian-Test-Time-Adaptation-for-Vision-Language-Models) cannot be
read here, nor the paper past its abstract: the semantics and defaults are a third-party port's,
TTABC (walawalagoose/TTABC) `ttabc/model_selection/bca.py` `BCAState` and
`ttabc/configs/algorithms.py` ["bca"], which cites the authors' repository. Per sample:

    L = s X mu^T; V > 1: keep the floor(p V) (>= 1 here) lowest-entropy views   (`assign_label`)
    xbar = mean of their features, Lbar = mean of their logits (= s xbar mu^T)
    out = softmax(Lbar) P (the posterior); (conf, y) = max(out)                   (`bca_step`)
    conf > threshold1: mu_y <- normalise((c1_y mu_y + xbar) / (c1_y + 1)), c1_y += 1 (`update_centers`)
    conf > threshold2: P_y <- (c2_y P_y + out) / (c2_y + 1), c2_y += 1               (`update_prior`)

mu starts at the text classifier, P at the identity. The prediction is argmax(out) before the
updates; `probs` = out / sum(out). +MS: the likelihood and the centre update use shift(xbar).
docs/methods/bca.md lists what is unverified.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ...checks import check_int, check_num
from ...threads import small_ops
from .. import functional as Fn
from . import bca_fade
from .base import Method, StepOut

NAME = "bca"
# Its protocol in words (`mstta.engine.protocol`): what a row predicts from when it reads V > 1 views
# ({kept}: the views its confident selection keeps, {views}: V), its Params key of that selection's
# fraction (None: no selection), and whether its CLIP reference (`StepOut.clip`) is on those views.
PREDICTS = "the mean of its {kept} most confident views"
SELECTION = "selection_p"
CLIP_FROM_VIEWS = True
PROVENANCE = "a third-party port's semantics, not the authors' code"

METHODS = (
    Method(
        name="bca",
        title="BCA",
        family=NAME,
        provenance=PROVENANCE,
        summary="Bayesian class adaptation: adapted class centres (likelihood) and class prior (CVPR-25)",
    ),
    Method(
        name="bca+ms",
        title="BCA + MS",
        family=NAME,
        mean_shift=True,
        provenance=PROVENANCE,
        summary="BCA with the likelihood and the centre update on the mean-shifted feature",
    ),
)

# The port holds one set of values for every dataset; the authors' per-dataset values (if any) are unknown.
DATASET_PARAMS: dict[str, dict] = {}

MAX_COUNT = 2**40  # init_count1, init_count2: the port's 20000 and 1; a prior weight, never allocated


@dataclass
class Params:
    """BCA's hyperparameters (`engine: bca: {...}`); defaults = TTABC `ttabc/configs/algorithms.py`
    ["bca"] (unverified against the authors' code)."""

    threshold1: float = 0.05  # update a centre when the posterior's max is above this
    init_count1: int = 20000  # each centre's starting weight (its text embedding counts as this many samples)
    threshold2: float = 0.65  # update a prior row when the posterior's max is above this
    init_count2: int = 1  # each prior row's starting weight
    selection_p: float = 0.1  # fraction of the views kept by entropy (floor(0.1 * 64) = 6; at least 1 here)

    def __post_init__(self) -> None:
        check_num(self, "threshold1", 0.0, 1.0)
        check_int(self, "init_count1", 0, MAX_COUNT)
        check_num(self, "threshold2", 0.0, 1.0)
        check_int(self, "init_count2", 0, MAX_COUNT)
        check_num(self, "selection_p", 0.0, 1.0, low_open=True)


def state_bytes(C: int, d: int, p: Params) -> int:
    """Bytes of one stream's state at float32: centres mu [C, d], prior P [C, C], two int64 counts [C]
    (16 C); under `timeliness` (`bca_fade`) V [C, d], E [C, C] and seven float vectors [C] (28 C)."""
    return 4 * (C * d + C * C) + 28 * C


def init(text: torch.Tensor, p: Params, logit_scale: float, length: int | None) -> dict[str, torch.Tensor]:
    """A fresh state (`BCAState.__init__`): mu = the text classifier, P = I, c1 = init_count1, c2 = init_count2."""
    C = text.shape[0]
    return {
        "mu": text.clone(),
        "prior": torch.eye(C, dtype=text.dtype, device=text.device),
        "c1": torch.full((C,), p.init_count1, dtype=torch.int64, device=text.device),
        "c2": torch.full((C,), p.init_count2, dtype=torch.int64, device=text.device),
    }


FORGET = ("timeliness",)  # the forget rules this family defines beside the runner's resets (mstta.engine.forget)


def decay(state: dict, gamma: float, text: torch.Tensor, p: Params) -> None:
    """`forget.rule=timeliness` (the project's adaptation, no published rule; docs/methods/bca.md,
    "Forgetting"): before each step the evidence beyond each prior fades by gamma = exp(-1 / horizon)
    and the prior keeps its weight. A centre is the running mean of n1 = init_count1 copies of its text
    embedding W_c and the samples, so c1 mu = n1 W + E (E: the samples' weighted sum, as the port's
    normalised update reads it): mu <- normalise(n1 W + gamma (c1 mu - n1 W)), c1 <- n1 + gamma (c1 - n1);
    a prior row is the mean of n2 = init_count2 copies of e_c and the posteriors: P <- (n2 I +
    gamma (c2 P - n2 I)) / c2', c2' = n2 + gamma (c2 - n2). The counts become real numbers. Held in
    `bca_fade`'s form (converted at the first fade), so the fade is O(C), not a pass over mu and P."""
    n1, n2 = float(p.init_count1), float(p.init_count2)
    if not bca_fade.faded(state):
        bca_fade.convert(state, text, n2)
    bca_fade.fade(state, gamma, n1, n2)


def confident_mean(x: torch.Tensor, logits: torch.Tensor, ratio: float) -> torch.Tensor:
    """`assign_label` with TPT's `select_confident_samples`: the mean feature of the floor(ratio V)
    lowest-entropy views (at least 1: the port's empty selection would be NaN; ties to the lower
    view index). [V, d], [V, C] -> [d], not re-normalised."""
    return x[Fn.confident_indices(Fn.entropy(logits), ratio)].mean(0)


def step(
    state: dict[str, torch.Tensor],
    x: torch.Tensor,
    text: torch.Tensor,
    p: Params,
    logit_scale: float,
    shift: Callable[[torch.Tensor], torch.Tensor],
) -> StepOut:
    """One sample, `BCAState.bca_step`: predict from the posterior, then update centre and prior
    (on-device masks for the thresholds: no host round trip); a faded state steps in its own form."""
    if bca_fade.faded(state):
        return bca_fade.step(state, x, text, p, logit_scale, shift, confident_mean)
    mu, prior = state["mu"], state["prior"]
    s = logit_scale
    xbar = x[0] if x.shape[0] == 1 else confident_mean(x, s * (x @ mu.T), p.selection_p)
    z = shift(xbar.unsqueeze(0))[0]
    out = torch.softmax(s * (z @ mu.T), dim=0) @ prior  # the mean of the kept views' logits is linear in xbar
    y = out.argmax().view(1)  # the port's torch.max(output, dim=1): the first of tied maxima
    conf = out.index_select(0, y)
    update_rows(state, y, conf, z, out, p)
    clip = Fn.clip_logits(xbar, text, s)
    return StepOut(scores=out, clip=clip, entropy=Fn.entropy(clip), feature=xbar, probs=out / out.sum())


def update_rows(
    state: dict[str, torch.Tensor], y: torch.Tensor, conf: torch.Tensor, z: torch.Tensor, out: torch.Tensor, p: Params
) -> None:
    """`update_centers` and `update_prior` of class y [1] in place, each where conf [1] is above its
    threshold (masks and row copies on the device: no host round trip):
    mu_y <- normalise((c1_y mu_y + z) / (c1_y + 1)), P_y <- (c2_y P_y + out) / (c2_y + 1), counts + 1."""
    mu, prior = state["mu"], state["prior"]
    mu_y, prior_y = mu.index_select(0, y), prior.index_select(0, y)
    c1 = state["c1"].index_select(0, y).to(mu.dtype).unsqueeze(1)
    c2 = state["c2"].index_select(0, y).to(mu.dtype).unsqueeze(1)
    centre = (c1 * mu_y + z) / (c1 + 1)
    centre = centre / torch.linalg.vector_norm(centre, dim=1, keepdim=True)
    grow1, grow2 = conf > p.threshold1, conf > p.threshold2
    mu.index_copy_(0, y, torch.where(grow1.unsqueeze(1), centre, mu_y))
    prior.index_copy_(0, y, torch.where(grow2.unsqueeze(1), (c2 * prior_y + out) / (c2 + 1), prior_y))
    state["c1"].index_add_(0, y, grow1.to(state["c1"].dtype))  # int64, or real under `decay`
    state["c2"].index_add_(0, y, grow2.to(state["c2"].dtype))


def replay(x: torch.Tensor, text: torch.Tensor, p: Params, logit_scale: float) -> StepOut:
    """A whole stream [N, V, d] (no mean shift), stepped without the engine's per-call overhead."""
    state = init(text, p, logit_scale, x.shape[0])
    with small_ops(x.device):
        outs = [step(state, xi, text, p, logit_scale, _identity) for xi in x]
    return StepOut(*(torch.stack(parts) for parts in zip(*outs)))


def _identity(v: torch.Tensor) -> torch.Tensor:
    return v
