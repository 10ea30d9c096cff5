"""Feature files: the `.npz` exchange format between extraction and replay.

Arrays: `features` float16/32 [N, d] or [N, V, d] (view 0 = original image), `text` [C, d],
optional `labels` int [N] (-1 = unknown), optional `classnames` [C] strings, optional `meta`
(a JSON string: model, dataset, views, seed, ...). Rows are L2-normalised on load.
"""
from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .atomic import atomic_open
from .errors import UserError

ARRAYS = ("features", "text", "labels", "classnames", "meta")


@dataclass
class FeatureSet:
    """A loaded, validated feature file (rows unit-norm; text float32, features in the stored dtype)."""

    features: torch.Tensor                 # [N, d] or [N, V, d], stored dtype (float16 or float32)
    text: torch.Tensor                     # [C, d]
    labels: np.ndarray | None = None       # [N] int64, -1 = unknown
    classnames: list[str] | None = None    # [C]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def num_samples(self) -> int:
        return self.features.shape[0]

    @property
    def num_classes(self) -> int:
        return self.text.shape[0]

    @property
    def num_views(self) -> int:
        return 1 if self.features.dim() == 2 else self.features.shape[1]


def _first_bad_row(bad: np.ndarray) -> int:
    return int(np.argwhere(bad)[0][0])


def _check_rows(name: str, arr: np.ndarray, path: Path, chunk: int = 8192) -> None:
    """Reject non-finite values and zero rows, naming the array and the first bad index
    (checked in chunks, so a 64-view ImageNet file is never copied whole)."""
    flat = arr.reshape(-1, arr.shape[-1])
    for a in range(0, flat.shape[0], chunk):
        block = flat[a:a + chunk].astype(np.float32)
        nonfinite = ~np.isfinite(block).all(-1)
        if nonfinite.any():
            i = a + _first_bad_row(nonfinite)
            raise UserError(f"{path}: array '{name}' has a non-finite value at index {_row_index(arr, i)}; "
                            "re-extract the features or drop that sample")
        zero = ~(np.abs(block) > 0).any(-1)
        if zero.any():
            i = a + _first_bad_row(zero)
            raise UserError(f"{path}: array '{name}' has an all-zero row at index {_row_index(arr, i)}; "
                            "a feature must be non-zero to be L2-normalised")


def _normalized(arr: np.ndarray, chunk: int = 8192) -> torch.Tensor:
    """L2-normalise rows in float32, chunk by chunk, keeping the stored dtype (fp16 stays fp16)."""
    out = torch.from_numpy(np.ascontiguousarray(arr))
    flat = out.view(-1, arr.shape[-1])
    for a in range(0, flat.shape[0], chunk):
        flat[a:a + chunk] = torch.nn.functional.normalize(flat[a:a + chunk].float(), dim=-1).to(out.dtype)
    return out


def _row_index(arr: np.ndarray, flat_row: int) -> str:
    if arr.ndim == 3:
        return f"[{flat_row // arr.shape[1]}, {flat_row % arr.shape[1]}]"
    return str(flat_row)


def load_features(path: str | Path) -> FeatureSet:
    """Read and validate a feature file; every problem is a one-line UserError naming it."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"feature file not found: {p}; create one with `mstta-bench extract` (see README)")
    if not p.is_file():
        raise UserError(f"feature file is not a file: {p}")
    try:
        with np.load(p, allow_pickle=False) as npz:
            data = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise UserError(f"cannot read feature file {p}: not a valid .npz ({' '.join(str(exc).split())[:120]})") from None
    for key in ("features", "text"):
        if key not in data:
            raise UserError(f"{p}: missing array '{key}'; a feature file needs 'features' [N,d] or [N,V,d] and 'text' [C,d]")
    unknown = sorted(set(data) - set(ARRAYS))
    if unknown:
        raise UserError(f"{p}: unknown array '{unknown[0]}'; allowed arrays: {', '.join(ARRAYS)}")
    feats, text = data["features"], data["text"]
    if feats.dtype.kind != "f" or text.dtype.kind != "f":
        raise UserError(f"{p}: arrays 'features' and 'text' must be float16/float32 (got {feats.dtype}, {text.dtype})")
    if feats.ndim not in (2, 3) or feats.shape[0] == 0:
        raise UserError(f"{p}: array 'features' must be [N, d] or [N, V, d] with N >= 1, got shape {feats.shape}")
    if text.ndim != 2 or text.shape[0] < 2:
        raise UserError(f"{p}: array 'text' must be [C, d] with C >= 2, got shape {text.shape}")
    if feats.shape[-1] != text.shape[1]:
        raise UserError(f"{p}: shape mismatch: 'features' has d={feats.shape[-1]} but 'text' has d={text.shape[1]}")
    _check_rows("features", feats, p)
    _check_rows("text", text, p)
    n, c = feats.shape[0], text.shape[0]

    labels = None
    if "labels" in data:
        labels = data["labels"]
        if labels.dtype.kind not in "iu" or labels.ndim != 1:
            raise UserError(f"{p}: array 'labels' must be a 1-D integer array, got {labels.dtype} {labels.shape}")
        if labels.shape[0] != n:
            raise UserError(f"{p}: shape mismatch: 'labels' has {labels.shape[0]} entries but 'features' has N={n}")
        bad = (labels < -1) | (labels >= c)
        if bad.any():
            i = _first_bad_row(bad)
            raise UserError(f"{p}: array 'labels' is out of range at index {i} (value {int(labels[i])}); "
                            f"labels must be in [0, {c - 1}] or -1 for unknown")
        labels = labels.astype(np.int64)

    classnames = None
    if "classnames" in data:
        names = data["classnames"]
        if names.ndim != 1 or names.shape[0] != c or names.dtype.kind not in "US":
            raise UserError(f"{p}: array 'classnames' must hold {c} strings (one per row of 'text'), got {names.dtype} {names.shape}")
        classnames = [str(s) for s in names.tolist()]

    meta: dict[str, Any] = {}
    if "meta" in data:
        try:
            meta = json.loads(str(data["meta"]))
        except json.JSONDecodeError:
            raise UserError(f"{p}: array 'meta' must be a JSON string") from None
        if not isinstance(meta, dict):
            raise UserError(f"{p}: array 'meta' must be a JSON object")

    return FeatureSet(_normalized(feats), _normalized(text).float(), labels, classnames, meta)


def _numpy(x: np.ndarray | torch.Tensor, dtype: Any) -> np.ndarray:
    """As a numpy array of `dtype`, without an intermediate float32 copy of a large array."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        x = x.numpy() if x.dtype in (torch.float16, torch.float32, torch.float64) else x.float().numpy()
    return np.asarray(x, dtype=dtype)


def save_features(path: str | Path, features: np.ndarray | torch.Tensor, text: np.ndarray | torch.Tensor,
                  labels: np.ndarray | None = None, classnames: list[str] | None = None,
                  meta: dict[str, Any] | None = None, dtype: Any = np.float16) -> Path:
    """Write a feature file atomically (temp file + rename): never a half-written `.npz`."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {"features": _numpy(features, dtype), "text": _numpy(text, dtype)}
    if labels is not None:
        arrays["labels"] = np.asarray(labels, dtype=np.int64)
    if classnames is not None:
        arrays["classnames"] = np.asarray([str(c) for c in classnames])
    if meta is not None:
        arrays["meta"] = np.asarray(json.dumps(meta, sort_keys=True))
    with atomic_open(p, "wb") as fh:
        np.savez(fh, **arrays)
    return p
