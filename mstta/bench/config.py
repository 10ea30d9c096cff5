"""A dataset's config file (`configs/<dataset>.yaml`): the engine's hyperparameters (`engine:`)
and how the benchmark feeds the dataset to it (`bench:`), with `--set` overrides on top."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..checks import check as _check
from ..checks import check_int as _int
from ..checks import show as _show
from ..configfile import CONFIG_DIR, from_dict, parse_overrides, read_yaml
from ..engine.config import SECTIONS, EngineConfig
from ..errors import UserError
from ..features.views import MAX_VIEWS


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
    sections = set(SECTIONS)
    for key, value in settings.items():
        section, dot, sub = key.partition(".")
        if dot and section in sections:  # a section's key: --set dota.eta=0.3, --set forget.rule=idle
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
