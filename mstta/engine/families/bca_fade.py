"""BCA under `forget.rule=timeliness` in O(C) per step beyond the plain step (the project's
adaptation; docs/methods/bca.md, "Forgetting"): the same centres and prior as fading them in place
(`bca.decay`'s formulas), held in a form whose fade touches no [C, d] or [C, C] entry.

- Centre c: mu_c = a_c W_c + b_c V_c (W the text classifier, V [C, d] the evidence rows, a, b [C]).
  The fade normalise(gamma c1 mu + (1 - gamma) n1 W) is m = alpha W + beta V with alpha = gamma c1 a +
  (1 - gamma) n1, beta = gamma c1 b, and |m|^2 = alpha^2 ww + 2 alpha beta wv + beta^2 vv from the
  per-row dot products ww = W.W, wv = W.V, vv = V.V: a, b <- alpha / |m|, beta / |m|, O(C). The port's
  update normalise(c1 mu_y + z) folds b_y into V_y: V_y <- c1 b_y V_y + z, m_y = c1 a_y W_y + V_y (O(d)).
- Prior row c: P_c = (n2 e_c + s E_c) / c2_c with one scale s = gamma^t for every row: the fade of
  the evidence is s <- gamma s (O(1)); the update P_y <- (c2 P_y + out) / (c2 + 1) is E_y += out / s.
  When s falls below RESCALE, E <- s E and s <- 1 (one [C, C] pass per ~46 horizons): nothing
  under- or overflows in float32. Rows without evidence (c2 = n2) are e_c, as `bca.decay` leaves them.
"""

from __future__ import annotations

from typing import Callable

import torch

from .. import functional as Fn
from .base import StepOut

RESCALE = 1e-20  # the prior's scale s is folded into its evidence below this (float32 keeps 1e38 / steps)


def faded(state: dict) -> bool:
    """Whether a BCA state is in this module's form (`bca.decay` converts it at its first fade)."""
    return "V" in state


def convert(state: dict, text: torch.Tensor, n2: float) -> None:
    """A plain state (`bca.init`'s mu, prior) in this form: mu = 0 W + 1 V, V = mu; E = c2 P - n2 I
    (zero on rows without evidence), s = 1; the counts real."""
    mu, prior = state.pop("mu"), state.pop("prior")
    c1, c2 = state["c1"].to(mu.dtype), state["c2"].to(mu.dtype)
    evidence = c2.unsqueeze(1) * prior
    evidence.diagonal().sub_(n2)
    evidence[c2 <= n2] = 0.0
    state.update(a=torch.zeros_like(c1), b=torch.ones_like(c1), V=mu, E=evidence, scale=1.0, c1=c1, c2=c2)
    state.update(ww=(text * text).sum(1), wv=(text * mu).sum(1), vv=(mu * mu).sum(1))


def length(alpha: torch.Tensor, beta: torch.Tensor, state: dict) -> torch.Tensor:
    """|alpha W + beta V| per row, from the per-row dot products ww, wv, vv."""
    sq = alpha * torch.addcmul(alpha * state["ww"], beta, state["wv"], value=2.0)
    return sq.addcmul_(beta * beta, state["vv"]).sqrt_()


def fade(state: dict, gamma: float, n1: float, n2: float) -> None:
    """`bca.decay` in this form, O(C): the centres' coefficients, the counts and the prior's scale.
    A row without evidence (c1 = n1: mu = W) keeps its direction through the formula when n1 > 0;
    at n1 = 0 it is masked, as `bca.decay` masks it."""
    c1 = state["c1"]
    alpha = (c1 * state["a"]).mul_(gamma).add_((1 - gamma) * n1)
    beta = (c1 * state["b"]).mul_(gamma)
    if n1 == 0:
        seen = c1 > 0
        alpha, beta = torch.where(seen, alpha, state["a"]), torch.where(seen, beta, state["b"])
    m = length(alpha, beta, state)
    state["a"], state["b"] = alpha.div_(m), beta.div_(m)
    c1.mul_(gamma).add_((1 - gamma) * n1)
    state["c2"].mul_(gamma).add_((1 - gamma) * n2)
    state["scale"] *= gamma
    if state["scale"] < RESCALE:
        state["E"].mul_(state["scale"])
        state["scale"] = 1.0


def centres(state: dict, text: torch.Tensor) -> torch.Tensor:
    """The centres mu [C, d] this form holds, materialised (two passes: cheaper than a second [V, d] x
    [d, C] product where V > 1 views are scored)."""
    return torch.addcmul(state["a"].unsqueeze(1) * text, state["b"].unsqueeze(1), state["V"])


def prior(state: dict, n2: float) -> torch.Tensor:
    """The prior P [C, C] this form holds (materialised: for tests and inspection)."""
    seen = (state["c2"] > n2).unsqueeze(1)
    p = torch.where(seen, state["scale"] * state["E"], 0.0)
    p.diagonal().add_(torch.where(seen[:, 0], n2, 1.0))
    return p / torch.where(seen, state["c2"].unsqueeze(1), 1.0)


def posterior(state: dict, pi: torch.Tensor, n2: float) -> torch.Tensor:
    """pi P for the likelihood pi [C]: n2 pi / c2 + s (pi / c2) E, one [C, C] pass as the plain step's
    pi P (at n2 = 0 a row without evidence, c2 = 0, is e_c: its pi_c passes through)."""
    c2 = state["c2"]
    if n2 == 0:
        seen = c2 > 0
        r = torch.where(seen, pi / c2, 0.0)
        return torch.addmv(torch.where(seen, 0.0, pi), state["E"].T, r, alpha=state["scale"])
    r = pi / c2
    return torch.addmv(r, state["E"].T, r, beta=n2, alpha=state["scale"])


def step(
    state: dict,
    x: torch.Tensor,
    text: torch.Tensor,
    p,
    logit_scale: float,
    shift: Callable[[torch.Tensor], torch.Tensor],
    confident_mean: Callable,
) -> StepOut:
    """`bca.step` in this form: the kept views' mean, the posterior, the updates; the zero-shot
    logits share the pass over W with the likelihood."""
    s = logit_scale
    xbar = x[0] if x.shape[0] == 1 else confident_mean(x, s * (x @ centres(state, text).T), p.selection_p)
    z = shift(xbar.unsqueeze(0))[0]
    both = torch.stack([z, xbar]) @ text.T  # [z W^T, xbar W^T]: one pass over W
    cos = torch.addcmul(state["a"] * both[0], state["b"], state["V"] @ z)
    out = posterior(state, torch.softmax(s * cos, dim=0), float(p.init_count2))
    y = out.argmax().view(1)  # the port's torch.max: the first of tied maxima
    update(state, y, out.index_select(0, y), z, out, p, text)
    clip = s * both[1]
    return StepOut(scores=out, clip=clip, entropy=Fn.entropy(clip), feature=xbar, probs=out / out.sum())


def update(state: dict, y: torch.Tensor, conf: torch.Tensor, z: torch.Tensor, out: torch.Tensor, p, text) -> None:
    """`bca.update_rows` in this form, class y [1], with 0/1 masks g (no host round trip): m_y =
    c1 mu_y + g1 z = c1 a_y W_y + V_y', V_y' = c1 b_y V_y + g1 z (at g1 = 0 normalise(m_y) is mu_y),
    a_y, b_y <- c1 a_y / |m_y|, 1 / |m_y| (O(d)); the prior row E_y += g2 out / s (O(C)); counts + g."""
    g1 = (conf > p.threshold1).to(out.dtype)
    g2 = (conf > p.threshold2).to(out.dtype)
    c1 = state["c1"].index_select(0, y)
    v = torch.addcmul(state["V"].index_select(0, y) * (c1 * state["b"].index_select(0, y)).unsqueeze(1), g1, z)
    alpha = c1 * state["a"].index_select(0, y)
    vv, wv = torch.linalg.vecdot(v, v), torch.linalg.vecdot(v, text.index_select(0, y))
    m = (alpha * state["ww"].index_select(0, y)).add_(wv, alpha=2.0).mul_(alpha).add_(vv).sqrt_()
    state["a"].index_copy_(0, y, alpha / m)
    state["b"].index_copy_(0, y, m.reciprocal())
    state["V"].index_copy_(0, y, v)
    state["vv"].index_copy_(0, y, vv)
    state["wv"].index_copy_(0, y, wv)
    state["E"].index_add_(0, y, (out * (g2 / state["scale"])).unsqueeze(0))
    state["c1"].index_add_(0, y, g1)
    state["c2"].index_add_(0, y, g2)
