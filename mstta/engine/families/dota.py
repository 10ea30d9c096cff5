"""DOTA (NeurIPS-25, skylineeeeen/DOTA): an online Gaussian discriminant over the test stream, fused
with CLIP's zero-shot logits. The authors' code (`dota.py` class `DOTA`, `run_test_dota`, `main`;
`utils.py` `get_clip_logits_aug`) as it runs, per sample:

    X, Y = the int(0.1 V) lowest-entropy views (at least 1) and their softmax rows; clip = mean logits
    dota = xbar Lambda M - 1/2 diag(M^T Lambda M)           (`DOTA.predict`, before the update)
    final = clip + min(rho mean_k c_k / |X|, eta) dota      (`run_test_dota`)
    fit(X, Y): mu_k, c_k and Sigma_k updated with soft labels (`DOTA.fit`)
    Lambda = inv((1 - epsilon) mean_k Sigma_k + epsilon I)  (`DOTA.update`)

Initialised as `main` does it: mu_k = 0.001 * ones (a constant, not the text), c_k = 1,
Sigma_k = sigma I, Lambda = pinv(sigma I). The state keeps the scatter S_k = c_k Sigma_k in place of
Sigma_k: the official update Sigma_k <- (c_k Sigma_k + Delta_k) / (c_k + s_k), c_k <- c_k + s_k is
exactly S_k <- S_k + Delta_k, one in-place batched rank-|X| update (no C x d x d temporary), and
mean_k Sigma_k = mean_k S_k / c_k is one pass over S. docs/methods/dota.md has the details.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...checks import check, check_num
from .. import functional as Fn
from .base import Method, StepOut

NAME = "dota"
# Its protocol in words (`mstta.engine.protocol`): what a row predicts from when it reads V > 1 views
# ({kept}: the views its confident selection keeps, {views}: V), its Params key of that selection's
# fraction (None: no selection), and whether its CLIP reference (`StepOut.clip`) is on those views.
PREDICTS = "the mean logits of its {kept} most confident views + a Gaussian discriminant fit on them"
SELECTION = "view_ratio"
CLIP_FROM_VIEWS = True

METHODS = (
    Method(
        name="dota",
        title="DOTA",
        family=NAME,
        summary="DOTA: CLIP + an online Gaussian discriminant (soft-label class means and covariances)",
    ),
    Method(
        name="dota+ms",
        title="DOTA + MS",
        family=NAME,
        mean_shift=True,
        summary="DOTA fitted on mean-shifted views and predicting from the shifted view mean (plug-in)",
    ),
)

PRECISIONS = ("float", "official")
MAX_VALUE = 1e6  # generous finite bound of eta, rho and sigma (the official configs: <= 3)

# Per-dataset ViT-B/16 values: skylineeeeen/DOTA configs/vit/<name>.yaml (imagenet_v -> imagenet_v2,
# imagenet_s -> imagenet_sketch, fgvc -> fgvc_aircraft); sigma is 0.002 in every file.
DATASET_PARAMS: dict[str, dict] = {
    "imagenet": {"epsilon": 1e-4, "sigma": 0.002, "eta": 0.2, "rho": 0.005},
    "imagenet_a": {"epsilon": 1e-4, "sigma": 0.002, "eta": 0.5, "rho": 0.02},
    "imagenet_v2": {"epsilon": 1e-4, "sigma": 0.002, "eta": 0.1, "rho": 0.01},
    "imagenet_r": {"epsilon": 1e-4, "sigma": 0.002, "eta": 0.3, "rho": 0.0025},
    "imagenet_sketch": {"epsilon": 1e-4, "sigma": 0.002, "eta": 0.8, "rho": 0.03},
    "caltech101": {"epsilon": 0.002, "sigma": 0.002, "eta": 0.3, "rho": 0.02},
    "dtd": {"epsilon": 1e-4, "sigma": 0.002, "eta": 0.3, "rho": 0.02},
    "eurosat": {"epsilon": 1e-4, "sigma": 0.002, "eta": 3.0, "rho": 0.05},
    "fgvc_aircraft": {"epsilon": 1e-4, "sigma": 0.002, "eta": 0.2, "rho": 0.01},
    "food101": {"epsilon": 4e-5, "sigma": 0.002, "eta": 0.1, "rho": 0.01},
    "oxford_flowers": {"epsilon": 1e-4, "sigma": 0.002, "eta": 0.2, "rho": 0.02},
    "oxford_pets": {"epsilon": 1e-4, "sigma": 0.002, "eta": 0.3, "rho": 0.02},
    "stanford_cars": {"epsilon": 1e-4, "sigma": 0.002, "eta": 0.3, "rho": 0.01},
    "sun397": {"epsilon": 1e-4, "sigma": 0.002, "eta": 0.2, "rho": 0.01},
    "ucf101": {"epsilon": 1e-4, "sigma": 0.002, "eta": 0.4, "rho": 0.02},
}


@dataclass
class Params:
    """DOTA's hyperparameters (`EngineConfig.dota`). The official code has no defaults (each run
    reads a dataset YAML): these are configs/vit/imagenet.yaml's."""

    epsilon: float = 1e-4  # `DOTA.update`: Lambda = inv((1 - epsilon) Sigmabar + epsilon I)
    sigma: float = 0.002  # `DOTA.__init__`: Sigma_k = sigma I at the start
    eta: float = 0.2  # `run_test_dota`: the cap of the DOTA weight
    rho: float = 0.005  # `run_test_dota`: DOTA weight = rho * mean_k c_k / |X|
    view_ratio: float = 0.1  # utils.py `get_clip_logits_aug`: keep int(0.1 V) views (at least 1 here)
    precision: str = "float"  # "float": the classifier's dtype; "official": `predict`'s fp16 casts

    def __post_init__(self) -> None:
        check_num(self, "epsilon", 0.0, 1.0)
        check_num(self, "sigma", 0.0, MAX_VALUE, low_open=True)
        check_num(self, "eta", 0.0, MAX_VALUE)
        check_num(self, "rho", 0.0, MAX_VALUE)
        check_num(self, "view_ratio", 0.0, 1.0, low_open=True)
        check(self.precision in PRECISIONS, "precision", self.precision, f"one of {', '.join(PRECISIONS)}")


def state_bytes(C: int, d: int, p: Params) -> int:
    """Float32 bytes of one stream's state: the C class scatters (C d^2: 1.05 GB at C = 1000,
    d = 512), the class means (C d), the counts (C) and Lambda (d^2)."""
    return 4 * (C * d * d + C * d + C + d * d)


def init(text: torch.Tensor, p: Params, logit_scale: float, length: int | None) -> dict[str, torch.Tensor]:
    """`main` + `DOTA.__init__`: mu_k = 0.001 * ones, c_k = 1, S_k = c_k Sigma_k = sigma I,
    Lambda = pinv(mean_k Sigma_k) = I / sigma."""
    C, d = text.shape
    like = {"dtype": text.dtype, "device": text.device}
    scatter = torch.zeros(C, d, d, **like)
    scatter.diagonal(dim1=1, dim2=2).fill_(p.sigma)
    lam = torch.eye(d, **like) / p.sigma
    return {
        "mu": torch.full((C, d), 0.001, **like),
        "count": torch.ones(C, **like),
        "scatter": scatter,
        "Lambda": _rounded(lam, p),
    }


FORGET = ("timeliness",)  # the forget rules this family defines beside the runner's resets (mstta.engine.forget)


RESCALE = 1e-20  # the faded evidence's scale s is folded into it below this (float32 keeps 1e38 / steps)


def decay(state: dict, gamma: float, text: torch.Tensor, p: Params) -> None:
    """`forget.rule=timeliness` (the project's adaptation, no published rule): before each step the
    evidence beyond the prior fades by gamma = exp(-1 / horizon): c_k <- 1 + gamma (c_k - 1), S_k <-
    sigma I + gamma (S_k - sigma I) (`init`'s values), so a sample `horizon` steps old weighs 1/e
    in the means, covariances and DOTA's weight (`text` is not read: DOTA's prior is constants).
    Every S_k fades by the one factor: the state holds E_k = (S_k - sigma I) / s, s = gamma^t
    (`evidence`, `scale`; converted at the first fade), so the fade is O(C), not a pass over the C d^2
    scatters; below RESCALE, E <- s E and s <- 1 (one pass per ~46 horizons)."""
    if "evidence" not in state:
        evidence = state.pop("scatter")
        evidence.diagonal(dim1=1, dim2=2).sub_(p.sigma)
        state.update(evidence=evidence, scale=1.0)
    state["count"].sub_(1).mul_(gamma).add_(1)
    state["scale"] *= gamma
    if state["scale"] < RESCALE:
        state["evidence"].mul_(state["scale"])
        state["scale"] = 1.0


def _rounded(lam: torch.Tensor, p: Params) -> torch.Tensor:
    """`.half()` of the official Lambda (`__init__`, `update`) under precision "official"."""
    return lam.half().to(lam.dtype) if p.precision == "official" else lam


def confident_views(x: torch.Tensor, text: torch.Tensor, scale: float, ratio: float):
    """utils.py `get_clip_logits_aug`: the int(ratio V) lowest-entropy views (at least 1; ties to
    the lower index) -> (X [n, d], their logits [n, C], clip [C] mean logits, H entropy of the mean
    softmax (`avg_entropy`; `softmax_entropy` for one view))."""
    logits = Fn.clip_logits(x, text, scale)
    keep = Fn.confident_indices(Fn.entropy(logits), ratio)
    kept = logits[keep]
    logp = torch.logsumexp(torch.log_softmax(kept, -1), 0) - torch.log(kept.new_tensor(float(len(keep))))
    return x[keep], kept, kept.mean(0), -(logp.exp() * logp).sum()


def predict(state: dict[str, torch.Tensor], q: torch.Tensor, p: Params) -> torch.Tensor:
    """`DOTA.predict`: q Lambda M - 1/2 diag(M^T Lambda M), M = mu^T. [d] -> [C]."""
    lam, mu = state["Lambda"], state["mu"]
    if p.precision == "official":
        return _predict_half(lam, mu, q)
    w = lam @ mu.T
    return q @ w - 0.5 * (mu.T * w).sum(0)


def _predict_half(lam: torch.Tensor, mu: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """`DOTA.predict` in fp16 as a GPU runs it: fp16 operands, each product/sum accumulated wide
    (here in float64) and rounded to fp16 once per official op."""

    def h(t):
        return t.to(torch.float64).half().to(torch.float64)

    m, q = h(mu.T), h(q)
    w = h(h(lam) @ m)
    c = h(0.5 * h(h(m * w).sum(0)))
    return h(h(q @ w) - c).to(mu.dtype)


def fit(state: dict[str, torch.Tensor], X: torch.Tensor, Y: torch.Tensor, p: Params) -> None:
    """`DOTA.fit` then `DOTA.update` with soft labels Y [n, C] of X [n, d]: mu_k and c_k as
    official; S_k += sum_n Y_nk (x_n - mu_k)(x_n - mu_k)^T with the OLD mu_k (= the official
    Sigma_k <- (c_k Sigma_k + Delta_k) / (c_k + s_k) times c_k + s_k); Lambda = inv((1 - epsilon)
    mean_k S_k / c_k + epsilon I). Under `decay`'s form E_k += Delta_k / scale."""
    mu, count = state["mu"], state["count"]
    faded = "evidence" in state  # `decay`'s form: S_k = sigma I + scale E_k
    scatter = state["evidence"] if faded else state["scatter"]
    C, d = mu.shape
    s = Y.sum(0)
    z = (X.unsqueeze(1) - mu.unsqueeze(0)).permute(1, 2, 0)  # [C, d, n], x_n - mu_k (old means)
    zy = z * (Y.T / state["scale"] if faded else Y.T).unsqueeze(1)
    scatter.baddbmm_(zy, z.transpose(1, 2))
    mu.mul_(count.unsqueeze(1)).add_(Y.T @ X).div_((count + s).unsqueeze(1))
    count.add_(s)
    sbar = (count.reciprocal() @ scatter.view(C, d * d)).view(d, d)
    if faded:  # sigma I mean_k 1 / c_k + scale mean_k E_k / c_k
        sbar.mul_(state["scale"] / C).diagonal().add_(p.sigma * count.reciprocal().mean())
    else:
        sbar /= C
    eye = torch.eye(d, dtype=mu.dtype, device=mu.device)
    state["Lambda"] = _rounded(torch.linalg.inv((1 - p.epsilon) * sbar + p.epsilon * eye), p)


def step(
    state: dict[str, torch.Tensor], x: torch.Tensor, text: torch.Tensor, p: Params, logit_scale: float, shift
) -> StepOut:
    """`run_test_dota`'s loop body: predict with the state so far, then fit the selected views.
    +MS: the fitted views and the predicting mean go through `shift`; the CLIP logits stay raw."""
    X, kept, clip, H = confident_views(x, text, logit_scale, p.view_ratio)
    xbar = X.mean(0)
    dota = predict(state, shift(xbar.unsqueeze(0))[0], p)
    weight = torch.clamp(p.rho * state["count"].mean() / X.shape[0], max=p.eta)
    final = clip + weight * dota
    fit(state, shift(X), torch.softmax(kept, -1), p)
    return StepOut(final, clip, H, xbar, torch.softmax(final, -1))
