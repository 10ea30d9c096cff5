"""Configs: YAML onto dataclasses, unknown keys rejected by name, overrides typed and validated."""
from __future__ import annotations

import pytest

from mstta import UserError, load_dataset_config
from mstta.config import CONFIG_DIR

DATASETS = ["imagenet", "imagenet_a", "imagenet_v2", "imagenet_r", "imagenet_sketch", "fgvc_aircraft",
            "caltech101", "stanford_cars", "dtd", "eurosat", "oxford_flowers", "food101", "oxford_pets",
            "sun397", "ucf101"]


@pytest.mark.parametrize("dataset", DATASETS)
def test_every_dataset_config_loads(dataset):
    cfg = load_dataset_config(CONFIG_DIR / f"{dataset}.yaml")
    assert (cfg.engine.k, cfg.engine.alpha, cfg.engine.capacity, cfg.engine.lam) == (2, 0.8, 3, 1.0)


def test_tda_values_and_views():
    pets = load_dataset_config(CONFIG_DIR / "oxford_pets.yaml")
    assert (pets.engine.cache_alpha, pets.engine.beta, pets.engine.view_mode) == (2.0, 7.0, "original")
    sketch = load_dataset_config(CONFIG_DIR / "imagenet_sketch.yaml")
    assert (sketch.engine.cache_alpha, sketch.engine.beta, sketch.bench.views) == (2.363, 7.45, 64)


def test_overrides_apply_last_with_types():
    cfg = load_dataset_config(CONFIG_DIR / "dtd.yaml", ["k=4", "alpha=1", "bank_size=none", "views=8", "kernel=linear"])
    assert (cfg.engine.k, cfg.engine.alpha, cfg.engine.bank_size, cfg.bench.views, cfg.engine.kernel) == \
        (4, 1.0, None, 8, "linear")
    assert isinstance(cfg.engine.alpha, float)


@pytest.mark.parametrize("overrides,message", [
    (["kk=4"], "unknown key 'kk'"),
    (["k=-1"], "bad value for 'k'"),
    (["k=2.5"], "bad value for 'k'"),
    (["alpha=1.5"], "bad value for 'alpha'"),
    (["alpha=abc"], "bad value for 'alpha'"),
    (["kernel=rbf"], "bad value for 'kernel'"),
    (["k"], "expected KEY=VALUE"),
])
def test_bad_overrides(overrides, message):
    with pytest.raises(UserError, match=message):
        load_dataset_config(None, overrides)


def test_unknown_yaml_key_names_section_and_allowed(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("engine:\n  k: 2\n  alhpa: 0.8\n")
    with pytest.raises(UserError, match=r"unknown key 'alhpa' in .*c.yaml.engine; allowed keys: k, alpha"):
        load_dataset_config(p)
    p.write_text("engines: {}\n")
    with pytest.raises(UserError, match="unknown key 'engines'"):
        load_dataset_config(p)
    p.write_text("engine: [1, 2\n")
    with pytest.raises(UserError, match="not valid YAML"):
        load_dataset_config(p)
    with pytest.raises(UserError, match="config file not found"):
        load_dataset_config(tmp_path / "missing.yaml")
