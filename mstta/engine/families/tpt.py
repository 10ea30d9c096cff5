"""TPT, test-time prompt tuning (Shu et al., NeurIPS 2022), as its official code runs it:
azshue/TPT @ 63ecbace `tpt_classification.py` (`select_confident_samples`, `avg_entropy`,
`test_time_tuning`, `test_time_adapt_eval`) and `clip/custom_clip.py` (`PromptLearner`,
`ClipTestTimeTuning`); docs/methods/tpt.md has every value with its line.

Per sample, views x [V, d] (view 0 = the original image; 64 in the authors' runs), the text tower
T(ctx) [C, d] (`mstta.features.text_tower`, the live open_clip text tower with the context embeddings ctx):
  1. ctx <- the embeddings of "a photo of a" (4 tokens), a fresh AdamW (reset before every sample);
  2. logits = s x T(ctx)^T (s = exp(the model's logit scale)); keep the int(0.1 V) lowest-entropy
     views (chosen at the first step, kept after it);
  3. loss = the entropy of the kept views' mean probability (- lam ATFD(T(ctx)) for C-TPT);
     one AdamW step on ctx (lr 5e-3, weight decay 0.01);
  4. prediction = s x_0 T(ctx)^T.
Image features come from the stored views, never re-encoded; only the text tower runs with
autograd. A replay (`replay_tower`) tunes chunks of samples at once, the same outputs as stepping
them (the prompt and AdamW are reset before every sample; docs/methods/tpt.md, "Cost").
Precision: on CUDA autocast (fp16) with a GradScaler (init scale 1000, kept per stream as the
authors' one scaler is kept over the run); on a CPU the authors' `torch.cuda.amp` calls are inert,
so everything is float32. Not training-free: every output carries the mark.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from ...checks import check, check_int, check_num
from ...errors import UserError
from ...threads import map_chunks, small_ops
from .base import TOWER_KEY, Method, StepOut

NAME = "tpt"
TOWER = True  # the runner puts the model's text tower in the state (`Engine(..., text_tower=...)`)
PREDICTS = "the original image, with a prompt tuned on its {kept} most confident views"
SELECTION = "selection"
CLIP_FROM_VIEWS = False  # its CLIP logits: view 0 with the run's classifier

_SUMMARY = (
    "TPT: per sample, one AdamW step on a CoOp prompt minimising the entropy of the 10% most "
    "confident views' mean prediction; the live text tower (NeurIPS-22)"
)
COST = "one text-tower forward and backward over all C class prompts, one more forward (docs/methods/tpt.md: measured)"
METHODS = (
    Method(
        name="tpt",
        title="TPT",
        summary=_SUMMARY,
        family=NAME,
        training_free=False,
        episodic=True,
        augment="augmix",  # crops on the ImageNet family (`views`)
        views="tpt64",
        cost=COST,
    ),
    Method(
        name="tpt+ms",
        title="TPT + MS",
        family=NAME,
        mean_shift=True,
        training_free=False,
        augment="augmix",  # crops on the ImageNet family (`views`)
        views="tpt64",
        cost=COST,
        summary="TPT with mean-shifted view features in its loss and prediction (plug-in)",
    ),
)

INIT_SCALE = 1000.0  # tpt_classification.py:149 GradScaler(init_scale=1000)


@dataclass
class Params:
    """TPT's hyperparameters (`engine: tpt: {...}`): tpt_classification.py's argparse defaults and
    scripts/test_tpt.sh."""

    lr: float = 5e-3  # tpt_classification.py:323-324 --lr default 5e-3
    weight_decay: float = 0.01  # :144-146 AdamW(params, lr): PyTorch's default weight decay
    selection: float = 0.1  # :330 --selection_p 0.1: int(V * 0.1) views (6 of 64)
    steps: int = 1  # :331 --tta_steps 1
    amp: bool = True  # :62, :149 autocast + GradScaler (CUDA only; false = float32 there too)

    def __post_init__(self) -> None:
        check_num(self, "lr", 0.0, 1.0)
        check_num(self, "weight_decay", 0.0, 1.0)
        check_num(self, "selection", 0.0, 1.0, low_open=True)
        check_int(self, "steps", 1, 64)
        check(isinstance(self.amp, bool), "amp", self.amp, "true or false")


MAX_WIDTH, MAX_VIEWS = 2048, 4096  # bounds of state_bytes: text width (ViT-bigG: 1280), views per sample


def state_bytes(C: int, d: int, p: Params) -> int:
    """One stream's state: the GradScaler's scale and growth count, the last sample's tuned context
    [4, width] and selected views (kept to be inspected; the prompt is reset before every sample)."""
    return 16 + 4 * 4 * MAX_WIDTH + 8 * MAX_VIEWS


def init(text: torch.Tensor, p: Params, logit_scale: float, length: int | None) -> dict[str, torch.Tensor]:
    """A fresh stream: the GradScaler's initial scale."""
    return {"scale": torch.tensor(INIT_SCALE, device=text.device), "growth": torch.tensor(0, device=text.device)}


def avg_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the mean probability of views [..., n, C] (tpt_classification.py:46-51 `avg_entropy`)."""
    logp = logits - logits.logsumexp(dim=-1, keepdim=True)
    avg = logp.logsumexp(dim=-2) - math.log(logp.shape[-2])
    avg = torch.clamp(avg, min=torch.finfo(avg.dtype).min)
    return -(avg * torch.exp(avg)).sum(dim=-1)


def atfd(text: torch.Tensor) -> torch.Tensor:
    """C-TPT's ATFD: mean L2 distance of the class text features [..., C, d] from their centroid
    (hee-suk-yoon/C-TPT clip/custom_clip.py `inference`, `l2_norm_mean_training`)."""
    return torch.linalg.norm(text - text.mean(-2, keepdim=True), dim=-1).mean(-1)


def selected(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Indices of the int(V p) (at least 1) lowest-entropy views of [..., V, C] (:41-44 `select_confident_samples`)."""
    ent = -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1)
    return torch.argsort(ent, dim=-1, descending=False)[..., : max(1, int(ent.shape[-1] * p))]


def tune(x: torch.Tensor, tower, p: Params, lam: float, state: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(tuned context, selected views) of one sample: `test_time_tuning` from a fresh prompt and
    AdamW, loss = avg_entropy(selected) - lam ATFD (C-TPT; lam = 0: TPT). x [V, d] float32."""
    ctx = torch.nn.Parameter(tower.ctx_init.clone())  # custom_clip.py:147-152 reset()
    opt = torch.optim.AdamW([ctx], lr=p.lr, weight_decay=p.weight_decay)
    cuda = x.device.type == "cuda" and p.amp
    scaler = _scaler(state) if cuda else None
    idx = None
    for _ in range(p.steps):
        with _autocast(cuda):
            text = tower(ctx)
            logits = tower.logit_scale * x @ text.T.to(x.dtype)
            idx = selected(logits, p.selection) if idx is None else idx
            loss = avg_entropy(logits[idx]) - lam * atfd(text)
        opt.zero_grad()
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    if scaler is not None:
        state["scale"].fill_(float(scaler.get_scale()))
        state["growth"].fill_(int(scaler.state_dict()["_growth_tracker"]))
    return ctx.detach(), idx


def _scaler(state: dict) -> torch.amp.GradScaler:
    scaler = torch.amp.GradScaler("cuda", init_scale=float(state["scale"]))
    scaler.load_state_dict({**scaler.state_dict(), "_growth_tracker": int(state["growth"])})
    return scaler


def _autocast(cuda: bool):
    return torch.autocast("cuda", dtype=torch.float16) if cuda else contextlib.nullcontext()


def run(state: dict, x: torch.Tensor, text: torch.Tensor, p: Params, logit_scale: float, shift, lam: float) -> StepOut:
    """One sample of TPT (lam = 0) or C-TPT: tune, then predict view 0 with the tuned prompt (the
    text tower: `state[TOWER_KEY]`, put there by the runner)."""
    tower = state.get(TOWER_KEY)
    if tower is None:
        raise UserError("tpt/c-tpt need the model's text tower: Engine(text, method, text_tower=TextTower(...))")
    _check_views(x.unsqueeze(0))
    raw0 = x[0]
    views = shift(x)
    with torch.inference_mode(False), torch.enable_grad():
        v = views.float().clone()  # a plain tensor (the engine steps under inference_mode)
        ctx, idx = tune(v, tower, p, lam, state)
        state["ctx"], state["selected"] = ctx, idx
        with torch.no_grad(), _autocast(v.device.type == "cuda" and p.amp):
            scores = (tower.logit_scale * v[0] @ tower(ctx).T).float()  # :289-294 model(image)
    dt = text.dtype
    clip = logit_scale * raw0 @ text.T  # CLIP on its prediction path (view 0), the run's classifier
    logp = torch.log_softmax(clip, -1)
    return StepOut(scores.to(dt), clip, -(logp.exp() * logp).sum(), raw0, torch.softmax(scores, -1).to(dt))


def _check_views(x: torch.Tensor) -> None:
    """One line unless every sample of x [N, V, d] has at least 2 views, all finite."""
    if x.shape[1] < 2:
        raise UserError(
            f"features: {x.shape[1]} view per sample; TPT needs the augmented views (at least 2, 64 in its "
            "authors' runs): use a store with --views 64"
        )
    if not bool(torch.isfinite(x).all()):
        raise UserError("features: NaN or infinite values reached TPT; re-extract the feature file")


def step(state: dict, x: torch.Tensor, text: torch.Tensor, p: Params, logit_scale: float, shift) -> StepOut:
    """One sample of TPT (`test_time_adapt_eval`'s loop body)."""
    return run(state, x, text, p, logit_scale, shift, 0.0)


def replay_tower(x: torch.Tensor, text: torch.Tensor, p: Params, logit_scale: float, tower) -> StepOut:
    """A whole stream of TPT, x [N, V, d] unit rows (no mean shift) -> StepOut [N, ...] (`replay_stream`)."""
    return replay_stream(x, text, p, logit_scale, tower, 0.0)


TOWER_ELEMENTS = 2**21  # prompts x positions x width of one batched tower pass (`replay_stream`'s chunk)
MAX_CHUNK = 64  # samples tuned at once at most (chunks spread over the CPU pool's workers)


def replay_stream(x: torch.Tensor, text: torch.Tensor, p: Params, logit_scale: float, tower, lam: float) -> StepOut:
    """TPT (lam = 0) or C-TPT over a stream: the prompt and AdamW are reset before every sample
    (custom_clip.py:147-152, tpt_classification.py:144-146), so samples are independent and chunks of
    them tune at once (`tune_batch`: AdamW is elementwise, so one step on [B, n_ctx, w] is B steps), the
    chunks on the CPU pool's one-thread workers (`mstta.threads.map_chunks`).
    With a GradScaler (CUDA and amp) its scale carries from sample to sample: stepped one by one."""
    _check_views(x)
    if x.device.type == "cuda" and p.amp:
        state = {**init(text, p, logit_scale, x.shape[0]), TOWER_KEY: tower}
        outs = [run(state, xi, text, p, logit_scale, _identity, lam) for xi in x]
        return StepOut(*(torch.stack(parts) for parts in zip(*outs)))
    per = tower.num_classes * tower.length * tower.ctx_init.shape[-1]
    n = max(1, min(MAX_CHUNK, TOWER_ELEMENTS // per))
    run_chunk = lambda a: _batch(x[a : a + n], text, p, logit_scale, tower, lam)
    with small_ops(x.device):  # one intra-op thread, in the pool's workers as in this one (mstta.threads)
        outs = map_chunks(run_chunk, list(range(0, x.shape[0], n)), x.device)
    return StepOut(*(torch.cat(parts) for parts in zip(*outs)))


def tune_batch(x: torch.Tensor, tower, p: Params, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """`tune` of B samples x [B, V, d] float32 at once, each from its own fresh prompt and AdamW state:
    (tuned contexts [B, n_ctx, w], selected views [B, k]). No GradScaler (float32)."""
    ctx = torch.nn.Parameter(tower.ctx_init.expand(x.shape[0], -1, -1).clone())
    opt = torch.optim.AdamW([ctx], lr=p.lr, weight_decay=p.weight_decay)
    idx = None
    for _ in range(p.steps):
        text = tower.batched(ctx)
        logits = tower.logit_scale * x @ text.transpose(1, 2).to(x.dtype)
        idx = selected(logits, p.selection) if idx is None else idx
        kept = logits.gather(1, idx.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
        loss = (avg_entropy(kept) - lam * atfd(text)).sum()  # sample b's gradient is its own loss's
        opt.zero_grad()
        loss.backward()
        opt.step()
    return ctx.detach(), idx


def _batch(x: torch.Tensor, text: torch.Tensor, p: Params, logit_scale: float, tower, lam: float) -> StepOut:
    """`run` of B samples x [B, V, d] at once (float32, no mean shift)."""
    with torch.inference_mode(False), torch.enable_grad():
        v = x.float().clone()  # a plain tensor (replays run under inference_mode)
        ctx, _ = tune_batch(v, tower, p, lam)
        with torch.no_grad():
            scores = (tower.logit_scale * v[:, :1] @ tower.batched(ctx).transpose(1, 2))[:, 0]
    dt, raw0 = text.dtype, x[:, 0]
    clip = logit_scale * raw0 @ text.T
    logp = torch.log_softmax(clip, -1)
    return StepOut(scores.to(dt), clip, -(logp.exp() * logp).sum(-1), raw0, torch.softmax(scores, -1).to(dt))


def _identity(v: torch.Tensor) -> torch.Tensor:
    return v
