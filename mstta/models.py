"""CLIP models over open_clip: one loader for pretrained tags, local checkpoints and `mstta-tiny`.

A model is named by the open_clip pair (architecture, pretrained): `ViT-B-16 openai`,
`RN50 openai`, any pair `open_clip.list_pretrained()` knows, a local checkpoint path, or `none`
(random weights: meaningless predictions, for tests and speed measurements).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from .config import CONFIG_DIR
from .devices import resolve_device
from .errors import UserError

log = logging.getLogger(__name__)

MODEL_CONFIG_DIR = CONFIG_DIR / "models"
PRECISIONS = ("fp32", "fp16", "bf16")
_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_registered = False


def _register_configs() -> None:
    """Make the project's JSON model configs (e.g. mstta-tiny) known to open_clip."""
    global _registered
    if not _registered:
        import open_clip

        open_clip.add_model_config(MODEL_CONFIG_DIR)
        _registered = True


def list_models() -> list[str]:
    """Every architecture name open_clip knows, the project's own configs included."""
    import open_clip

    _register_configs()
    return open_clip.list_models()


@dataclass
class ClipModel:
    """A loaded CLIP: the model in eval mode, its image preprocessing and tokenizer."""

    model: Any
    preprocess: Callable            # PIL image -> [3, H, W] float tensor
    tokenizer: Callable
    name: str
    pretrained: str
    device: torch.device
    precision: str

    @property
    def dtype(self) -> torch.dtype:
        return _DTYPES[self.precision]

    @property
    def image_size(self) -> int:
        size = self.model.visual.image_size
        return int(size[0] if isinstance(size, (tuple, list)) else size)

    @property
    def embed_dim(self) -> int:
        return int(self.model.text_projection.shape[-1]) if hasattr(self.model, "text_projection") \
            and self.model.text_projection is not None else int(self.encode_text(["x"]).shape[-1])

    @torch.inference_mode()
    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor:
        """Preprocessed images [B, 3, H, W] -> L2-normalised features [B, d] (float32)."""
        feats = self.model.encode_image(pixels.to(self.device, self.dtype))
        return torch.nn.functional.normalize(feats.float(), dim=-1)

    @torch.inference_mode()
    def encode_text(self, texts: Sequence[str]) -> torch.Tensor:
        """Strings -> L2-normalised text features [n, d] (float32)."""
        tokens = self.tokenizer(list(texts)).to(self.device)
        feats = self.model.encode_text(tokens)
        return torch.nn.functional.normalize(feats.float(), dim=-1)


def default_precision(device: torch.device) -> str:
    """fp16 on GPU, fp32 on CPU (CPU half precision is slow and inexact)."""
    return "fp16" if device.type == "cuda" else "fp32"


def load_clip(name: str = "ViT-B-16", pretrained: str = "openai", device: str | torch.device = "auto",
              precision: str | None = None) -> ClipModel:
    """Load an open_clip model; missing/bad weights are one-line UserErrors saying how to fix it."""
    import open_clip

    _register_configs()
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    precision = precision or default_precision(dev)
    if precision not in PRECISIONS:
        raise UserError(f"--precision {precision}: choose one of {', '.join(PRECISIONS)}")
    if name not in open_clip.list_models():
        raise UserError(f"--model {name}: unknown architecture; choose one open_clip knows "
                        f"(e.g. ViT-B-16, RN50, mstta-tiny; full list: python -c 'import open_clip; print(open_clip.list_models())')")
    tag = None if pretrained in (None, "", "none") else pretrained
    if tag is None:
        log.warning("%s with --pretrained none: random weights, predictions are meaningless", name)
    elif _looks_like_path(tag):
        path = Path(tag).expanduser()
        if not path.is_file():
            raise UserError(f"--pretrained {tag}: checkpoint file not found; pass an existing .pt/.bin/.safetensors file")
        tag = str(path)
    elif tag not in open_clip.list_pretrained_tags_by_model(name):
        known = ", ".join(open_clip.list_pretrained_tags_by_model(name)) or "none known"
        raise UserError(f"--pretrained {tag}: not a known tag for {name} (known: {known}); or pass a local checkpoint path")
    try:
        model, _, preprocess = open_clip.create_model_and_transforms(
            name, pretrained=tag, device=dev, precision=precision if dev.type == "cuda" else "fp32")
    except Exception as exc:  # noqa: BLE001 - any loader failure becomes one actionable line
        raise UserError(_weights_error(name, pretrained, exc)) from None
    if dev.type != "cuda" and precision != "fp32":
        model = model.to(_DTYPES[precision])
    model.eval()
    return ClipModel(model, preprocess, open_clip.get_tokenizer(name), name, pretrained or "none", dev, precision)


def _looks_like_path(tag: str) -> bool:
    return os.sep in tag or tag.endswith((".pt", ".pth", ".bin", ".safetensors")) or tag.startswith((".", "~"))


def _weights_error(name: str, pretrained: str, exc: Exception) -> str:
    msg = " ".join(str(exc).split())
    if _looks_like_path(pretrained):
        return (f"could not load checkpoint {pretrained} into {name} ({msg[:160]}); "
                "check that the file is an open_clip/OpenAI CLIP checkpoint for this architecture")
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HF_HOME") or "~/.cache/huggingface"
    return (f"weights for {name} '{pretrained}' could not be downloaded or loaded (offline?); "
            f"put them in the Hugging Face cache ({cache}) on a machine with internet, "
            f"or pass --pretrained /path/to/checkpoint, or use --model mstta-tiny --pretrained none for a test run")
