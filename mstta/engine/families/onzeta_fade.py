"""OnZeta under `forget.rule=timeliness` with an O(C) fade (the project's adaptation;
docs/methods/onzeta.md, "Forgetting"): the same proxy as fading it in place (`onzeta.decay`'s
normalise_rows(W + gamma (w - W))), held in a form whose fade touches no [C, d] entry.

The proxy's row c is w_c = a_c W_c + b_c U_c (W the text classifier, U [C, d], a, b [C]), unit by
construction: |alpha W + beta U|^2 = alpha^2 ww + 2 alpha beta wu + beta^2 uu from the per-row dot
products ww = W.W, wu = W.U, uu = U.U. The fade is alpha = gamma a + 1 - gamma, beta = gamma b
(|w| = 1), then a, b <- alpha / m, beta / m: O(C). The step's update w - (lr / tau_i) (v - t) z^T
(main_online.py lines 271-273) is U <- b U + g z^T, g = -(lr / tau_i)(v - t) (two passes over U),
with wu, uu carried from the step's own products W z and U z, then a, b <- a / m, 1 / m: with the
text label's x W^T and the label's U z, four passes over [C, d] a step where the plain step makes five.
"""

from __future__ import annotations

from typing import Callable

import torch

from .. import functional as Fn
from .base import StepOut


def faded(state: dict) -> bool:
    """Whether an OnZeta state is in this module's form (`onzeta.decay` converts it at its first fade)."""
    return "U" in state


def convert(state: dict, text: torch.Tensor) -> None:
    """A plain state's proxy w in this form: a = 0, b = 1, U = w."""
    w = state.pop("w")
    state.update(a=torch.zeros_like(state["rho"]), b=torch.ones_like(state["rho"]), U=w)
    state.update(ww=torch.linalg.vecdot(text, text), wu=torch.linalg.vecdot(text, w), uu=torch.linalg.vecdot(w, w))


def length(alpha: torch.Tensor, beta: torch.Tensor, state: dict) -> torch.Tensor:
    """|alpha W + beta U| per row (at least 1e-12, as F.normalize), from the per-row dot products."""
    sq = alpha * torch.addcmul(alpha * state["ww"], beta, state["wu"], value=2.0)
    return sq.addcmul_(beta * beta, state["uu"]).sqrt_().clamp_min_(1e-12)


def fade(state: dict, gamma: float) -> None:
    """`onzeta.decay` in this form, O(C): w <- normalise_rows(W + gamma (w - W)), rho and i scaled."""
    alpha = (state["a"] * gamma).add_(1 - gamma)
    beta = state["b"] * gamma
    m = length(alpha, beta, state)
    state["a"], state["b"] = alpha.div_(m), beta.div_(m)
    state["rho"].mul_(gamma)
    state["i"].mul_(gamma)


def proxy(state: dict, text: torch.Tensor) -> torch.Tensor:
    """The proxy w [C, d] this form holds (materialised: for tests and inspection)."""
    return state["a"].unsqueeze(1) * text + state["b"].unsqueeze(1) * state["U"]


def step(state: dict, x: torch.Tensor, text: torch.Tensor, p, logit_scale: float, shift: Callable, parts) -> StepOut:
    """`onzeta.step` in this form (`parts`: onzeta's `schedule` and `text_label`)."""
    schedule, text_label = parts
    C, f = text.shape[0], x[0]
    lr_tau, rlr, beta, rest = schedule(state["i"], state["n"], p, text.dtype)
    z = shift(f.unsqueeze(0))[0]
    both = torch.stack([f, z]) @ text.T  # [x W^T, z W^T]: one pass over W
    t = text_label(both[0], state["rho"], p.tau_t)
    state["rho"] = torch.clamp_min(state["rho"] - rlr * (t - p.alpha / C), 0.0)
    uz = state["U"] @ z
    a, b = state["a"], state["b"]
    v = torch.softmax(torch.addcmul(a * both[1], b, uz) / p.tau_i, dim=0)
    out = beta * v + rest * t
    g = (v - t) * -lr_tau
    state["U"].mul_(b.unsqueeze(1)).addr_(g, z)
    state["uu"] = (b * b * state["uu"]).addcmul_(g, b * uz, value=2.0).addcmul_(g * g, torch.linalg.vecdot(z, z))
    state["wu"] = torch.addcmul(b * state["wu"], g, both[1])
    m = length(a, torch.ones_like(b), state)
    state["a"], state["b"] = a / m, m.reciprocal()
    state["i"] += 1
    clip = logit_scale * both[0]
    return StepOut(scores=out, clip=clip, entropy=Fn.entropy(clip), feature=f, probs=out)
