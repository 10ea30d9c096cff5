"""The text tower of an open_clip `CLIP` with learnable context embeddings: TPT's prompt learner
and text encoder (azshue/TPT `clip/custom_clip.py` `PromptLearner`, `TextEncoder`) on open_clip.

open_clip's own `CLIP.encode_text` (open_clip/model.py, 3.x) is replicated step by step, every part
read from the model: token embedding -> positions 1..n_ctx replaced by the context `ctx` (TPT's
`token_prefix` + `ctx` + `token_suffix`, class token at the end) -> + positional embedding (cast
to the transformer's dtype) -> transformer with the model's causal `attn_mask` (batch-first, as
open_clip >= 2.26 runs it; no NLD->LND permute) -> `ln_final` -> `text_global_pool` with the
model's pool type and end-of-text id -> `text_projection` (an `nn.Linear` or a matrix) ->
L2-normalised. With `ctx` = the initial context it equals `model.encode_text` of the prompts.
`CustomTextCLIP` (SigLIP, Hugging Face towers: the tower under `model.text`) is refused in one line.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn

from ..errors import UserError

CTX_INIT = "a photo of a"  # TPT scripts/test_tpt.sh --ctx_init a_photo_of_a ("_" -> " ", custom_clip.py:78)
_PARTS = ("token_embedding", "positional_embedding", "transformer", "ln_final", "text_projection", "attn_mask")


def check_tower(model: nn.Module, name: str = "the model") -> None:
    """One line unless `model` keeps open_clip CLIP's text tower as its own attributes (model.py `CLIP`)."""
    missing = [p for p in _PARTS if not hasattr(model, p)]
    if missing or hasattr(model, "text"):
        raise UserError(
            f"{name}: its text tower is not open_clip CLIP's (CustomTextCLIP: SigLIP or a Hugging Face "
            f"tower{'; missing ' + ', '.join(missing) if missing else ''}); the prompt-tuning methods (tpt, "
            "c-tpt) run on open_clip CLIP models only: choose another --model or method"
        )


class TextTower:
    """Class prompts "{ctx_init} {class}." through one CLIP's text tower with the context
    embeddings as input (TPT's `ClipTestTimeTuning.get_text_features`). Holds the frozen model
    (shared, never copied: `deepcopy` returns the same tower) and each class's tokens."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Callable,
        classnames: Sequence[str],
        ctx_init: str = CTX_INIT,
        name: str = "the model",
    ):
        check_tower(model, name)
        model.requires_grad_(False)  # tpt_classification.py:121-128: only the context is trained
        self.model = model
        self.name = name
        self.n_ctx = len(ctx_init.split(" "))  # custom_clip.py:87 n_ctx = len(ctx_init.split(" "))
        names = [c.replace("_", " ") for c in classnames]  # custom_clip.py:107
        device = model.positional_embedding.device
        self.tokens = tokenizer([f"{ctx_init} {c}." for c in names]).to(device)  # custom_clip.py:109
        init = tokenizer([ctx_init]).to(device)
        span = slice(1, 1 + self.n_ctx)
        self.length = _used_length(model, self.tokens)
        same = bool((self.tokens[:, : 1 + self.n_ctx] == init[:, : 1 + self.n_ctx]).all())
        if not same or int((init[0] != 0).sum()) != self.n_ctx + 2:  # start, one token per word, end
            raise UserError(
                f"{name}: its tokenizer does not give one token per word of {ctx_init!r} after a start token"
            )
        with torch.no_grad():  # custom_clip.py:88-91: the init's embeddings at positions 1..n_ctx
            self.ctx_init = model.token_embedding(init)[0, span].detach().float().clone()
            emb = model.token_embedding(self.tokens[:, : self.length])
        self.prefix, self.suffix = emb[:, :1], emb[:, 1 + self.n_ctx :]  # custom_clip.py:128-131 buffers
        self.logit_scale = float(model.logit_scale.detach().float().exp())  # custom_clip.py:318
        self._initial: torch.Tensor | None = None

    def __deepcopy__(self, memo):
        return self  # frozen weights and tokens: engines copied into a UI session share one tower

    @property
    def num_classes(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def device(self) -> torch.device:
        return self.ctx_init.device

    def __call__(self, ctx: torch.Tensor) -> torch.Tensor:
        """open_clip `CLIP.encode_text` with positions 1..n_ctx = ctx, normalised. [n_ctx, w] -> [C, d]."""
        return self.batched(ctx.unsqueeze(0))[0]

    def batched(self, ctx: torch.Tensor) -> torch.Tensor:
        """The tower of B contexts at once, one forward over B x C prompts (each prompt's row is computed
        as alone: the transformer mixes positions, never prompts). [B, n_ctx, w] -> [B, C, d]."""
        m, n = self.model, self.length
        tokens, cast = self.tokens[:, :n], m.transformer.get_cast_dtype()
        B, C = ctx.shape[0], tokens.shape[0]
        ctx = ctx.to(cast).unsqueeze(1).expand(-1, C, -1, -1)
        pre, suf = (t.to(cast).unsqueeze(0).expand(B, -1, -1, -1) for t in (self.prefix, self.suffix))
        x = torch.cat([pre, ctx, suf], dim=2).reshape(B * C, n, -1)  # custom_clip.py:196-203
        x = x + m.positional_embedding[:n].to(cast)
        x = m.transformer(x, attn_mask=m.attn_mask[:n, :n])
        x = m.ln_final(x)
        x = _pool(x, tokens.repeat(B, 1), m)
        if m.text_projection is not None:
            x = m.text_projection(x) if isinstance(m.text_projection, nn.Linear) else x @ m.text_projection
        return nn.functional.normalize(x.float(), dim=-1).view(B, C, -1)

    def initial(self) -> torch.Tensor:
        """The untuned prompts' features [C, d] (computed once): TPT's zero-shot classifier."""
        if self._initial is None:
            with torch.no_grad():
                self._initial = self(self.ctx_init)
        return self._initial

    def subset(self, keep: Sequence[int]) -> TextTower:
        """The same tower over some of its classes (a withheld-class run)."""
        out = object.__new__(TextTower)
        out.__dict__.update(self.__dict__)
        rows = torch.as_tensor(list(keep), device=self.tokens.device)
        out.tokens, out.prefix, out.suffix = self.tokens[rows], self.prefix[rows], self.suffix[rows]
        out._initial = None
        return out


def _used_length(model: nn.Module, tokens: torch.Tensor) -> int:
    """Positions up to the longest prompt's pooled token: with the causal mask, the rows pooled at
    or before it never see a later position, so the rest of the context is skipped (exactly)."""
    full = tokens.shape[1]
    mask = model.attn_mask
    causal = mask is not None and bool(torch.equal(torch.isinf(mask), torch.ones_like(mask, dtype=torch.bool).triu(1)))
    if not causal or model.text_pool_type not in ("argmax", "eos"):
        return full
    if model.text_pool_type == "argmax":
        return int(tokens.argmax(dim=-1).max()) + 1
    return int((tokens == model.text_eos_id).int().argmax(dim=-1).max()) + 1


def _pool(x: torch.Tensor, tokens: torch.Tensor, model: nn.Module) -> torch.Tensor:
    """open_clip transformer.py `text_global_pool` with the model's pool type and end-of-text id."""
    from open_clip.transformer import text_global_pool

    return text_global_pool(x, tokens, model.text_pool_type, eos_token_id=getattr(model, "text_eos_id", None))


def text_tower(clip, classnames: Sequence[str]) -> TextTower:
    """The tower of a loaded `mstta.features.models.ClipModel` over `classnames`."""
    return TextTower(clip.model, clip.tokenizer, classnames, name=f"--model {clip.name}")
