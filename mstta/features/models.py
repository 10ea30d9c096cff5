"""CLIP models over open_clip: one loader for pretrained tags, local checkpoints and `mstta-tiny`.

A model is named by the open_clip pair (architecture, pretrained): `ViT-B-16 openai`,
`RN50 openai`, any pair `open_clip.list_pretrained()` knows, a local checkpoint path, `bundled`
(a checkpoint the project trains and ships under assets/: `mstta-digits`, see assets/README.md;
its default tag, so the CLIs' default `openai` means it too) or `none` (random weights:
meaningless predictions, for tests and speed measurements; the init is seeded, so every process
builds the same random model). Tags whose weights were trained with QuickGELU (all
`openai` ones) get it forced; a local OpenAI checkpoint needs the `-quickgelu` name (ViT-B-16-quickgelu).
Where weights live (caches, the offline probe) is `mstta.features.weights`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from ..atomic import atomic_open
from ..configfile import CONFIG_DIR
from ..data.templates import check_templates, fill
from ..errors import UserError
from .devices import resolve_device
from .views import Preprocess
from .weights import ensure_weights_reachable, hub_offline, is_known_tag, looks_like_path, weights_error

log = logging.getLogger(__name__)

MODEL_CONFIG_DIR = CONFIG_DIR / "models"
DEFAULT_MODEL = "ViT-B-16"  # the architecture every command loads when none is named
DEFAULT_TAG = "openai"  # ... and its weights (`default_pretrained` for project-trained models)
PRECISIONS = ("fp32", "fp16", "bf16")
_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
INIT_SEED = 0  # random init (`--pretrained none`) is seeded: same weights in every process
TEXT_CHUNK = 1024  # prompts per text-encoder forward
ASSETS_DIR = Path(__file__).resolve().parent.parent.parent / "assets"
BUNDLED_TAG = "bundled"
# Models whose weights the project trains and ships (repository checkout / editable install only:
# a wheel carries neither configs/ nor assets/). Made by assets/make_digits.py.
BUNDLED_CHECKPOINTS = {"mstta-digits": ASSETS_DIR / "mstta-digits.pt"}
_registered = False


def _register_configs() -> None:
    """Make the project's JSON model configs (e.g. mstta-tiny) known to open_clip."""
    global _registered
    if not _registered:
        import open_clip

        open_clip.add_model_config(MODEL_CONFIG_DIR)
        _registered = True


def bundled_checkpoint(name: str) -> Path | None:
    """The shipped checkpoint of a project-trained model (`--pretrained bundled`), or None if it has none."""
    return BUNDLED_CHECKPOINTS.get(name)


def default_pretrained(name: str) -> str:
    """The weights a model loads when none are named: `bundled` for project-trained ones, else `openai`."""
    return BUNDLED_TAG if name in BUNDLED_CHECKPOINTS else DEFAULT_TAG


def list_models() -> list[str]:
    """Every architecture name open_clip knows, the project's own configs included."""
    import open_clip

    _register_configs()
    return open_clip.list_models()


@dataclass
class ClipModel:
    """A loaded CLIP: the model in eval mode, its image preprocessing and tokenizer."""

    model: Any
    preprocess: Callable  # PIL image -> [3, H, W] float tensor (`mstta.features.views.Preprocess`)
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
        return (
            int(self.model.text_projection.shape[-1])
            if hasattr(self.model, "text_projection") and self.model.text_projection is not None
            else int(self.encode_text(["x"]).shape[-1])
        )

    @property
    def logit_scale(self) -> float:
        """The checkpoint's own CLIP logit scale exp(t), Eq. (1) (OpenAI's checkpoints: 100)."""
        scale = getattr(self.model, "logit_scale", None)
        return float(scale.detach().float().exp()) if isinstance(scale, torch.Tensor) else 100.0

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


def load_clip(
    name: str = DEFAULT_MODEL,
    pretrained: str = DEFAULT_TAG,
    device: str | torch.device = "auto",
    precision: str | None = None,
) -> ClipModel:
    """Load an open_clip model; missing/bad weights are one-line UserErrors saying how to fix it."""
    import open_clip

    _register_configs()
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    precision = precision or default_precision(dev)
    _check_model_arguments(name, precision)
    pretrained, tag, offline, quick_gelu = _resolve_weights(name, pretrained)
    shown = tag if pretrained == BUNDLED_TAG else pretrained  # the weights error messages name
    model = _create_model(name, tag, shown, dev, precision, offline=offline, quick_gelu=quick_gelu)
    if dev.type != "cuda" and precision != "fp32":
        model = model.to(_DTYPES[precision])
    check_finite_weights(model, name, shown, precision)
    model.eval()
    # preprocessing from the model's open_clip config (the same config open_clip built `preprocess` from)
    return ClipModel(
        model, Preprocess.of(model), open_clip.get_tokenizer(name), name, pretrained or "none", dev, precision
    )


def _check_model_arguments(name: str, precision: str) -> None:
    """Refuse an unknown precision or an architecture open_clip does not know."""
    import open_clip

    if precision not in PRECISIONS:
        raise UserError(f"--precision {precision}: choose one of {', '.join(PRECISIONS)}")
    if name not in open_clip.list_models():
        raise UserError(
            f"--model {name}: unknown architecture; choose one open_clip knows "
            "(e.g. ViT-B-16, RN50, mstta-tiny; full list: "
            "python -c 'import open_clip; print(open_clip.list_models())')"
        )


def _resolve_weights(name: str, pretrained: str | None) -> tuple[str | None, str | None, bool, bool]:
    """(pretrained, tag, offline, quick_gelu): the tag or checkpoint path open_clip loads (None: random),
    whether to load it from the cache offline and whether to force QuickGELU; bad weights are UserErrors."""
    import open_clip

    tag = None if pretrained in (None, "", "none") else str(pretrained)
    if tag is not None and name in BUNDLED_CHECKPOINTS:
        pretrained, tag = _bundled_tag(name, tag)
    offline, quick_gelu = False, False
    if tag is None:
        log.warning(
            "%s --pretrained none: RANDOM weights, predictions are meaningless (tests and speed runs only)", name
        )
    elif open_clip.is_pretrained_cfg(name, tag):
        offline = ensure_weights_reachable(name, tag)
        # OpenAI weights were trained with QuickGELU; open_clip's plain configs (ViT-B-16) use GELU
        quick_gelu = bool(open_clip.get_pretrained_cfg(name, tag).get("quick_gelu"))
    elif looks_like_path(tag):
        tag = _checkpoint_path(tag)
    else:
        raise UserError(_unknown_tag_error(name, tag))
    return pretrained, tag, offline, quick_gelu


def _checkpoint_path(tag: str) -> str:
    """A local checkpoint's expanded path; a missing file or a TorchScript archive is a UserError."""
    path = Path(tag).expanduser()
    if not path.is_file():
        raise UserError(f"--pretrained {tag}: checkpoint file not found; pass an existing .pt/.bin/.safetensors file")
    _check_checkpoint_file(path)
    return str(path)


def _unknown_tag_error(name: str, tag: str) -> str:
    """The one-line message for a `--pretrained` value that is neither a known tag nor a path."""
    import open_clip

    known = (
        ", ".join(
            open_clip.list_pretrained_tags_by_model(name) + ([BUNDLED_TAG] if name in BUNDLED_CHECKPOINTS else [])
        )
        or "none known"
    )
    return f"--pretrained {tag}: not a known tag for {name} (known: {known}); or pass a local checkpoint path"


def _create_model(
    name: str, tag: str | None, shown: str | None, dev: torch.device, precision: str, *, offline: bool, quick_gelu: bool
) -> torch.nn.Module:
    """Build the model with open_clip (seeded, quiet, hub offline when asked); any failure is one UserError."""
    import open_clip

    try:
        with hub_offline(offline), _quiet_open_clip(), _seeded(INIT_SEED), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a loader's warnings would add lines to the one error line
            model, _, _ = open_clip.create_model_and_transforms(
                name,
                pretrained=tag,
                device=dev,
                precision=precision if dev.type == "cuda" else "fp32",
                force_quick_gelu=quick_gelu,
            )
    except Exception as exc:  # any loader failure becomes one actionable line
        raise UserError(weights_error(name, shown, exc)) from None
    return model


def _check_checkpoint_file(path: Path) -> None:
    """A TorchScript archive (`torch.jit.save`) is refused by name: open_clip would try to run it and
    fail in three lines. Its marker is the `constants.pkl` member torch.load looks for."""
    try:
        with zipfile.ZipFile(path) as zf:
            scripted = any(n == "constants.pkl" or n.endswith("/constants.pkl") for n in zf.namelist())
    except (OSError, zipfile.BadZipFile, ValueError, EOFError):
        return  # not a zip: the loader reports what it is
    if scripted:
        raise UserError(
            f"--pretrained {path}: is a TorchScript archive (torch.jit.save), not a checkpoint; pass "
            "the model's weights saved with torch.save(model.state_dict(), PATH), or an "
            "open_clip/OpenAI CLIP checkpoint file"
        )


def check_finite_weights(model: torch.nn.Module, name: str, pretrained: str | None, precision: str) -> None:
    """Refuse a model with a NaN or infinite parameter (a damaged checkpoint, or weights beyond float16's
    65504 cast to fp16), naming the checkpoint and the first bad tensor (buffers such as the text
    attention mask hold -inf by design)."""
    for key, t in model.named_parameters():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            why = (
                f"beyond {precision}'s range (pass --precision fp32)"
                if precision != "fp32" and bool(torch.isinf(t).any()) and not bool(torch.isnan(t).any())
                else "a damaged checkpoint"
            )
            raise UserError(
                f"--pretrained {pretrained or 'none'}: weights of --model {name} hold non-finite "
                f"values (NaN or inf) in {key[:80]}: {why}; pass a checkpoint with finite weights"
            )


def recorded_tag(name: str, pretrained: str, quiet: bool = False) -> str:
    """The tag a file records: `bundled` for a project-trained model asked for `openai` (the CLIs'
    default, weights it has none of), said in one line (unless `quiet`); any other tag as given."""
    if name in BUNDLED_CHECKPOINTS and pretrained == DEFAULT_TAG:
        if quiet:
            return BUNDLED_TAG
        log.warning(
            "--model %s has no '%s' weights: using its bundled checkpoint (recorded as '%s')",
            name,
            pretrained,
            BUNDLED_TAG,
        )
        return BUNDLED_TAG
    return pretrained


def checkpoint_sha256(name: str) -> str | None:
    """SHA-256 of a project-trained model's shipped checkpoint (None when absent)."""
    import hashlib

    path = BUNDLED_CHECKPOINTS.get(name)
    if path is None or not path.is_file():
        return None
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _bundled_tag(name: str, tag: str) -> tuple[str, str]:
    """(pretrained, tag) of a project-trained model: `bundled` (and the CLIs' default `openai`, which
    no such model has) becomes the shipped checkpoint's path; a missing file is a UserError."""
    if tag not in (BUNDLED_TAG, "openai"):
        return tag, tag
    path = BUNDLED_CHECKPOINTS[name]
    if not path.is_file():
        raise UserError(
            f"--model {name} --pretrained {BUNDLED_TAG}: its checkpoint {path} is missing; run "
            "python assets/make_digits.py in a repository checkout, or pass --pretrained /path/to/checkpoint"
        )
    if tag != BUNDLED_TAG:
        log.info("%s has no '%s' weights; loading its bundled checkpoint %s", name, tag, path)
    return BUNDLED_TAG, str(path)


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Seed torch's CPU RNG for a block (random init is reproducible), restoring the caller's RNG after."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


class _DropOpenClipNoWeights(logging.Filter):
    """Drop open_clip's own 'No pretrained weights loaded' line (our warning already says it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("No pretrained weights loaded")


@contextlib.contextmanager
def _quiet_open_clip() -> Iterator[None]:
    root, flt = logging.getLogger(), _DropOpenClipNoWeights()
    root.addFilter(flt)
    try:
        yield
    finally:
        root.removeFilter(flt)


# ---------------------------------------------------------------------------------------------
# Text classifier


def pretrained_id(name: str, pretrained: str | None) -> str:
    """Identity of weights for cache keys: the tag, a checkpoint's path+size+mtime, or the seeded random init."""
    import open_clip

    p = str(pretrained or "none")
    if p == "none":
        return f"none:seed{INIT_SEED}:torch{torch.__version__}:open_clip{open_clip.__version__}"
    if p == BUNDLED_TAG and name in BUNDLED_CHECKPOINTS:
        p = str(BUNDLED_CHECKPOINTS[name])  # the shipped file's identity: a regenerated one is new weights
    path = Path(p).expanduser()
    if path.is_file() and not is_known_tag(name, p):
        st = path.stat()
        return f"file:{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    return f"tag:{p}"


def weights_id(clip: ClipModel) -> str:
    """`pretrained_id` of a loaded model."""
    return pretrained_id(clip.name, clip.pretrained)


def classifier_key(clip: ClipModel, classnames: Sequence[str], templates: Sequence[str]) -> str:
    """Hash of (model, pretrained, precision, class names, templates): the classifier cache key."""
    blob = json.dumps(
        {
            "model": clip.name,
            "weights": weights_id(clip),
            "precision": clip.precision,
            "classnames": list(classnames),
            "templates": list(templates),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:24]


def encode_classes(clip: ClipModel, classnames: Sequence[str], templates: Sequence[str]) -> torch.Tensor:
    """Per class: mean of the normalised template embeddings, re-normalised. -> [C, d] float32."""
    prompts = [fill(t, c) for c in classnames for t in templates]
    feats = torch.cat([clip.encode_text(prompts[i : i + TEXT_CHUNK]) for i in range(0, len(prompts), TEXT_CHUNK)])
    mean = feats.view(len(classnames), len(templates), -1).mean(dim=1)
    return torch.nn.functional.normalize(mean, dim=-1)


def build_text_classifier(
    clip: ClipModel, classnames: list[str], templates: list[str], cache_dir: str | Path | None = None
) -> torch.Tensor:
    """Zero-shot text classifier [C, d] (float32, on clip.device), cached on disk when `cache_dir` is set."""
    names = [str(c) for c in classnames]
    if not names:
        raise UserError("no class names given; pass at least two class names (a labels file or a dataset)")
    templates = check_templates(templates)
    path = Path(cache_dir).expanduser() / f"text-{classifier_key(clip, names, templates)}.npy" if cache_dir else None
    if path is not None and path.is_file():
        try:
            arr = np.load(path, allow_pickle=False)
            if arr.ndim == 2 and arr.shape[0] == len(names) and np.isfinite(arr).all():
                log.info("text classifier from cache %s", path)
                return torch.from_numpy(arr.astype(np.float32)).to(clip.device)
        except (OSError, ValueError):
            pass
        log.warning("ignoring unreadable classifier cache %s; recomputing", path)
    weights = encode_classes(clip, names, templates)
    if not bool(torch.isfinite(weights).all()):
        raise UserError(
            f"--pretrained {clip.pretrained}: --model {clip.name} gives non-finite text features (NaN or "
            f"inf) in {clip.precision}: its weights overflow there; pass --precision fp32 or a "
            "checkpoint with finite weights"
        )
    if path is not None:
        try:
            with atomic_open(path, "wb") as fh:
                np.save(fh, weights.cpu().numpy())
        except OSError as exc:
            log.warning("could not write classifier cache %s (%s); continuing without it", path, exc)
    return weights
