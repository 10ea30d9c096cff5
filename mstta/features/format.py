"""Feature files: the `.npz` exchange format between extraction and replay.

Arrays: `features` float16/32/64 [N, d] or [N, V, d] (view 0 = original image; N, V, d >= 1),
`text` [C, d] (C >= 2), optional `labels` int [N] (-1 = unknown), optional `classnames` [C]
strings, optional `meta` (a JSON string: model, dataset, views, seed, ...). Rows are
L2-normalised on load, scale-invariantly: any finite, non-zero magnitude (1e-300 in float64, 3e38 in
float32) gives the same unit rows. Headers are checked against the file and the machine before loading.
"""

from __future__ import annotations

import json
import lzma
import math
import tokenize
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..atomic import atomic_open
from ..errors import UserError
from ..safety import check_memory, human_bytes

ARRAYS = ("features", "text", "labels", "classnames", "meta")
FLOAT_TYPES = (np.float16, np.float32, np.float64)  # float128/longdouble refused: torch has none
COMPRESSIONS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}
# What a damaged or hostile archive raises while its members are read: a bad zip, a bad stream of
# its compression, a malformed `.npy` header dict (numpy parses it with ast/tokenize).
_ARCHIVE_ERRORS = (
    OSError,
    EOFError,
    ValueError,
    SyntaxError,
    RuntimeError,
    NotImplementedError,
    zipfile.BadZipFile,
    zlib.error,
    lzma.LZMAError,
    tokenize.TokenError,
)


@dataclass
class FeatureSet:
    """A loaded, validated feature file (rows unit-norm; text float32, features in the stored dtype)."""

    features: torch.Tensor  # [N, d] or [N, V, d], stored dtype (float16, 32 or 64)
    text: torch.Tensor  # [C, d]
    labels: np.ndarray | None = None  # [N] int64, -1 = unknown
    classnames: list[str] | None = None  # [C]
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

    @property
    def logit_scale(self) -> float | None:
        """The checkpoint's CLIP logit scale that extraction recorded in `meta` (None: not recorded;
        `mstta.engine.scale.file_scale` then uses the paper's 100)."""
        value = self.meta.get("logit_scale")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _first_bad_row(bad: np.ndarray) -> int:
    return int(np.argwhere(bad)[0][0])


def _check_rows(name: str, arr: np.ndarray, path: Path, chunk: int = 8192) -> None:
    """Reject non-finite values, all-zero rows and rows whose every value is subnormal in the
    stored dtype (below float32's 1.2e-38, e.g. 1e-45: too few bits left to carry a direction),
    naming the array and the first bad index (checked in chunks, so a 64-view ImageNet file is
    never copied whole; no numpy warning ever adds a line to the error)."""
    flat = arr.reshape(-1, arr.shape[-1])
    tiny = float(np.finfo(arr.dtype).tiny)
    for a in range(0, flat.shape[0], chunk):
        block = flat[a : a + chunk]
        with np.errstate(all="ignore"):
            nonfinite = ~np.isfinite(block).all(-1)
            largest = np.abs(block).max(-1)
        if nonfinite.any():
            i = a + _first_bad_row(nonfinite)
            raise UserError(
                f"{path}: array '{name}' has a non-finite value at index {_row_index(arr, i)}; "
                "re-extract the features or drop that sample"
            )
        small = ~(largest >= tiny)
        if small.any():
            i = _first_bad_row(small)
            if largest[i] == 0:
                raise UserError(
                    f"{path}: array '{name}' has an all-zero row at index {_row_index(arr, a + i)}; "
                    "a feature must be non-zero to be L2-normalised"
                )
            i += a
            raise UserError(
                f"{path}: array '{name}' has a row of subnormal values at index {_row_index(arr, i)} "
                f"(all below {arr.dtype}'s {tiny:.3g}); too small to carry a direction: save the "
                "features at their usual scale (CLIP's are near 1) or as float64"
            )


def _normalized(arr: np.ndarray, chunk: int = 8192) -> torch.Tensor:
    """L2-normalise rows chunk by chunk, keeping the stored dtype (fp16 stays fp16): each row is first
    divided by its largest magnitude (in float64 for a float64 file), so 1e-300 or 3e38 neither
    under- nor overflows, then normalised in float32 (values within [-1, 1])."""
    if not arr.dtype.isnative:  # a big-endian file: torch reads native byte order only
        arr = arr.astype(arr.dtype.newbyteorder("="))
    out = torch.from_numpy(np.ascontiguousarray(arr))
    flat = out.view(-1, arr.shape[-1])
    wide = torch.promote_types(out.dtype, torch.float32)
    for a in range(0, flat.shape[0], chunk):
        block = flat[a : a + chunk].to(wide)
        block = block / block.abs().amax(-1, keepdim=True)
        flat[a : a + chunk] = torch.nn.functional.normalize(block.float(), dim=-1).to(out.dtype)
    return out


def _row_index(arr: np.ndarray, flat_row: int) -> str:
    if arr.ndim == 3:
        return f"[{flat_row // arr.shape[1]}, {flat_row % arr.shape[1]}]"
    return str(flat_row)


@dataclass(frozen=True)
class ArrayHeader:
    """What a `.npy` member of the archive declares, read before anything is allocated."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def _bad_npz(p: Path, why: object) -> UserError:
    return UserError(
        f"cannot read feature file {p}: not a valid .npz ({' '.join(str(why).split())[:120]}); "
        "a feature file is an np.savez archive (see docs/engine.md)"
    )


def _read_header(zf: zipfile.ZipFile, info: zipfile.ZipInfo, p: Path, name: str) -> ArrayHeader:
    """Shape and dtype of one member from its `.npy` header, checked against the member's size:
    a header claiming 10^12 x 64 in a small file is refused here, never allocated."""
    with zf.open(info) as fp:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(fp)
        else:
            raise _bad_npz(p, f"array '{name}' uses .npy format version {version}")
        offset = fp.tell()
    if dtype.hasobject:
        raise UserError(
            f"{p}: array '{name}' holds Python objects (pickled); a feature file holds numbers and strings only"
        )
    head = ArrayHeader(tuple(int(n) for n in shape), dtype)
    if any(n < 0 for n in head.shape):
        raise _bad_npz(p, f"array '{name}' declares a negative dimension in shape {head.shape}")
    if offset + head.nbytes != info.file_size:
        raise UserError(
            f"{p}: array '{name}' declares shape {head.shape} {dtype} ({human_bytes(head.nbytes)}) "
            f"but holds {human_bytes(max(0, info.file_size - offset))}; the file is truncated or "
            "corrupt: re-extract it"
        )
    return head


def _read_archive(p: Path) -> dict[str, np.ndarray]:
    """Every array of the archive, after checking each header against its size and the total
    against this machine's memory (one-line errors; no MemoryError, no pickle)."""
    try:
        zf = zipfile.ZipFile(p)
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as exc:
        raise _bad_npz(p, exc) from None
    with zf:
        members: dict[str, zipfile.ZipInfo] = {}
        for info in zf.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if name not in ARRAYS:
                raise UserError(f"{p}: unknown array {name[:60]!r}; allowed arrays: {', '.join(ARRAYS)}")
            if name in members:
                raise UserError(f"{p}: array '{name}' appears twice in the archive; re-extract the file")
            _check_member(p, name, info)
            members[name] = info
        for key in ("features", "text"):
            if key not in members:
                raise UserError(
                    f"{p}: missing array '{key}'; a feature file needs 'features' [N,d] or [N,V,d] and 'text' [C,d]"
                )
        try:
            heads = {name: _read_header(zf, info, p, name) for name, info in members.items()}
            _check_shapes(p, heads["features"], heads["text"])
            shape = "x".join(map(str, heads["features"].shape))
            check_memory(
                sum(h.nbytes for h in heads.values()),
                f"feature file {p} (features {shape} {heads['features'].dtype})",
                fix="split the file or use a machine with more memory",
            )
            out = {}
            for name, info in members.items():
                with zf.open(info) as fp:
                    out[name] = np.lib.format.read_array(fp, allow_pickle=False)
            return out
        except UserError:
            raise
        except _ARCHIVE_ERRORS as exc:
            raise _bad_npz(p, exc) from None


def _check_member(p: Path, name: str, info: zipfile.ZipInfo) -> None:
    """A member numpy can read: not encrypted, stored or compressed with deflate, bzip2 or lzma."""
    if info.flag_bits & 0x1:
        raise UserError(f"{p}: array '{name}' is encrypted; save the file with np.savez (no password)")
    if info.compress_type not in COMPRESSIONS:
        raise UserError(
            f"{p}: array '{name}' uses zip compression method {info.compress_type}, which numpy cannot "
            "read; save the file with np.savez or np.savez_compressed"
        )


def _check_shapes(p: Path, feats: ArrayHeader, text: ArrayHeader) -> None:
    """float16/32/64 only; features [N, d] or [N, V, d] with N, V, d >= 1; text [C, d], C >= 2."""
    for name, h in (("features", feats), ("text", text)):
        if h.dtype.type not in FLOAT_TYPES:
            raise UserError(
                f"{p}: array '{name}' must be float16, float32 or float64, got {h.dtype}; "
                "re-save it with .astype(np.float32)"
            )
    if len(feats.shape) not in (2, 3) or min(feats.shape) < 1:
        raise UserError(f"{p}: array 'features' must be [N, d] or [N, V, d] with N, V, d >= 1, got shape {feats.shape}")
    if len(text.shape) != 2 or text.shape[0] < 2 or text.shape[1] < 1:
        raise UserError(f"{p}: array 'text' must be [C, d] with C >= 2 classes and d >= 1, got shape {text.shape}")
    if feats.shape[-1] != text.shape[1]:
        raise UserError(f"{p}: shape mismatch: 'features' has d={feats.shape[-1]} but 'text' has d={text.shape[1]}")


def load_features(path: str | Path) -> FeatureSet:
    """Read and validate a feature file; every problem is a one-line UserError naming it."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"feature file not found: {p}; create one with `mstta-bench extract` (see README)")
    if not p.is_file():
        raise UserError(f"feature file is not a file: {p}; pass an .npz written by `mstta-bench extract`")
    data = _read_archive(p)
    feats, text = data["features"], data["text"]
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
            raise UserError(
                f"{p}: array 'labels' is out of range at index {i} (value {int(labels[i])}); "
                f"labels must be in [0, {c - 1}] or -1 for unknown"
            )
        labels = labels.astype(np.int64)

    classnames = None
    if "classnames" in data:
        names = data["classnames"]
        if names.ndim != 1 or names.shape[0] != c or names.dtype.kind not in "US":
            raise UserError(
                f"{p}: array 'classnames' must hold {c} strings (one per row of 'text'), "
                f"got {names.dtype} {names.shape}"
            )
        classnames = [s.decode("utf-8", "replace") if isinstance(s, bytes) else str(s) for s in names.tolist()]
        _check_unique(p, classnames)

    meta = _parse_meta(p, data["meta"]) if "meta" in data else {}
    return FeatureSet(_normalized(feats), _normalized(text).float(), labels, classnames, meta)


def _parse_meta(p: Path, m: np.ndarray) -> dict[str, Any]:
    try:
        if m.ndim != 0 or m.dtype.kind != "U":
            raise json.JSONDecodeError("not a string", "", 0)
        meta = json.loads(str(m))
    except (json.JSONDecodeError, RecursionError):
        raise UserError(f"{p}: array 'meta' must be a JSON string") from None
    if not isinstance(meta, dict):
        raise UserError(f"{p}: array 'meta' must be a JSON object")
    return meta


META_BYTES = 1 << 20  # a feature file's meta (a JSON string) read on its own is at most this


def read_meta(path: str | Path) -> dict[str, Any]:
    """Only the `meta` of a feature file ({} when it has none), without reading its features."""
    p = Path(path)
    try:
        with zipfile.ZipFile(p) as zf:
            info = next((i for i in zf.infolist() if i.filename in ("meta", "meta.npy")), None)
            if info is None:
                return {}
            _check_member(p, "meta", info)
            head = _read_header(zf, info, p, "meta")
            if head.nbytes > META_BYTES:
                raise UserError(
                    f"{p}: array 'meta' declares {human_bytes(head.nbytes)}; a meta string is at most "
                    f"{human_bytes(META_BYTES)}: re-extract the file"
                )
            with zf.open(info) as fp:
                return _parse_meta(p, np.lib.format.read_array(fp, allow_pickle=False))
    except UserError:
        raise
    except _ARCHIVE_ERRORS as exc:
        raise _bad_npz(p, exc) from None


@dataclass(frozen=True)
class Peek:
    """What a feature file says about itself, read without its features: shapes, class names, meta."""

    features: tuple[int, ...]  # the declared shape of 'features'
    text: tuple[int, ...]  # of 'text' [C, d]
    classnames: list[str] | None
    meta: dict[str, Any]


def peek_features(path: str | Path) -> Peek:
    """A feature file's headers (checked as `load_features` checks them), class names and meta,
    without reading its features; every problem is one UserError naming the file."""
    p = Path(path)
    try:
        with zipfile.ZipFile(p) as zf:
            infos = {i.filename[:-4] if i.filename.endswith(".npy") else i.filename: i for i in zf.infolist()}
            for key in ("features", "text"):
                if key not in infos:
                    raise UserError(f"{p}: missing array '{key}'; re-extract the file")
            heads = {}
            for name, info in infos.items():
                _check_member(p, name, info)
                heads[name] = _read_header(zf, info, p, name)
            _check_shapes(p, heads["features"], heads["text"])
            small = {}
            for name in ("classnames", "meta"):
                if name in heads:
                    if heads[name].nbytes > PEEK_BYTES:
                        raise UserError(
                            f"{p}: array '{name}' declares {human_bytes(heads[name].nbytes)}; at most "
                            f"{human_bytes(PEEK_BYTES)}: re-extract the file"
                        )
                    with zf.open(infos[name]) as fp:
                        small[name] = np.lib.format.read_array(fp, allow_pickle=False)
    except UserError:
        raise
    except _ARCHIVE_ERRORS as exc:
        raise _bad_npz(p, exc) from None
    names = small.get("classnames")
    classnames = None
    if names is not None and names.ndim == 1 and names.dtype.kind in "US":
        classnames = [s.decode("utf-8", "replace") if isinstance(s, bytes) else str(s) for s in names.tolist()]
    meta = _parse_meta(p, small["meta"]) if "meta" in small else {}
    return Peek(heads["features"].shape, heads["text"].shape, classnames, meta)


PEEK_BYTES = 16 << 20  # 'classnames' or 'meta' read without the features: at most this


def _check_unique(p: Path, classnames: list[str]) -> None:
    """Class names are distinct (two rows of 'text' with one name make a prediction ambiguous)."""
    seen: dict[str, int] = {}
    for i, name in enumerate(classnames):
        if name in seen:
            raise UserError(
                f"{p}: array 'classnames' has {name[:60]!r} twice (classes {seen[name]} and {i}); "
                "give each class one name"
            )
        seen[name] = i


def _numpy(x: np.ndarray | torch.Tensor, dtype: Any) -> np.ndarray:
    """As a numpy array of `dtype`, without an intermediate float32 copy of a large array."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        x = x.numpy() if x.dtype in (torch.float16, torch.float32, torch.float64) else x.float().numpy()
    return np.asarray(x, dtype=dtype)


def save_features(
    path: str | Path,
    features: np.ndarray | torch.Tensor,
    text: np.ndarray | torch.Tensor,
    labels: np.ndarray | None = None,
    classnames: list[str] | None = None,
    meta: dict[str, Any] | None = None,
    dtype: Any = np.float16,
) -> Path:
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
