"""OnZeta (ECCV-24): online zero-shot transfer with an online label learner (a class prior rho on the
text proxy) and an online proxy learner (a vision proxy w), combined by a growing weight.

Source: idstcv/OnZeta @ befef06d, `main_online.py` (defaults lines 24-30, the online loop lines
248-279; ImageNet only, 1 view, 7 ImageNet templates). Per step i (0-based) of a stream of n:

    lr = cw/sqrt(i+1), rlr = cr/sqrt(i+1), beta_i = beta sqrt((i+1)/n)           (lines 259-261)
    t = softmax(x W^T / tau_t) * exp(rho), t /= sum t                             (lines 263-265)
    rho <- max(rho - rlr (t - alpha/C), 0)                                         (lines 266-267)
    v = softmax(x w / tau_i); out = beta_i v + (1 - beta_i) t                      (lines 269-270)
    w <- normalise_columns(w - (lr/tau_i) x (v - t)^T)                             (lines 271-273)

The prediction is argmax(out) (`combo_label`, line 276); `probs` = out (a distribution). The
schedule needs n: `init` gets the stream's length in replay; an endless stream (length None) uses
`Params.horizon`, with beta_i = beta once i+1 >= horizon. +MS: v and the w-gradient use shift(x);
t (the text proxy's zero-shot label) stays on the raw x. docs/methods/onzeta.md has the details.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from ...checks import check_int, check_num
from ...threads import small_ops
from .. import functional as Fn
from . import onzeta_fade
from .base import Method, StepOut

NAME = "onzeta"
# Its protocol in words (`mstta.engine.protocol`): what a row predicts from when it reads V > 1 views
# ({kept}: the views its confident selection keeps, {views}: V), its Params key of that selection's
# fraction (None: no selection), and whether its CLIP reference (`StepOut.clip`) is on those views.
PREDICTS = "the original image"
SELECTION = None
CLIP_FROM_VIEWS = False

METHODS = (
    Method(
        name="onzeta",
        title="OnZeta",
        family=NAME,
        summary="online label learning (class prior on the text proxy) + online vision proxy (ECCV-24)",
    ),
    Method(
        name="onzeta+ms",
        title="OnZeta + MS",
        family=NAME,
        mean_shift=True,
        summary="OnZeta with the vision proxy's label and gradient on the mean-shifted feature",
    ),
)

# The official code runs ImageNet only, with the defaults below; TTA-VLM's port uses beta = 0.4 off
# ImageNet and alpha = 0 on Caltech101, values of unverified origin (docs/methods/onzeta.md), so no
# per-dataset values are official.
DATASET_PARAMS: dict[str, dict] = {}

MIN_TEMPERATURE = 1e-6  # tau_t, tau_i: the official 0.01, 0.04; cosines / tau stay far inside float32
MAX_TEMPERATURE = 1e3
MAX_RATE = 1e6  # cw, cr, alpha: the official 0.5, 20, 1
READS_LENGTH = True  # `init`'s schedule reads n, the stream's length (families.base)
MAX_HORIZON = 2**40  # samples; a schedule's length, never allocated


@dataclass
class Params:
    """OnZeta's hyperparameters (`engine: onzeta: {...}`); defaults = main_online.py lines 24-30."""

    tau_t: float = 0.01  # --tau_t: temperature of the text proxy's label (line 24)
    tau_i: float = 0.04  # --tau_i: temperature of the vision proxy's label (line 25)
    cw: float = 0.5  # --cw: the vision proxy's step size, lr = cw/sqrt(i+1) (line 26)
    cr: float = 20.0  # --cr: the class prior's step size, rlr = cr/sqrt(i+1) (line 27)
    alpha: float = 1.0  # --alpha: the prior's target mass per class is alpha/C (line 28)
    beta: float = 0.8  # --beta: the vision proxy's final weight, beta_i = beta sqrt((i+1)/n) (line 29)
    horizon: int = 50_000  # this project's: n of an endless stream (the official run's n, ImageNet val)

    def __post_init__(self) -> None:
        check_num(self, "tau_t", MIN_TEMPERATURE, MAX_TEMPERATURE)
        check_num(self, "tau_i", MIN_TEMPERATURE, MAX_TEMPERATURE)
        check_num(self, "cw", 0.0, MAX_RATE)
        check_num(self, "cr", 0.0, MAX_RATE)
        check_num(self, "alpha", 0.0, MAX_RATE)
        check_num(self, "beta", 0.0, 1.0)
        check_int(self, "horizon", 1, MAX_HORIZON)


def state_bytes(C: int, d: int, p: Params) -> int:
    """Bytes of one stream's state at float32: w [C, d], rho [C], two float64 counters; under
    `timeliness` (`onzeta_fade`) U [C, d] and five more vectors [C] (a, b and the dot products)."""
    return 4 * (C * d + 6 * C) + 16


def init(text: torch.Tensor, p: Params, logit_scale: float, length: int | None) -> dict[str, torch.Tensor]:
    """A fresh state: w = W (the official w = text_classifier.clone(), [d, C], kept here as its
    transpose [C, d]), rho = 0 (lines 256-257), the step index i = 0 and the schedule's n (float64:
    exact integers, and the schedule's arithmetic needs no conversion)."""
    n = length if length is not None else p.horizon
    return {
        "w": text.clone(),
        "rho": torch.zeros(text.shape[0], dtype=text.dtype, device=text.device),
        "i": torch.zeros((), dtype=torch.float64, device=text.device),
        "n": torch.tensor(float(n), dtype=torch.float64, device=text.device),
    }


FORGET = ("timeliness",)  # the forget rules this family defines beside the runner's resets (mstta.engine.forget)


def decay(state: dict[str, torch.Tensor], gamma: float, text: torch.Tensor, p: Params) -> None:
    """`forget.rule=timeliness` (the project's adaptation, no published rule; docs/methods/onzeta.md,
    "Forgetting"): before each step what the stream taught fades by gamma = exp(-1 / horizon) toward
    `init`'s values: rho <- gamma rho (the prior starts at 0), w <- normalise_rows(W + gamma (w - W))
    (the proxy starts at the text), and the step index i <- gamma i, the evidence the schedule counts
    (lr = cw/sqrt(i+1) grows back, beta_i = beta sqrt((i+1)/n) shrinks back, as after fewer samples)."""
    if not onzeta_fade.faded(state):  # held in `onzeta_fade`'s form: the fade is O(C), not a pass over w
        onzeta_fade.convert(state, text)
    onzeta_fade.fade(state, gamma)


def schedule(i: torch.Tensor, n: torch.Tensor, p: Params, dtype: torch.dtype) -> torch.Tensor:
    """[lr/tau_i, rlr, beta_i, 1 - beta_i] of step i, lines 259-261 (272's lr/tau_i, 270's 1 - beta):
    float64 as the official Python floats, then cast as PyTorch casts a Python scalar for a tensor
    op; beta_i stops growing at i+1 = n (an endless stream past its horizon). On the device: no
    host round trip."""
    step = i + 1
    root = torch.sqrt(step)
    beta = p.beta * torch.sqrt(torch.minimum(step, n) / n)
    return torch.stack([p.cw / root / p.tau_i, p.cr / root, beta, 1 - beta]).to(dtype)


def text_label(cos: torch.Tensor, rho: torch.Tensor, tau_t: float) -> torch.Tensor:
    """The online label of the text proxy, lines 263-265, from cos = x W^T: softmax(cos / tau_t) *
    exp(rho), renormalised, bit for bit while max rho stays below `exp_limit` (87 in float32). Past it
    the official product overflows (exp(rho) = inf, inf * 0 = NaN for good); here exp(rho - m),
    m = max rho - the limit, gives the same distribution (the factor cancels), softmax's underflows
    included, and where that leaves no mass, softmax(log_softmax(cos / tau_t) + rho) in log space
    (the project's departure: docs/methods/onzeta.md, "Numerics")."""
    a = cos / tau_t
    t = torch.softmax(a, dim=0) * torch.exp(rho - torch.clamp_min(rho.max() - exp_limit(rho.dtype), 0.0))
    total = t.sum()
    return torch.where(total > 0, t / total, torch.softmax(torch.log_softmax(a, dim=0) + rho, dim=0))


def exp_limit(dtype: torch.dtype) -> float:
    """The largest rho whose exp the text label takes as is: ln(the dtype's max) - 1 (87 in float32,
    708 in float64), so exp(rho) times a probability stays finite."""
    return math.floor(math.log(torch.finfo(dtype).max)) - 1.0


def update_proxy(w: torch.Tensor, z: torch.Tensor, v: torch.Tensor, t: torch.Tensor, lr_tau: torch.Tensor) -> None:
    """Lines 271-273 in place on w [C, d] (the official [d, C] transposed): w - (lr/tau_i) (v - t) z^T,
    then each row (the official column) over max(its norm, 1e-12), as F.normalize; the rank-1
    update is one pass over w (the official's outer product, scaling and subtraction are three)."""
    w.addr_((v - t) * -lr_tau, z)
    w.div_(torch.linalg.vector_norm(w, dim=1, keepdim=True).clamp_min(1e-12))


def step(
    state: dict[str, torch.Tensor],
    x: torch.Tensor,
    text: torch.Tensor,
    p: Params,
    logit_scale: float,
    shift: Callable[[torch.Tensor], torch.Tensor],
) -> StepOut:
    """One sample (view 0 only: the official runs use 1 view), the loop body of lines 258-273 (a
    faded state steps in its own form, `onzeta_fade`)."""
    if onzeta_fade.faded(state):
        return onzeta_fade.step(state, x, text, p, logit_scale, shift, (schedule, text_label))
    C = text.shape[0]
    f = x[0]
    lr_tau, rlr, beta, rest = schedule(state["i"], state["n"], p, text.dtype)
    cos = text @ f  # the zero-shot cosines: the text label's and the CLIP logits' (one pass over W)
    t = text_label(cos, state["rho"], p.tau_t)
    state["rho"] = torch.clamp_min(state["rho"] - rlr * (t - p.alpha / C), 0.0)
    z = shift(f.unsqueeze(0))[0]
    v = torch.softmax(state["w"] @ z / p.tau_i, dim=0)
    out = beta * v + rest * t
    update_proxy(state["w"], z, v, t, lr_tau)
    state["i"] += 1
    clip = logit_scale * cos
    return StepOut(scores=out, clip=clip, entropy=Fn.entropy(clip), feature=f, probs=out)


def replay(x: torch.Tensor, text: torch.Tensor, p: Params, logit_scale: float, length: int | None = None) -> StepOut:
    """A whole stream [N, V, d] (no mean shift), stepped without the engine's per-call overhead;
    equal to stepping it with `length` (None: N; a piece between resets: the whole stream's)."""
    state = init(text, p, logit_scale, x.shape[0] if length is None else length)
    with small_ops(x.device):
        outs = [step(state, xi, text, p, logit_scale, _identity) for xi in x]
    return StepOut(*(torch.stack(parts) for parts in zip(*outs)))


def _identity(v: torch.Tensor) -> torch.Tensor:
    return v
