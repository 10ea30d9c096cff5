"""Configuration: YAML files mapped onto dataclasses that reject unknown keys.

Layers apply in a fixed order: defaults -> YAML file -> `key=value` overrides -> validation in
`__post_init__`. There is no global config; the dataclass is passed down.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from .checks import check as _check
from .checks import check_int as _int
from .checks import check_num as _num
from .checks import is_int_in
from .checks import show as _show
from .errors import UserError
from .families import (
    FAMILIES,
    BcaParams,
    CtptParams,
    DmnParams,
    DotaParams,
    DpeParams,
    MtaParams,
    OnzetaParams,
    TptParams,
    ZeroParams,
)

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"

KERNELS = ("exp", "linear")
# Every dataset of the paper has fewer test samples (ImageNet-Sketch, the largest, 50,889), so
# benchmark results equal the unbounded bank's bit for bit, while an endless stream (a webcam)
# keeps flat memory and a flat step time.
DEFAULT_BANK_SIZE = 65_536
FAMILY_SECTIONS = tuple(FAMILIES)  # EngineConfig's family sections, one per family module
# How a multi-view sample becomes one query: TDA's confident views, view 0, or a family's own view
# combination (ZERO's voters, MTA's mode: combinations no paper reports for the cache methods).
VIEW_MODES = ("confident", "original", *(n for n, f in FAMILIES.items() if hasattr(f, "aggregate")))

# Upper bounds of the values that memory or time grows with (docs/limits.md gives each reason).
# Each is far above anything the paper or its peers use, and low enough that a typo (an extra
# zero run) gets a one-line refusal instead of a MemoryError or a run that never ends.
MAX_K = 256  # paper: k = 2 (ablation up to 16); kNN gathers [chunk, k, d] floats
MAX_MS_STEPS = 64  # paper: 1 step (ablation 2, 4); time grows linearly with steps
MAX_CAPACITY = 256  # TDA: 3 positive, 2 negative per class; cache [C, Q, d] (+ [C, Q, C])
MAX_BANK_SIZE = 2**24  # 16,777,216 > 300x ImageNet's test set; the bank is [M, d] floats
MAX_VIEWS = 256  # TDA / BoostAdapter: 64 views; extraction time and [N, V, d] storage
MAX_WEIGHT = 1e6  # lam, alphas, betas, logit_scale (TDA's are <= 10; CLIP's scale 100):
# keeps every logit far inside float32 (1e6 x 1e6 x 256 << 3.4e38)
MIN_LOGIT_SCALE = 1e-3  # CLIP's is 100; below 1e-3 the scaled logits are ~0 (1e-320 underflows to 0
# in float32) and every sample gets the same prediction
MAX_SEED = 2**63 - 1  # torch.Generator.manual_seed takes a 64-bit integer; seeds are >= 0


@dataclass
class EngineConfig:
    """Hyperparameters of every method (names as in the paper: k, alpha, lam, beta, capacity)."""

    k: int = 2  # kNN neighbours of the mean shift, Eq. (9)
    alpha: float = 0.8  # mean-shift weight: z ~ (1-alpha) f + alpha/m sum_nn f_j, Eq. (10)
    ms_steps: int = 1  # mean-shift steps (the paper uses 1; its ablation 2 and 4)
    bank_size: int | None = (
        DEFAULT_BANK_SIZE  # FIFO bound of the feature bank M; None = unbounded (the paper's literal setting)
    )
    capacity: int = 3  # Q: entries per class in the positive cache (TDA's shot capacity)
    lam: float = 1.0  # lambda: weight of the cache logits; 0 = the CLIP logits of the method's prediction path
    kernel: str = "exp"  # cache affinity: "exp" = exp(-beta(1 - qK^T)) (TDA), "linear" = qK^T (§3.1)
    cache_alpha: float = 2.0  # a: TDA's positive-cache alpha (per dataset in configs/<dataset>.yaml)
    beta: float = 5.0  # TDA's positive-cache beta (sharpness of the exp kernel)
    logit_scale: float = 100.0  # CLIP's logit scale
    neg_capacity: int = 2  # negative cache entries per class (tda, tda+ms, boostadapter*)
    neg_alpha: float = 0.117  # negative-cache logit multiplier (subtracted)
    neg_beta: float = 1.0  # negative-cache kernel sharpness
    neg_entropy_lower: float = 0.2  # admit when lower < H/log2(C) < upper
    neg_entropy_upper: float = 0.5
    neg_mask_lower: float = 0.03  # negative value: 1 where lower < p < upper
    neg_mask_upper: float = 1.0
    delta: int = 0  # BoostAdapter: extra per-class capacity of the boosted cache
    view_mode: str = "confident"  # multi-view samples: "confident" (TDA, OOD) or "original" (view 0)
    view_ratio: float = 0.1  # fraction of views kept by confidence (floor(0.1*64) = 6)
    bank_dtype: str = (
        "float32"  # storage of the kNN bank: float32 (exact) or float16/bfloat16 (half the bytes; sums in float32)
    )
    # The other families' hyperparameters, one section each (`engine: dota: {eta: 0.3}` in a dataset
    # YAML, `--set dota.eta=0.3`); each section's defaults and sources are in its module's `Params`.
    zero: ZeroParams = field(default_factory=ZeroParams)
    mta: MtaParams = field(default_factory=MtaParams)
    dmn: DmnParams = field(default_factory=DmnParams)
    dota: DotaParams = field(default_factory=DotaParams)
    onzeta: OnzetaParams = field(default_factory=OnzetaParams)
    bca: BcaParams = field(default_factory=BcaParams)
    dpe: DpeParams = field(default_factory=DpeParams)
    tpt: TptParams = field(default_factory=TptParams)
    ctpt: CtptParams = field(default_factory=CtptParams)

    def __post_init__(self) -> None:
        _int(self, "k", 1, MAX_K)
        _num(self, "alpha", 0.0, 1.0)
        _int(self, "ms_steps", 1, MAX_MS_STEPS)
        if self.bank_size is not None:
            _int(self, "bank_size", 1, MAX_BANK_SIZE, " or none (unbounded)")
        _int(self, "capacity", 1, MAX_CAPACITY)
        _num(self, "lam", 0.0, MAX_WEIGHT)
        _check(self.kernel in KERNELS, "kernel", self.kernel, f"one of {', '.join(KERNELS)}")
        _num(self, "cache_alpha", 0.0, MAX_WEIGHT)
        _num(self, "beta", 0.0, MAX_WEIGHT)
        _num(self, "logit_scale", MIN_LOGIT_SCALE, MAX_WEIGHT)
        _int(self, "neg_capacity", 1, MAX_CAPACITY)
        _num(self, "neg_alpha", 0.0, MAX_WEIGHT)
        _num(self, "neg_beta", 0.0, MAX_WEIGHT)
        for key in ("neg_entropy_lower", "neg_entropy_upper", "neg_mask_lower", "neg_mask_upper"):
            _num(self, key, 0.0, 1.0)  # compared with normalised entropies and probabilities
        _check(
            self.neg_entropy_lower < self.neg_entropy_upper,
            "neg_entropy_lower",
            self.neg_entropy_lower,
            f"below neg_entropy_upper ({self.neg_entropy_upper})",
        )
        _check(
            self.neg_mask_lower < self.neg_mask_upper,
            "neg_mask_lower",
            self.neg_mask_lower,
            f"below neg_mask_upper ({self.neg_mask_upper})",
        )
        _int(self, "delta", 0, MAX_CAPACITY)
        _check(self.view_mode in VIEW_MODES, "view_mode", self.view_mode, f"one of {', '.join(VIEW_MODES)}")
        _num(self, "view_ratio", 0.0, 1.0, low_open=True)
        _check(
            self.bank_dtype in ("float32", "float16", "bfloat16"),
            "bank_dtype",
            self.bank_dtype,
            "one of float32 (exact), float16, bfloat16",
        )


@dataclass
class BenchConfig:
    """How a dataset is fed to the engine in the benchmark (the `bench:` section of a dataset YAML)."""

    views: int = 1  # images per sample fed to CLIP, the original included (64 for OOD)
    augment: str = "augmix"  # view augmentation: "augmix" (TDA/TPT) or "crop" (BoostAdapter)

    def __post_init__(self) -> None:
        _int(self, "views", 1, MAX_VIEWS)
        _check(self.augment in ("augmix", "crop"), "augment", self.augment, "one of augmix, crop")


@dataclass
class DatasetConfig:
    """A `configs/<dataset>.yaml` file: engine hyperparameters and benchmark feeding."""

    engine: EngineConfig = field(default_factory=EngineConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)


def check_seed(value: Any, flag: str) -> int:
    """A seed: an integer in [0, 2^63 - 1] (what torch.Generator.manual_seed takes), else a UserError."""
    shown = _show(value)
    if isinstance(value, str):
        try:
            value = int(value.strip()) if len(value) <= 40 else None
        except ValueError:
            value = None
    if not is_int_in(value, 0, MAX_SEED):
        raise UserError(f"{flag} {shown}: expected an integer seed in [0, 2^63 - 1], e.g. {flag} 1")
    return value


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """Convert a YAML/CLI value to a field's declared type, or raise a one-line UserError.

    A number the user typed in a form YAML 1.1 reads as a string (`1e-5`) is parsed as written."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, key)
            except UserError:
                pass
        expected = " or ".join("none" if a is type(None) else _TYPE_WORDS.get(a, str(a)) for a in args)
        raise UserError(f"bad value for '{key}': {_show(value)}; expected {expected}")
    if hint is bool and isinstance(value, bool):
        return value
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is float and not isinstance(value, bool):
        if isinstance(value, str):
            try:
                return float(value.strip().replace("_", ""))
            except ValueError:
                pass
        elif isinstance(value, (int, float)):
            try:
                return float(value)
            except OverflowError:  # an integer beyond float range: refused by the bounds as inf
                return math.inf
    if hint is str and isinstance(value, str):
        return value
    if hint in _TYPE_WORDS:
        raise UserError(f"bad value for '{key}': {_show(value)}; expected {_TYPE_WORDS[hint]}")
    return value


_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def from_dict(cls: type, data: dict[str, Any] | None, where: str, base: Any = None) -> Any:
    """Build dataclass `cls` from a mapping, on top of `base`; unknown keys are rejected by name."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"{where}: expected a mapping of keys to values, got {type(data).__name__}")
    hints = _hints(cls)
    names = [f.name for f in fields(cls)]
    values = {n: getattr(base, n) for n in names} if base is not None else {}
    try:
        for key, value in data.items():
            if key not in hints:
                raise UserError(f"unknown key {_show(key)} in {where}; allowed keys: {', '.join(names)}")
            hint = hints[key]
            if dataclasses.is_dataclass(hint):
                values[key] = from_dict(hint, value, f"{where}.{key}", values.get(key))
            else:
                values[key] = _coerce(value, hint, key)
        return cls(**values)
    except UserError as exc:
        if where in str(exc):
            raise
        raise UserError(f"{where}: {exc}") from None


MAX_CONFIG_BYTES = 1_000_000  # a dataset config is ~1 KB; anything near this is not a config


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, line: int):
        super().__init__(f"duplicate key {_show(key)}")
        self.key, self.line = key, line


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, except that a key given twice in one mapping is an error (PyYAML
    silently keeps the last one). Keys merged in with `<<` may still be overridden."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: set = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # unhashable: SafeLoader reports it
                    continue
                if duplicate:
                    raise _DuplicateKey(key, key_node.start_mark.line + 1)
        return super().construct_mapping(node, deep)


def load_yaml_text(text: str) -> Any:
    """`yaml.safe_load` that refuses duplicate keys (raises a yaml.YAMLError)."""
    return yaml.load(text, Loader=_StrictLoader)  # safe: _StrictLoader is a SafeLoader subclass


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping, with one-line errors naming the file."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"config file not found: {p}; pass an existing YAML file (see configs/)")
    if not p.is_file():
        raise UserError(f"config file {p} is not a regular file; pass a YAML file (see configs/)")
    if p.stat().st_size > MAX_CONFIG_BYTES:
        raise UserError(
            f"config file {p} is {p.stat().st_size:,} bytes; a config is a small YAML file "
            f"(limit {MAX_CONFIG_BYTES:,} bytes)"
        )
    try:
        with p.open("rb") as fh:  # at most the limit: a /proc file reports size 0 and may be endless
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise UserError(
            f"config file {p} (--config) cannot be read ({exc.strerror or exc}); pass a YAML file (see configs/)"
        ) from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise UserError(f"config file {p} (--config) is over {MAX_CONFIG_BYTES:,} bytes; a config is a small YAML file")
    try:
        data = load_yaml_text(raw.decode("utf-8-sig"))
    except _DuplicateKey as exc:
        raise UserError(f"{p}: duplicate key {_show(exc.key)} (line {exc.line}); give each key once") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise UserError(f"{p}: not valid YAML ({one_line_yaml(exc)})") from None
    except ValueError:  # an integer of more than 4,300 digits (Python's conversion limit)
        raise UserError(f"{p}: a number has too many digits; values are bounded (docs/limits.md)") from None
    except RecursionError:
        raise UserError(f"{p}: not valid YAML (nested too deeply)") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{p}: expected a YAML mapping at the top level")
    return data


def one_line_yaml(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]


def parse_overrides(pairs: Iterable[str]) -> dict[str, Any]:
    """`["k=4", "alpha=0.7"]` -> {"k": 4, "alpha": 0.7} (values parsed as YAML scalars; a value YAML
    cannot read, e.g. an integer past Python's 4,300-digit limit, is kept as typed and refused by
    the field's type check). The one place `--set` strings are parsed."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"--set {_show(pair)}: expected KEY=VALUE, e.g. --set k=4")
        try:
            out[key] = load_yaml_text(raw) if raw.strip() else None
        except (yaml.YAMLError, RecursionError, ValueError):
            out[key] = raw  # kept as typed; the field's type check names it
    return out


def load_dataset_config(
    path: str | Path | None = None, overrides: Iterable[str] | Mapping[str, Any] = ()
) -> DatasetConfig:
    """Defaults, then the YAML file (sections `engine:` and `bench:`), then `--set` overrides
    (`KEY=VALUE` strings, or the mapping `parse_overrides` made of them).

    An override key is looked up in `engine` first, then `bench` (names are distinct).
    """
    cfg = DatasetConfig()
    if path is not None:
        cfg = from_dict(DatasetConfig, read_yaml(path), str(path), cfg)
    engine_keys = {f.name for f in fields(EngineConfig)}
    bench_keys = {f.name for f in fields(BenchConfig)}
    eng: dict[str, Any] = {}
    bench: dict[str, Any] = {}
    settings = overrides if isinstance(overrides, Mapping) else parse_overrides(overrides)
    sections = set(FAMILY_SECTIONS)
    for key, value in settings.items():
        section, dot, sub = key.partition(".")
        if dot and section in sections:  # a family's hyperparameter: --set dota.eta=0.3
            eng.setdefault(section, {})[sub] = value
        elif key in engine_keys and key not in sections:
            eng[key] = value
        elif key in bench_keys:
            bench[key] = value
        else:
            allowed = sorted((engine_keys - sections) | bench_keys) + [f"{s}.KEY" for s in sorted(sections)]
            raise UserError(f"--set: unknown key {_show(key)}; allowed keys: {', '.join(allowed)}")
    return DatasetConfig(
        engine=from_dict(EngineConfig, eng, "--set", cfg.engine),
        bench=from_dict(BenchConfig, bench, "--set", cfg.bench),
    )


def dataset_config_path(dataset: str) -> Path:
    """`configs/<dataset>.yaml` for a dataset key (e.g. oxford_pets)."""
    return CONFIG_DIR / f"{dataset}.yaml"
