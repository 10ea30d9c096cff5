"""MTA (Zanella & Ben Ayed, CVPR 2024): episodic MeanShift for test-time augmentation, as the
official code runs it (MaxZanella/MTA `mta.py` `solve_mta`, `main.py` defaults; docs/methods/mta.md).

Per sample, views x [V, d] (view 0 = the original image), text W [C, d]: a per-view Gaussian
bandwidth from each view's k = floor(0.3 (V-1)) nearest views; affinity A = softmax(L) softmax(L)^T
of the views' CLIP logits L; then `max_iter` rounds of (inlierness y <- softmax((K(mode) +
lambda_q A y) / lambda_y), up to `max_iter` times) and (mode <- the y- and kernel-weighted mean,
re-normalised, up to `max_iter` times), each inner loop stopping at a step below `th`. The
prediction is logit_scale mode W^T. Nothing is carried between samples: the state is an empty dict.
Batches of samples run the loops together, each sample frozen once its own loop has stopped, so a
batch performs exactly each sample's own loop counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...checks import check_int, check_num
from ...threads import map_chunks
from .. import functional as Fn
from .base import Method, StepOut

NAME = "mta"
# Its protocol in words (`mstta.engine.protocol`): what a row predicts from when it reads V > 1 views
# ({kept}: the views its confident selection keeps, {views}: V), its Params key of that selection's
# fraction (None: no selection), and whether its CLIP reference (`StepOut.clip`) is on those views.
PREDICTS = "the MeanShift mode of its {views} views"
SELECTION = None
CLIP_FROM_VIEWS = False

METHODS = (
    Method(
        name="mta",
        title="MTA",
        family=NAME,
        augment="crop",
        views="crop64",
        episodic=True,
        summary="episodic MeanShift mode of the augmented views with inlierness scores (CVPR-24)",
    ),
)

CHUNK_ELEMENTS = {"cpu": 1 << 20, "other": 1 << 24}  # replay: a chunk's [n, V, max(C, d)] (cache-sized on a CPU)
H2_FLOOR = 1e-6  # 2 h^2 >= 1e-6: a zero bandwidth (k+1 identical views) is a division by zero (NaN) officially


@dataclass
class Params:
    """MTA's hyperparameters (`EngineConfig.mta`)."""

    lambda_y: float = 0.2  # main.py line 347 --lambda_y: the entropic term's weight
    lambda_q: float = 4.0  # main.py line 346 --lambda_q: the quadratic (affinity) term's weight
    max_iter: int = 5  # mta.py line 19: outer rounds, and the cap of both inner loops
    th: float = 1e-6  # mta.py line 43: an inner loop stops when its step's norm is below th
    temperature: float = 1.0  # mta.py line 20: of the affinity's softmax(L / temperature)
    bandwidth_ratio: float = 0.3  # mta.py line 27: k = int(0.3 (V-1)) nearest views set each bandwidth

    def __post_init__(self):
        check_num(self, "lambda_y", 1e-6, 1e6, low_open=False)
        check_num(self, "lambda_q", 0.0, 1e6)
        check_int(self, "max_iter", 1, 1000)
        check_num(self, "th", 0.0, 1.0)
        check_num(self, "temperature", 1e-6, 1e6)
        check_num(self, "bandwidth_ratio", 0.0, 1.0)


def state_bytes(C: int, d: int, p: Params) -> int:
    """Episodic: no state."""
    return 0


def init(text: torch.Tensor, p: Params, logit_scale: float, length: int | None) -> dict[str, torch.Tensor]:
    """Episodic: an empty state."""
    return {}


def neighbours(V: int, ratio: float) -> int:
    """mta.py line 27: k = int(ratio (V-1)), at least 1 (official: 0 for V < 5, a NaN bandwidth)."""
    return max(1, int(ratio * (V - 1)))


def bandwidth(x: torch.Tensor, ratio: float) -> torch.Tensor:
    """mta.py lines 25-30: h_i = sqrt(0.5 mean of the k smallest squared distances to other views).
    x [n, V, d] unit, V >= 2 -> [n, V]."""
    n, V, _ = x.shape
    g = x @ x.transpose(1, 2)
    sq = x.square().sum(-1)
    d2 = (sq.unsqueeze(-1) + sq.unsqueeze(-2) - 2 * g).clamp_min(0)
    d2.diagonal(dim1=1, dim2=2).zero_()  # the distance to the point itself
    k = neighbours(V, ratio)
    near = torch.topk(d2, k + 1, dim=-1, largest=False, sorted=True).values[..., 1:]  # sorted_dist[:, 1:k+1]**2
    return torch.sqrt(0.5 * near.mean(-1))


def kernel(mode: torch.Tensor, h2: torch.Tensor, x: torch.Tensor, sq: torch.Tensor) -> torch.Tensor:
    """mta.py `gaussian_kernel` lines 4-7: exp(-||x_i - mode||^2 / (2 h_i^2)), the squared distance as
    ||x_i||^2 + ||mode||^2 - 2 x_i.mode (one matrix product). mode [n, d], h2 = 2h^2 [n, V], sq = ||x_i||^2."""
    dot = torch.bmm(x, mode.unsqueeze(-1)).squeeze(-1)
    dist2 = (sq + mode.square().sum(-1, keepdim=True) - 2 * dot).clamp_min(0)
    return torch.exp(-dist2 / h2)


def solve(x: torch.Tensor, text: torch.Tensor, logit_scale: float, p: Params) -> torch.Tensor:
    """mta.py `solve_mta` lines 10-87 on n samples at once: the mode [n, d] (unit). x [n, V, d] unit.
    V = 1: view 0 itself (the mode of one point)."""
    n, V, _ = x.shape
    mode = x[:, 0]  # lines 39-40
    if V == 1:
        return mode
    h = bandwidth(x, p.bandwidth_ratio)
    h2 = (2 * h**2).clamp_min(H2_FLOOR)
    sq = x.square().sum(-1)
    probs = torch.softmax(Fn.clip_logits(x, text, logit_scale) / p.temperature, dim=-1)  # lines 15, 33
    affinity = probs @ probs.transpose(1, 2)
    y = torch.full((n, V), 1.0 / V, dtype=x.dtype, device=x.device)  # line 36
    for _ in range(p.max_iter):  # lines 46-84
        density = kernel(mode, h2, x, sq)  # line 52
        y = _inlierness(y, density, affinity, p)
        mode = _mode(mode, y, h2, x, sq, p)
    return mode


def _inlierness(y, density, affinity, p: Params):
    """mta.py lines 54-63: y <- softmax(1/lambda_y (K + lambda_q A y)), per sample until its step < th."""
    active = torch.ones(y.shape[0], dtype=torch.bool, device=y.device)
    for _ in range(p.max_iter):
        new = torch.softmax(1 / p.lambda_y * (density + p.lambda_q * (affinity @ y.unsqueeze(-1)).squeeze(-1)), dim=-1)
        done = torch.linalg.vector_norm(y - new, dim=-1) < p.th
        y = torch.where(active.unsqueeze(-1), new, y)
        active = active & ~done
        if not bool(active.any()):
            break
    return y


def _mode(mode, y, h2, x, sq, p: Params):
    """mta.py lines 69-80: mode <- sum w_i x_i / sum w_i, w = K(mode) y, re-normalised, per sample
    until its step < th (a sample whose weights all vanish keeps its mode: officially NaN)."""
    active = torch.ones(mode.shape[0], dtype=torch.bool, device=mode.device)
    for _ in range(p.max_iter):
        w = kernel(mode, h2, x, sq) * y
        total = w.sum(-1, keepdim=True)
        new = torch.bmm(w.unsqueeze(1), x).squeeze(1) / total
        new = new / torch.linalg.vector_norm(new, dim=-1, keepdim=True)
        new = torch.where(total > 0, new, mode)
        done = torch.linalg.vector_norm(mode - new, dim=-1) < p.th
        mode = torch.where(active.unsqueeze(-1), new, mode)
        active = active & ~done
        if not bool(active.any()):
            break
    return mode


def _outputs(mode: torch.Tensor, x: torch.Tensor, text: torch.Tensor, logit_scale: float) -> StepOut:
    """scores = logit_scale mode W^T (mta.py line 86), probs = their softmax; clip and entropy =
    view 0's zero-shot CLIP (the CLIP row's prediction); feature = view 0."""
    scores = Fn.clip_logits(mode, text, logit_scale)
    clip = scores if x.shape[1] == 1 else Fn.clip_logits(x[:, 0], text, logit_scale)  # V = 1: mode = x_0
    return StepOut(scores, clip, Fn.entropy(clip), x[:, 0], torch.softmax(scores, dim=-1))


def step(state: dict, x: torch.Tensor, text: torch.Tensor, p: Params, logit_scale: float, shift) -> StepOut:
    """One sample, x [V, d] -> StepOut (MTA keeps no state; `shift` is unused: no +ms row)."""
    xb = x.unsqueeze(0)
    out = _outputs(solve(xb, text, logit_scale, p), xb, text, logit_scale)
    return StepOut(*(t[0] for t in out))


def _chunks(x: torch.Tensor, C: int) -> list[torch.Tensor]:
    budget = CHUNK_ELEMENTS["cpu" if x.device.type == "cpu" else "other"]
    return list(x.split(max(1, budget // max(1, x.shape[1] * max(C, x.shape[2])))))


def replay(x: torch.Tensor, text: torch.Tensor, p: Params, logit_scale: float) -> StepOut:
    """A whole stream x [N, V, d] (unit rows) in sample chunks (the CPU pool's one-thread workers,
    mstta.threads) -> StepOut of [N, ...] tensors."""
    outs = map_chunks(
        lambda c: _outputs(solve(c, text, logit_scale, p), c, text, logit_scale), _chunks(x, text.shape[0]), x.device
    )
    return StepOut(*(torch.cat(parts) for parts in zip(*outs)))


def aggregate(x: torch.Tensor, text: torch.Tensor, logit_scale: float, p: Params):
    """MTA as a view aggregator: x [N, V, d] unit -> (mode [N, d], logit_scale mode W^T [N, C])."""
    modes = torch.cat(map_chunks(lambda c: solve(c, text, logit_scale, p), _chunks(x, text.shape[0]), x.device))
    return modes, Fn.clip_logits(modes, text, logit_scale)
