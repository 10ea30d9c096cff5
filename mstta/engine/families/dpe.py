"""DPE, Dual Prototype Evolution (Zhang et al., NeurIPS 2024), as its official code runs it:
zhangce01/DPE-CLIP @ fecae5a5, `main_dpe.py` `run_test_dpe` (and `update_cache`, `cache_key_value`,
`compute_cache_logits`, `TextResidue`, `PositiveCacheResidue`, `InfoNCELoss`), `utils.py`
(`get_clip_logits`, `avg_entropy`, `get_entropy`), `configs/*.yaml`.

Per sample (docs/methods/dpe.md gives the equations and the sources line by line):
  1. W' = normalise(W_g) (global text prototypes, evolved); the confident views (the
     floor(0.1 V), at least one, lowest-entropy views under W') give the mean feature x (not
     re-normalised), the mean logits l and the entropy H of their averaged probabilities.
  2. TDA's positive cache (3 per class) takes (x, H / log2 C) for the class argmax l; the keys are
     the per-class means of the cached features, K' = normalise(K).
  3. Residuals r_t [C, d] of the text and r_k [m, d] of the m cached keys start at zero with a
     fresh AdamW; loss = entropy(softmax(l + alpha exp(-beta(1 - x K'^T)) Y))
     + align * InfoNCE(K', W'[cached], tau = 0.01); ONE AdamW step. From zero parameters and a
     fresh optimiser that step is r = -lr g / (|g| + eps) elementwise (`adamw_first_step`), and g
     is written out analytically (`residual_grads`; the tests check it against autograd and the
     reference runs torch.optim.AdamW itself).
  4. Prediction on view 0 (the confident views again, under the new prototypes, on ImageNet-A:
     `infer_confident`): 100 x0 W*^T + alpha exp(-beta(1 - x0 K*^T)) Y, W* = normalise(W_g + r_t),
     K* = normalise(K + r_k); when its entropy / log2 C < 0.1, W_g <- cumulative average with W*.

Not training-free: every output carries the row's "not training-free" mark. +MS: the feature
written to the cache and both cache queries go through `shift`; the CLIP logits stay raw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...checks import MAX_WEIGHT, check, check_int, check_num
from .. import functional as Fn
from ..cache_rules import EMPTY_TIME
from ..slot_forget import RULE_KEY, expiry_due, idle_slots, mark_used, note_soonest, timeliness_pick
from .base import Method, StepOut

NAME = "dpe"
# Its protocol in words (`mstta.engine.protocol`): what a row predicts from when it reads V > 1 views
# ({kept}: the views its confident selection keeps, {views}: V), its Params key of that selection's
# fraction (None: no selection), and whether its CLIP reference (`StepOut.clip`) is on those views.
PREDICTS = "the original image, with a cache of its {kept} most confident views' mean"
SELECTION = "ratio"
CLIP_FROM_VIEWS = True

_SUMMARY = (
    "DPE: evolving text prototypes and a 3-shot cache, refined by one AdamW step on "
    "feature-level residuals per sample (NeurIPS-24)"
)
METHODS = (
    Method(name="dpe", title="DPE", summary=_SUMMARY, family=NAME, training_free=False, views="augmix64-imagenet"),
    Method(
        name="dpe+ms",
        title="DPE + MS",
        family=NAME,
        mean_shift=True,
        training_free=False,
        views="augmix64-imagenet",
        summary="DPE with mean-shifted cache keys and queries (plug-in)",
    ),
)

MAX_LR = 1.0  # AdamW's first step moves a residual by ~lr per dimension: 1 already replaces a unit feature


@dataclass
class Params:
    """DPE's hyperparameters (`engine: dpe: {...}`); defaults = configs/imagenet.yaml and the
    constants of main_dpe.py / utils.py. AdamW's weight decay (0.1) and betas are not fields: on
    the one step from zero parameters they cancel (docs/methods/dpe.md)."""

    alpha: float = 6.0  # configs/imagenet.yaml positive.alpha: weight of the cache logits
    beta: float = 5.0  # positive.beta: sharpness of exp(-beta (1 - affinity))
    capacity: int = 3  # positive.shot_capacity (3 in every config)
    lr_text: float = 6e-4  # learning_rate.text: AdamW lr of the text residual
    lr_image: float = 6e-4  # learning_rate.image: AdamW lr of the cache-key residual
    align: float = 0.5  # learning_rate.align: weight of the InfoNCE alignment loss
    tau: float = 0.01  # main_dpe.py InfoNCELoss: InfoNCE(temperature=0.01)
    eps: float = 1e-3  # run_test_dpe: AdamW(..., 'eps': 1e-3) for both groups
    ratio: float = 0.1  # utils.py get_clip_logits: int(V * 0.1) lowest-entropy views (here >= 1)
    threshold: float = 0.1  # run_test_dpe: evolve W_g when get_entropy(loss) < 0.1 (entropy / log2 C)
    infer_confident: bool = False  # run_test_dpe `if dataset_name == 'A'`: predict from the confident views

    def __post_init__(self) -> None:
        for key in ("alpha", "beta", "align"):
            check_num(self, key, 0.0, MAX_WEIGHT)
        check_int(self, "capacity", 1, 256)
        for key in ("lr_text", "lr_image"):
            check_num(self, key, 0.0, MAX_LR)
        check_num(self, "tau", 0.0, MAX_WEIGHT, low_open=True)
        check_num(self, "eps", 0.0, 1.0, low_open=True)
        check_num(self, "ratio", 0.0, 1.0, low_open=True)
        check_num(self, "threshold", 0.0, 1.0)  # H / log2 C is at most ln 2
        check(isinstance(self.infer_confident, bool), "infer_confident", self.infer_confident, "true or false")


def _config(alpha, beta, lr, align, **extra) -> dict:
    return dict(alpha=alpha, beta=beta, lr_text=lr, lr_image=lr, align=align, **extra)


# zhangce01/DPE-CLIP @ fecae5a5 configs/<file>.yaml (positive.alpha, positive.beta, learning_rate.
# text = .image, learning_rate.align; shot_capacity 3 everywhere), keyed by this project's datasets;
# ImageNet-A also predicts from its confident views (main_dpe.py `if dataset_name == 'A'`).
DATASET_PARAMS: dict[str, dict] = {
    "imagenet": _config(6.0, 5.0, 6e-4, 0.5),  # imagenet.yaml
    "imagenet_a": _config(6.0, 5.0, 3e-4, 2.5, infer_confident=True),  # imagenet_a.yaml
    "imagenet_v2": _config(3.0, 8.0, 5e-4, 0.5),  # imagenet_v.yaml
    "imagenet_r": _config(3.0, 8.0, 6e-4, 0.0),  # imagenet_r.yaml
    "imagenet_sketch": _config(7.0, 7.45, 6e-4, 0.2),  # imagenet_s.yaml
    "fgvc_aircraft": _config(6.0, 2.0, 6e-4, 0.2),  # fgvc.yaml
    "caltech101": _config(15.0, 5.0, 6e-4, 0.2),  # caltech101.yaml
    "stanford_cars": _config(3.0, 7.0, 1e-4, 1.5),  # stanford_cars.yaml
    "dtd": _config(6.0, 3.0, 6e-4, 0.2),  # dtd.yaml
    "eurosat": _config(3.0, 8.0, 5e-5, 0.2),  # eurosat.yaml
    "oxford_flowers": _config(2.5, 5.0, 1e-4, 0.2),  # oxford_flowers.yaml
    "food101": _config(3.0, 1.0, 2e-4, 0.2),  # food101.yaml
    "oxford_pets": _config(4.0, 7.0, 5e-5, 0.2),  # oxford_pets.yaml
    "sun397": _config(6.0, 3.0, 2e-4, 0.2),  # sun397.yaml
    "ucf101": _config(9.0, 8.0, 4e-4, 0.2),  # ucf101.yaml
}


def state_bytes(C: int, d: int, p: Params) -> int:
    """Bytes of one stream's state at float32: W_g and the cache keys [C, d], the cache [C, Q, d]
    and its entropies [C, Q], the prototype norms [C] and the average count."""
    Q = p.capacity
    return 4 * (C * d * (2 + Q) + C * (Q + 1)) + 8


def init(text: torch.Tensor, p: Params, logit_scale: float, length: int | None) -> dict[str, torch.Tensor]:
    """A fresh stream: W_g = the text (run_test_dpe `clip_weights_global = clip_weights.clone()`),
    an empty cache (+inf entropies), no average yet."""
    C, d = text.shape
    Q = p.capacity
    wg = text.clone()
    return {
        "wg": wg,
        "wnorm": wg.norm(dim=-1).clamp_min(1e-12),
        "feats": text.new_zeros(C, Q, d),
        "ent": text.new_full((C, Q), math.inf),
        "keys": text.new_zeros(C, d),
        "num_avg": torch.zeros((), dtype=torch.long, device=text.device),
    }


def confident(x: torch.Tensor, w: torch.Tensor, scale, ratio: float):
    """utils.py `get_clip_logits`: logits (x W^T) * scale of every view (scale a number, or [C] =
    100 / |W_c| for rows not unit), then of V > 1 views the floor(ratio V) (at least 1, stable
    order) lowest-entropy ones. [V, d], [C, d] -> (mean feature [d], not re-normalised; mean
    logits [C]; entropy of the mean probabilities, 0-d)."""
    logits = (x @ w.T) * scale
    if x.shape[0] == 1:
        return x[0], logits[0], Fn.entropy(logits[0])
    f, l, h, _ = Fn.aggregate_views(x.unsqueeze(0), logits.unsqueeze(0), ratio)
    return f[0], l[0], h[0]


def cache_logits(a: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """main_dpe.py `compute_cache_logits` per cached class, affinities a = q K'^T [m]: alpha exp(-(beta - beta a))."""
    return alpha * torch.exp(-(beta - beta * a))


def tangent(g: torch.Tensor, unit: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
    """The gradient through F.normalize(v) at v = norm * unit: (g - unit (unit . g)) / |v|. [n, d] rows."""
    return (g - unit * (unit * g).sum(-1, keepdim=True)) / norm.unsqueeze(-1)


def infonce_grads(a: torch.Tensor, b: torch.Tensor, tau: float):
    """d/dA, d/dB of info_nce (RElbers/info-nce-pytorch, no negative keys, mean reduction:
    cross_entropy(A B^T / tau, arange)) at unit rows A, B [m, d]: G = (softmax(A B^T / tau) - I) / m,
    dA = G B / tau, dB = G^T A / tau. (The package's own re-normalisation of unit rows adds nothing.)"""
    g = torch.softmax((a @ b.T) / tau, dim=-1)
    g.diagonal().sub_(1.0)
    g.div_(a.shape[0] * tau)
    return g @ b, g.T @ a


def residual_grads(f, q, l, wg, wnorm, cls, keys, knorm, p: Params, scale: float):
    """Gradients at zero residuals of run_test_dpe's loss, avg_entropy(final) + align * InfoNCE:
    f raw mean feature [d] (CLIP term), q the cache query [d], l = scale f W'^T [C] with
    W' = normalise(W_g), W_g = wg [C, d] of row norms wnorm, the cached classes cls [m] with keys
    [m, d] of norms knorm, K' = normalise(keys) -> (g_text [C, d], g_keys [m, d]).

    Through normalise(v) at v = |v| v' a gradient g becomes (g - v' (v' . g)) / |v| (`tangent`),
    so the entropy term's rows are two scaled vectors each: text row c (scale f - l_c w'_c) u_c / |W_g,c|,
    key j (q - a_j k'_j) beta u_j alpha e_j / |k_j| (a = K' q, u = dH/dfinal)."""
    a = (keys @ q) / knorm
    e = cache_logits(a, p.alpha, p.beta)
    logp = torch.log_softmax(l.index_add(0, cls, e), dim=-1)
    prob = logp.exp()
    u = -prob * (logp + (-(prob * logp).sum()))  # dH/dfinal of H = -sum p log p
    coef = u / wnorm
    g_text = wg * (-(coef * l) / wnorm).unsqueeze(-1)
    g_text.addr_(coef * scale, f)
    coef = p.beta * u[cls] * e / knorm
    g_keys = keys * (-(coef * a) / knorm).unsqueeze(-1)
    g_keys.addr_(coef, q)
    if p.align != 0 and cls.numel() > 1:  # one class: InfoNCE's gradient is exactly zero
        wn, kn = wg[cls] / wnorm[cls].unsqueeze(-1), keys / knorm.unsqueeze(-1)
        da, db = infonce_grads(kn, wn, p.tau)
        g_keys.add_(tangent(da, kn, knorm), alpha=p.align)
        g_text.index_add_(0, cls, tangent(db, wn, wnorm[cls]), alpha=p.align)
    return g_text, g_keys


def adamw_first_step(w: torch.Tensor, g: torch.Tensor, lr: float, eps: float) -> torch.Tensor:
    """w + r, r = torch.optim.AdamW's first step on a zero parameter with fresh state: the decay
    multiplies zero; exp_avg = (1-b1) g, exp_avg_sq = (1-b2) g^2, and the bias corrections 1-b1 and
    sqrt(1-b2) cancel them: r = -lr g / (|g| + eps)."""
    return torch.addcdiv(w, g, g.abs().add_(eps), value=-lr)


FORGET = ("timeliness", "idle")  # the slot rules on the cache (mstta.engine.slot_forget), beside the resets
SLOTS = "ent"  # the state's [C, Q] slot entropies: the runner adds the slot clocks beside them


def decay(state: dict, gamma: float, text: torch.Tensor, p: Params) -> None:
    """`forget.rule=timeliness` on DPE's one accumulator beside the cache (the project's adaptation):
    W_g is the mean of the text (weight 1) and the num_avg evolved prototypes W* (`run_test_dpe`'s
    cumulative average), so (n + 1) W_g = W + E; before each step E and n fade by gamma = exp(-1 /
    horizon): W_g <- (W + gamma ((n + 1) W_g - W)) / (gamma n + 1), n <- gamma n (a real number).
    The two weights, gamma (n + 1) / (gamma n + 1) and (1 - gamma) / (gamma n + 1), sum to 1: one
    in-place lerp toward W, then the row norms (two passes over W_g); n is read as a number (the
    step reads the host anyway: its cache is a host-sorted list)."""
    wg, n = state["wg"], float(state["num_avg"])
    wg.lerp_(text, (1 - gamma) / (gamma * n + 1))
    torch.linalg.vector_norm(wg, dim=-1, out=state["wnorm"]).clamp_min_(1e-12)
    state["num_avg"] = torch.full((), n * gamma, dtype=wg.dtype, device=wg.device)


def _rows(state: dict) -> tuple[str, ...]:
    """The state's per-slot rows, which move together when the list is reordered (under `idle` also
    the entries' norms, `slot_norms`)."""
    rows = ("feats", "ent", "time", "used") if RULE_KEY in state else ("feats", "ent")
    return (*rows, "norm") if "norm" in state else rows


def slot_norms(state: dict) -> torch.Tensor:
    """[C, Q] |e| of every cached entry (1 where empty), kept beside the cache under the idle rule
    (made at its first step, from the cache then), so its use weights read the entries in one pass."""
    if "norm" not in state:
        live = torch.isfinite(state["ent"])
        state["norm"] = torch.where(live, torch.linalg.vector_norm(state["feats"], dim=-1).clamp_min(1e-12), 1.0)
    return state["norm"]


def insert(state: dict, c: int, key: torch.Tensor, h: float, capacity: int) -> None:
    """main_dpe.py `update_cache` (TDA's): append while short, else replace the last (highest-entropy)
    entry iff h is strictly lower (under `forget.rule=timeliness`: the entry of highest RoTTA score,
    ties to the latest inserted as TDA's, if it beats the newcomer's; entropies H / log2 C, so
    ln_c = ln 2); the list stays sorted by entropy (stable). Then the class key."""
    rule = state.get(RULE_KEY)
    ent = state["ent"][c]
    row = ent.tolist()
    n = sum(math.isfinite(e) for e in row)
    if n == capacity:
        j = n - 1 if h < row[-1] else -1
        if rule is not None and rule.rule == "timeliness":
            when = state["time"][c].tolist()
            j = timeliness_pick(row, when, h, int(state["clock"]), rule, math.log(2), when)
        if j < 0:
            return
        for name in _rows(state):  # the entry leaves the list
            state[name][c, j : n - 1] = state[name][c, j + 1 : n].clone()
        n -= 1
        row = ent.tolist()
    at = sum(e <= h for e in row[:n])  # sorted() is stable: after every entry of equal entropy
    for name in _rows(state):
        state[name][c, at + 1 : n + 1] = state[name][c, at:n].clone()
    state["feats"][c, at], ent[at] = key, h
    if "norm" in state:
        state["norm"][c, at] = torch.linalg.vector_norm(key).clamp_min(1e-12)
    if rule is not None:
        state["time"][c, at] = state["used"][c, at] = state["clock"]
    class_key(state, c, n + 1)


def class_key(state: dict, c: int, n: int) -> None:
    """main_dpe.py `cache_key_value`'s prototype of class c: the mean of its n entries, summed in the
    list's order (`image_prototype += item[0] / num_items`); zero when empty."""
    feats = state["feats"][c]
    k = torch.zeros_like(feats[0])
    for s in range(n):
        k += feats[s] / n
    state["keys"][c] = k


def expire(state: dict, rule) -> None:
    """The idle rule before a step: the entries unused for `rule.idle` steps leave their class's list
    (the others keep their order), and the class key is the mean of the rest. Only at a step where
    one may (`expiry_due`)."""
    if not expiry_due(state):
        return
    slot_norms(state)
    gone = idle_slots(state, torch.isfinite(state["ent"]), rule)
    for c in gone.any(1).nonzero().flatten().tolist():
        n = int(torch.isfinite(state["ent"][c]).sum())
        keep = (~gone[c, :n]).nonzero().flatten()
        k = len(keep)
        for name, empty in (
            ("feats", 0.0),
            ("ent", math.inf),
            ("time", EMPTY_TIME),
            ("used", EMPTY_TIME),
            ("norm", 1.0),
        ):
            row = state[name][c]
            row[:k] = row[keep].clone()
            row[k:n] = empty
        class_key(state, c, k)
    note_soonest(state, torch.isfinite(state["ent"]), rule)


def step(state: dict, x: torch.Tensor, text: torch.Tensor, p: Params, logit_scale: float, shift) -> StepOut:
    """One sample of run_test_dpe (module doc, steps 1-4); updates `state` in place."""
    scale = logit_scale
    log2c = math.log2(text.shape[0])
    rule = state.get(RULE_KEY)
    if rule is not None and rule.rule == "idle":
        expire(state, rule)
    wg, wnorm = state["wg"], state["wnorm"]
    f, l, h = confident(x, wg, scale / wnorm, p.ratio)  # under W' = normalise(W_g)
    q = shift(f.unsqueeze(0))[0]
    insert(state, int(l.argmax()), q, float(h) / log2c, p.capacity)
    cls = torch.isfinite(state["ent"][:, 0]).nonzero().squeeze(-1)  # sorted(cache.keys())
    keys = state["keys"][cls]
    knorm = torch.linalg.vector_norm(keys, dim=-1).clamp_min_(1e-12)
    g_text, g_keys = residual_grads(f, q, l, wg, wnorm, cls, keys, knorm, p, scale)
    v = adamw_first_step(wg, g_text, p.lr_text, p.eps)  # W_g + r_t; W* = normalise(v)
    vnorm = torch.linalg.vector_norm(v, dim=-1).clamp_min_(1e-12)
    k = adamw_first_step(keys, g_keys, p.lr_image, p.eps)  # K + r_k; K* = normalise(k)
    if p.infer_confident:
        fi, li, _ = confident(x, v, scale / vnorm, p.ratio)
    else:
        fi = x[0]
        li = (v @ fi) * (scale / vnorm)
    qi = shift(fi.unsqueeze(0))[0]
    a = (k @ qi) / torch.linalg.vector_norm(k, dim=-1).clamp_min_(1e-12)
    scores = li.index_add(0, cls, cache_logits(a, p.alpha, p.beta))
    logp = torch.log_softmax(scores, dim=-1)
    probs = logp.exp()
    if float(-(probs * logp).sum()) / log2c < p.threshold:  # cumulative average of the prototypes
        state["num_avg"] += 1
        n = float(state["num_avg"])  # an integer, or real under `decay`
        wg.mul_(n / (n + 1)).addcdiv_(v, (vnorm * (n + 1)).unsqueeze(-1))  # + W* / (n + 1)
        torch.linalg.vector_norm(wg, dim=-1, out=wnorm).clamp_min_(1e-12)
    if rule is not None:
        if rule.rule == "idle":  # the cache's largest kernel weight exp(-beta (1 - q e / |e|)): its largest
            cos = (state["feats"] @ qi).div_(slot_norms(state)) if p.beta > 0 else torch.zeros_like(state["ent"])
            mark_used(state, cos, torch.isfinite(state["ent"]))  # cosine (at beta = 0 all weigh 1: the first)
        state["clock"] += 1
    if p.infer_confident:
        _, clip, ent = confident(x, text, scale, p.ratio)
    else:
        clip = Fn.clip_logits(x[0], text, scale)
        ent = Fn.entropy(clip)
    return StepOut(scores, clip, ent, f, probs)
