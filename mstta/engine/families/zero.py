"""ZERO (Farina et al., NeurIPS 2024): episodic "zero-temperature" voting of the most confident views,
as the official code runs it (FarinaMatteo/zero `ttas/zero.py` `Zero.zero`, `ttas/base.py`
`confidence_filter`, `utils/tools.py` `greedy_break`/`break_sample_tie`; docs/methods/zero.md).

Per sample, views x [V, d] (view 0 = the original image), text W [C, d]:
  l = x W^T (unscaled cosines); H_v = entropy(softmax(logit_scale l_v)); keep the floor(gamma V)
  lowest-H views; votes p = sum_kept softmax(l_v / eps); a tied maximum is broken greedily by the
  non-kept views in entropy order (the first whose argmax is tied), else by `break_sample_tie` on
  the first non-kept view (official: the bitwise-not mask), and the class it picks gets one more
  vote. The prediction is the first maximum of p (the official run scores p with `topk`).
Nothing is carried from one sample to the next: the state is an empty dict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from ...checks import check, check_num
from ...threads import map_chunks
from .. import functional as Fn
from .base import Method, StepOut

NAME = "zero"
# Its protocol in words (`mstta.engine.protocol`): what a row predicts from when it reads V > 1 views
# ({kept}: the views its confident selection keeps, {views}: V), its Params key of that selection's
# fraction (None: no selection), and whether its CLIP reference (`StepOut.clip`) is on those views.
PREDICTS = "a zero-temperature vote of its {kept} most confident views"
SELECTION = "gamma"
CLIP_FROM_VIEWS = False

METHODS = (
    Method(
        name="zero",
        title="ZERO",
        family=NAME,
        augment="crop",
        views="crop64",
        episodic=True,
        summary="episodic vote of the 30% most confident views at zero temperature (NeurIPS-24)",
    ),
)

TIE_BREAKS = ("official", "intended")
CHUNK_ELEMENTS = {"cpu": 1 << 20, "other": 1 << 24}  # replay: a chunk's [n, V, C] logits (cache-sized on a CPU)


@dataclass
class Params:
    """ZERO's hyperparameters (`EngineConfig.zero`)."""

    gamma: float = 0.3  # ttas/zero.py Zero.set_hyperparams: fraction of views kept (floor(0.3*64) = 19)
    eps: float = 2.0**-10  # ttas/zero.py line 80: torch.finfo(l_filt.dtype).eps, fp16 in the official run
    tie_break: str = "official"  # utils/tools.py break_sample_tie: "official" = logit[~ties] on an int tensor
    #                              (bitwise not: masks classes C-1-t); "intended" = mask the non-tied classes

    def __post_init__(self):
        check(
            isinstance(self.gamma, (int, float)) and not isinstance(self.gamma, bool) and 0.0 <= self.gamma < 1.0,
            "gamma",
            self.gamma,
            "a number in [0, 1) (bounds: docs/limits.md)",
        )
        check_num(self, "eps", 1e-30, 1.0)
        check(self.tie_break in TIE_BREAKS, "tie_break", self.tie_break, f"one of {', '.join(TIE_BREAKS)}")


def state_bytes(C: int, d: int, p: Params) -> int:
    """Episodic: no state."""
    return 0


def init(text: torch.Tensor, p: Params, logit_scale: float, length: int | None) -> dict[str, torch.Tensor]:
    """Episodic: an empty state."""
    return {}


class Votes(NamedTuple):
    """One batch of ZERO decisions ([n, ...])."""

    pred: torch.Tensor  # [n] the prediction: the first maximum of `votes` (official: topk of p_bar)
    votes: torch.Tensor  # [n, C] p_bar, the extra vote of a broken tie included
    order: torch.Tensor  # [n, V] views by ascending entropy (stable: ties to the lower view)
    kept: int  # floor(gamma V): the first `kept` views of `order` voted
    logits: torch.Tensor  # [n, V, C] unscaled cosines l
    entropy: torch.Tensor  # [n, V] entropy of softmax(logit_scale l)


def vote(x: torch.Tensor, text: torch.Tensor, logit_scale: float, p: Params) -> Votes:
    """ttas/zero.py `Zero.zero` lines 59-98 on n samples at once. x [n, V, d] unit, text [C, d]."""
    n, V, _ = x.shape
    l = x @ text.T  # line 73: unscaled logits
    h = Fn.entropy(logit_scale * l)  # line 74, base.py line 57
    order = torch.argsort(h, dim=-1, stable=True)  # base.py line 58 (stable here)
    k = int(V * p.gamma)  # base.py line 59 / zero.py line 91
    ranked = l.gather(1, order.unsqueeze(-1).expand(-1, -1, l.shape[-1]))  # sorted_l = l[sorted_idx]
    votes = torch.softmax(ranked[:, :k] / p.eps, dim=-1).sum(1)  # lines 80-81 (zeros when k = 0)
    tied = votes == votes.max(-1, keepdim=True).values  # lines 84-88: exact equality
    broken = tied.sum(-1) > 1
    if bool(broken.any()):  # lines 91-95: p_bar[greedy_break(...)] += 1
        won = greedy_break(tied, ranked[:, k:], p.tie_break)
        votes = votes.scatter_add(1, won.unsqueeze(-1), broken.to(votes.dtype).unsqueeze(-1))
    return Votes(votes.argmax(-1), votes, order, k, l, h)


def greedy_break(tied: torch.Tensor, rest: torch.Tensor, tie_break: str) -> torch.Tensor:
    """utils/tools.py `greedy_break`: the first non-kept view (entropy order) whose argmax is a tied
    class, else `break_sample_tie` on the first non-kept view. tied [n, C], rest [n, V-k, C] -> [n]."""
    preds = rest.argmax(-1)  # [n, V-k]
    hit = tied.gather(1, preds)  # pred in ties_tensor
    first = hit.to(torch.uint8).argmax(-1)  # the first hit (0 when none)
    greedy = preds.gather(1, first.unsqueeze(-1)).squeeze(-1)
    return torch.where(hit.any(-1), greedy, break_sample_tie(tied, rest[:, 0], tie_break))


def break_sample_tie(tied: torch.Tensor, logit: torch.Tensor, tie_break: str) -> torch.Tensor:
    """utils/tools.py `break_sample_tie`: `logit[~ties] = -inf` then argmax. `~` on the int tensor of
    tied classes t is -t-1, i.e. it masks classes C-1-t ("official"); "intended" masks the classes
    that are not tied. tied [n, C], logit [n, C] -> [n]."""
    masked = tied.flip(-1) if tie_break == "official" else ~tied
    return logit.masked_fill(masked, float("-inf")).argmax(-1)


def _outputs(v: Votes, x: torch.Tensor, logit_scale: float) -> StepOut:
    """StepOut of a batch: scores = p_bar, probs = p_bar / sum p_bar; clip and entropy = view 0's
    zero-shot CLIP (the CLIP row's prediction); feature = view 0."""
    probs = v.votes / v.votes.sum(-1, keepdim=True)
    return StepOut(v.votes, logit_scale * v.logits[:, 0], v.entropy[:, 0], x[:, 0], probs)


def step(state: dict, x: torch.Tensor, text: torch.Tensor, p: Params, logit_scale: float, shift) -> StepOut:
    """One sample, x [V, d] -> StepOut (ZERO keeps no state; `shift` is unused: no +ms row)."""
    xb = x.unsqueeze(0)
    out = _outputs(vote(xb, text, logit_scale, p), xb, logit_scale)
    return StepOut(*(t[0] for t in out))


def _chunks(x: torch.Tensor, C: int) -> list[torch.Tensor]:
    budget = CHUNK_ELEMENTS["cpu" if x.device.type == "cpu" else "other"]
    return list(x.split(max(1, budget // max(1, x.shape[1] * C))))


def replay(x: torch.Tensor, text: torch.Tensor, p: Params, logit_scale: float) -> StepOut:
    """A whole stream x [N, V, d] (unit rows) in sample chunks (the CPU pool's one-thread workers,
    mstta.threads) -> StepOut of [N, ...] tensors."""
    outs = map_chunks(
        lambda c: _outputs(vote(c, text, logit_scale, p), c, logit_scale), _chunks(x, text.shape[0]), x.device
    )
    return StepOut(*(torch.cat(parts) for parts in zip(*outs)))


def aggregate(x: torch.Tensor, text: torch.Tensor, logit_scale: float, p: Params):
    """ZERO as a view aggregator: x [N, V, d] unit -> (f [N, d], clip [N, C]). f = the mean (not
    re-normalised) of the views that voted for the winner: the kept views whose argmax it is, else
    any view whose argmax it is, else view 0 (only when `break_sample_tie` picked a class no view
    predicts); clip = logit_scale f W^T (= the mean of those views' CLIP logits, so its argmax is
    the winner whenever f has voters)."""
    f = torch.cat(map_chunks(lambda c: _voters_mean(c, text, logit_scale, p), _chunks(x, text.shape[0]), x.device))
    return f, Fn.clip_logits(f, text, logit_scale)


def _voters_mean(x: torch.Tensor, text: torch.Tensor, logit_scale: float, p: Params) -> torch.Tensor:
    v = vote(x, text, logit_scale, p)
    own = v.logits.argmax(-1) == v.pred.unsqueeze(-1)  # [n, V] views predicting the winner
    kept = torch.zeros_like(own).scatter_(1, v.order[:, : v.kept], True) & own
    use = torch.where(kept.any(-1, keepdim=True), kept, own)
    use[:, 0] |= ~use.any(-1)
    w = use.to(x.dtype)
    return (w.unsqueeze(-1) * x).sum(1) / w.sum(-1, keepdim=True)
