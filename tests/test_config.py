"""Configs: YAML onto dataclasses, unknown keys rejected by name, overrides typed and validated."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mstta import UserError, load_dataset_config
from mstta.bench.config import BenchConfig
from mstta.checks import MAX_WEIGHT, check_seed
from mstta.configfile import CONFIG_DIR, parse_overrides
from mstta.engine.config import MAX_BANK_SIZE, MAX_K, MAX_MS_STEPS, MIN_LOGIT_SCALE, EngineConfig
from mstta.engine.families.cache import MAX_CAPACITY
from mstta.features.views import MAX_VIEWS

DATASETS = [
    "imagenet",
    "imagenet_a",
    "imagenet_v2",
    "imagenet_r",
    "imagenet_sketch",
    "fgvc_aircraft",
    "caltech101",
    "stanford_cars",
    "dtd",
    "eurosat",
    "oxford_flowers",
    "food101",
    "oxford_pets",
    "sun397",
    "ucf101",
]


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
    assert (cfg.engine.k, cfg.engine.alpha, cfg.engine.bank_size, cfg.bench.views, cfg.engine.kernel) == (
        4,
        1.0,
        None,
        8,
        "linear",
    )
    assert isinstance(cfg.engine.alpha, float)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["kk=4"], "unknown key 'kk'"),
        (["k=-1"], "bad value for 'k'"),
        (["k=2.5"], "bad value for 'k'"),
        (["alpha=1.5"], "bad value for 'alpha'"),
        (["alpha=abc"], "bad value for 'alpha'"),
        (["kernel=rbf"], "bad value for 'kernel'"),
        (["k"], "expected KEY=VALUE"),
    ],
)
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


BOUNDS = [
    ("k", MAX_K, 1),
    ("ms_steps", MAX_MS_STEPS, 1),
    ("capacity", MAX_CAPACITY, 1),
    ("neg_capacity", MAX_CAPACITY, 1),
    ("delta", MAX_CAPACITY, 0),
    ("bank_size", MAX_BANK_SIZE, 1),
    ("views", MAX_VIEWS, 1),
]


@pytest.mark.parametrize("key,high,low", BOUNDS)
def test_integer_bounds_are_inclusive(key, high, low):
    cfg = load_dataset_config(None, [f"{key}={high}"])
    assert getattr(cfg.engine if key != "views" else cfg.bench, key) == high
    load_dataset_config(None, [f"{key}={low}"])
    for bad in (high + 1, low - 1, 10**30):
        with pytest.raises(
            UserError,
            match=rf"^--set: bad value for '{key}': {bad}; expected an integer in "
            rf"\[{low}, {high:,}\]",
        ):
            load_dataset_config(None, [f"{key}={bad}"])


@pytest.mark.parametrize("key", ["lam", "cache_alpha", "beta", "logit_scale", "neg_alpha", "neg_beta"])
@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "inf", "nan", "1e400", str(MAX_WEIGHT * 1.01)])
def test_weights_are_finite_and_bounded(key, value):
    with pytest.raises(UserError, match=rf"bad value for '{key}'.*a finite number in"):
        load_dataset_config(None, [f"{key}={value}"])


def test_numbers_are_parsed_as_typed():
    """YAML 1.1 reads `1e-5` as a string; the user meant a number."""
    cfg = load_dataset_config(None, ["alpha=1e-5", "lam=2E3", "beta=1_000.5", "cache_alpha=3"])
    assert (cfg.engine.alpha, cfg.engine.lam, cfg.engine.beta, cfg.engine.cache_alpha) == (1e-5, 2000.0, 1000.5, 3.0)
    assert load_dataset_config(None, [f"lam={MAX_WEIGHT:.0f}"]).engine.lam == MAX_WEIGHT
    with pytest.raises(UserError, match="bad value for 'k': '1e3'; expected an integer"):
        load_dataset_config(None, ["k=1e3"])


def test_dataclasses_check_themselves():
    """The bounds live in __post_init__, so direct construction (the library API) is checked too."""
    with pytest.raises(UserError, match="'lam'"):
        EngineConfig(lam=float("inf"))
    with pytest.raises(UserError, match="'capacity'"):
        EngineConfig(capacity=10**9)
    with pytest.raises(UserError, match="'k'"):
        EngineConfig(k=True)
    with pytest.raises(UserError, match="'views'"):
        BenchConfig(views=0)


def test_duplicate_keys_are_named_with_their_line(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("engine:\n  k: 2\n  alpha: 0.8\n  k: 4\n")
    with pytest.raises(UserError, match=r"c.yaml: duplicate key 'k' \(line 4\); give each key once$"):
        load_dataset_config(p)
    p.write_text("engine:\n  <<: {k: 3, alpha: 0.5}\n  k: 4\n")  # a merged key may be overridden
    cfg = load_dataset_config(p)
    assert (cfg.engine.k, cfg.engine.alpha) == (4, 0.5)


def test_bad_values_in_a_file_name_the_file_and_section(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("engine:\n  beta: .inf\n")
    with pytest.raises(UserError, match=r"c.yaml.engine: bad value for 'beta': inf; expected a finite number"):
        load_dataset_config(p)
    p.write_text("bench:\n  views: 100000\n")
    with pytest.raises(UserError, match=r"c.yaml.bench: bad value for 'views': 100000"):
        load_dataset_config(p)


@pytest.mark.parametrize(
    "value,ok",
    [
        (0, True),
        ("7", True),
        (2**63 - 1, True),
        (str(2**63 - 1), True),
        (2**63, False),
        (str(2**63), False),
        (2**64, False),
        (-1, False),
        ("-1", False),
        ("9" * 5000, False),
        (True, False),
        (1.0, False),
        ("1e3", False),
        ("x", False),
    ],
)
def test_seeds_fit_torch_generators(value, ok):
    """Seeds >= 2^63 used to crash torch.Generator.manual_seed with a traceback."""
    if ok:
        seed = check_seed(value, "--seed")
        assert seed == int(value)
        torch.Generator().manual_seed(seed)
    else:
        with pytest.raises(UserError, match=r"^--seed .*: expected an integer seed in \[0, 2\^63 - 1\]"):
            check_seed(value, "--seed")


def test_logit_scale_lower_bound_is_documented_and_inclusive():
    assert EngineConfig(logit_scale=MIN_LOGIT_SCALE).logit_scale == MIN_LOGIT_SCALE
    for bad in (1e-320, 5e-324, MIN_LOGIT_SCALE / 2):
        with pytest.raises(UserError, match="logit_scale"):
            EngineConfig(logit_scale=bad)
    assert "`logit_scale` | finite, 0.001 … 10⁶" in (Path(__file__).parent.parent / "docs" / "limits.md").read_text()


def test_overrides_parse_once_into_a_mapping_that_loads_alike():
    """`--set` strings are parsed in one place; the parsed mapping gives the same config."""
    pairs = ["k=4", "alpha=0.5", "views=8", "bank_size=none"]
    assert load_dataset_config(None, parse_overrides(pairs)) == load_dataset_config(None, pairs)


def test_an_integer_of_20000_bits_is_shown_short():
    with pytest.raises(UserError) as err:
        load_dataset_config(None, ["k=0x" + "f" * 5000])
    assert "an integer of 20,000 bits" in str(err.value) and len(str(err.value)) < 200
