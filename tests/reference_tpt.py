"""An independent TPT / C-TPT reference: plain torch autograd over a tiny open_clip CLIP built here,
with its own copy of TPT's prompt learner and text encoder (azshue/TPT `clip/custom_clip.py`
`PromptLearner`, `TextEncoder`, batch-first as open_clip >= 2.26 runs its transformer) and its
tuning loop (`tpt_classification.py` `select_confident_samples`, `avg_entropy`, `test_time_tuning`).
Imports nothing from mstta."""

from __future__ import annotations

import copy

import numpy as np
import open_clip
import torch
from torch import nn

CTX_INIT = "a photo of a"


def tiny_clip(seed: int = 0, dim: int = 32) -> open_clip.CLIP:
    """A random-weight open_clip CLIP with a 2-layer, 32-wide text tower (77 tokens), in eval mode."""
    torch.manual_seed(seed)
    vision = {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16}
    text = {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2}
    return open_clip.CLIP(embed_dim=dim, vision_cfg=vision, text_cfg=text).eval()


class PromptLearner(nn.Module):
    """TPT's CoOp prompt learner: [SOS] ctx (n_ctx learnable) [class tokens . EOS], class at the end."""

    def __init__(self, clip: open_clip.CLIP, classnames: list[str]):
        super().__init__()
        n_ctx = len(CTX_INIT.split(" "))
        with torch.no_grad():
            init = clip.token_embedding(open_clip.tokenize(CTX_INIT))[0, 1 : 1 + n_ctx]
            tokens = torch.cat([open_clip.tokenize(f"{CTX_INIT} {c.replace('_', ' ')}.") for c in classnames])
            emb = clip.token_embedding(tokens)
        self.ctx_init_state = init.clone()
        self.ctx = nn.Parameter(init.clone())
        self.register_buffer("prefix", emb[:, :1])
        self.register_buffer("suffix", emb[:, 1 + n_ctx :])
        self.tokens = tokens

    def forward(self) -> torch.Tensor:
        ctx = self.ctx.unsqueeze(0).expand(self.prefix.shape[0], -1, -1)
        return torch.cat([self.prefix, ctx, self.suffix], dim=1)


def encode(clip: open_clip.CLIP, prompts: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """TPT's TextEncoder (batch-first): + positions, transformer, ln_final, EOT row, projection; normalised."""
    x = prompts + clip.positional_embedding
    x = clip.transformer(x, attn_mask=clip.attn_mask)
    x = clip.ln_final(x)
    x = x[torch.arange(x.shape[0]), tokens.argmax(dim=-1)] @ clip.text_projection
    return x / x.norm(dim=-1, keepdim=True)


def avg_entropy(outputs: torch.Tensor) -> torch.Tensor:
    logits = outputs - outputs.logsumexp(dim=-1, keepdim=True)
    avg = logits.logsumexp(dim=0) - np.log(logits.shape[0])
    avg = torch.clamp(avg, min=torch.finfo(avg.dtype).min)
    return -(avg * torch.exp(avg)).sum(dim=-1)


class ReferenceTPT:
    """One AdamW step (lr 5e-3, default weight decay) per sample from a reset prompt; lam > 0: C-TPT."""

    def __init__(self, clip: open_clip.CLIP, classnames: list[str], lam: float = 0.0, lr: float = 5e-3):
        for p in clip.parameters():
            p.requires_grad_(False)
        self.clip, self.lam = clip, lam
        self.learner = PromptLearner(clip, classnames)
        self.scale = clip.logit_scale.exp().item()
        self.opt = torch.optim.AdamW(self.learner.parameters(), lr)
        self.opt_state = copy.deepcopy(self.opt.state_dict())

    def text(self) -> torch.Tensor:
        return encode(self.clip, self.learner(), self.learner.tokens)

    def step(self, views: np.ndarray) -> dict:
        """views [V, d] (unit rows, view 0 the original) -> prediction, scores, tuned ctx, selection."""
        x = torch.as_tensor(views, dtype=torch.float32)
        with torch.no_grad():
            self.learner.ctx.copy_(self.learner.ctx_init_state)
        self.opt.load_state_dict(self.opt_state)
        t = self.text()
        out = self.scale * x @ t.t()
        ent = -(out.softmax(1) * out.log_softmax(1)).sum(1)
        idx = torch.argsort(ent, descending=False)[: int(ent.shape[0] * 0.1)]
        loss = avg_entropy(out[idx])
        if self.lam:
            loss = loss - self.lam * torch.linalg.norm(t - t.mean(0), dim=-1).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        with torch.no_grad():
            scores = self.scale * x[0] @ self.text().t()
        return {"pred": int(scores.argmax()), "scores": scores, "ctx": self.learner.ctx.detach().clone(), "idx": idx}
