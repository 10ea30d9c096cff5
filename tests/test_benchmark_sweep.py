"""`mstta-bench sweep`: value parsing, the ablation table beside the paper's, resume, errors.

Streams are generated (tests/synthetic.py) and placed in the feature store, which is a cache: with
every file present no data or weights are needed, so the paper's ViT-B-16 columns can be checked."""

from __future__ import annotations

import json

import numpy as np
import pytest
from synthetic import make_stream

from mstta.bench.store import Backbone, FeatureKey
from mstta.bench.sweep import expand, parse_param
from mstta.cli import main
from mstta.errors import UserError
from mstta.features.format import save_features

VIT = Backbone("ViT-B-16", "openai")


def _stream(store, dataset, backbone=VIT, seed=1, views=1, augment="augmix", n=120):
    s = make_stream(n=n, classes=4, dim=16, views=views, seed=seed)
    path = FeatureKey(dataset, backbone, "fp32", views, augment, seed).path(store)
    save_features(path, s["features"], s["text"], s["labels"], list("abcd"), {"dataset": dataset}, dtype=np.float32)
    return path


@pytest.fixture
def store(tmp_path):
    st = tmp_path / "features"
    for ds in ("oxford_flowers", "imagenet_a"):
        _stream(st, ds)
    return st


def _sweep(capsys, store, out, *extra):
    code = main(
        [
            "sweep",
            "--backbone",
            "ViT-B-16",
            "--views",
            "1",
            "--store",
            str(store),
            "--out",
            str(out),
            "--device",
            "cpu",
            "--no-progress",
            *extra,
        ]
    )
    o, e = capsys.readouterr()
    return code, o, e


@pytest.mark.parametrize(
    "spec,expected",
    [
        ("k=2,4,6,8,16", ("k", [2, 4, 6, 8, 16])),
        ("alpha=0,0.2,...,1.0", ("alpha", [0, 0.2, 0.4, 0.6, 0.8, 1.0])),
        ("lam=0,0.5,1,2,10", ("lam", [0, 0.5, 1, 2, 10])),
        ("ms_steps=1,2,...,4", ("ms_steps", [1, 2, 3, 4])),
        ("k", ("k", [2, 4, 6, 8, 16])),  # a bare name: the paper's grid
        ("ms_steps", ("ms_steps", [0, 1, 2, 4])),
    ],
)
def test_parse_param(spec, expected):
    name, values = parse_param(spec)
    assert name == expected[0] and values == pytest.approx(expected[1])


@pytest.mark.parametrize(
    "spec,message",
    [
        ("kk=1,2", "'kk' is not a hyperparameter"),
        ("views=1,4", "'views' is not a hyperparameter"),
        ("dota=1,2", "'dota' is not a hyperparameter"),  # a section: its keys are dota.KEY (issue 33)
        ("beta", "the paper has no grid"),
        ("k=1,,2", "expected NAME=V1,V2"),
        ("k=1,...,4", "'...' needs two values before it"),
        ("k=4,2,...,8", "increasing"),
    ],
)
def test_parse_param_errors(spec, message):
    with pytest.raises(UserError, match=message):
        parse_param(spec)


def test_expand_keeps_integers():
    assert expand(["2", "4", "...", "10"], "k") == [2, 4, 6, 8, 10]


def test_k_sweep_table_beside_the_paper(store, tmp_path, capsys):
    out = tmp_path / "results"
    code, text, err = _sweep(capsys, store, out, "--param", "k=2,4")
    assert code == 0, err
    assert "ran 4 cell(s)" in text  # default datasets: the paper's (Flowers, A)
    md = (out / "sweep_k.md").read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert rows[0] == "| k |  | Flowers102 | ImageNet-A | Average | samples/s |"
    assert rows[2].startswith("| 2 | ours |")
    assert rows[3] == "|  | paper | 72.92 | 64.63 | — | — |"
    assert rows[6] == "|  | paper | 72.47 | 64.38 | — | — |"
    data = json.loads((out / "sweep_k.json").read_text())
    assert sorted((r["dataset"], r["value"], r["hyperparameters"]["k"]) for r in data["runs"]) == [
        ("imagenet_a", 2, 2),
        ("imagenet_a", 4, 4),
        ("oxford_flowers", 2, 2),
        ("oxford_flowers", 4, 4),
    ]
    assert (out / "sweep_k.csv").read_text().startswith("param,value,dataset")
    assert (out / "sweep_k.png").read_bytes()[:4] == b"\x89PNG"
    code, text, _ = _sweep(capsys, store, out, "--param", "k=2,4,8")  # resume: only the new value runs
    assert code == 0 and "ran 2 cell(s), skipped 4 finished" in text


def test_ms_steps_zero_is_the_baseline(store, tmp_path, capsys):
    out = tmp_path / "results"
    code, _, err = _sweep(capsys, store, out, "--param", "ms_steps=0,1,2", "--datasets", "oxford_flowers")
    assert code == 0, err
    runs = json.loads((out / "sweep_ms_steps.json").read_text())["runs"]
    # the default sweep runs the reading held against the paper on OOD (the +boost pipeline predicting from
    # the original image); its ms_steps=0 is the baseline on the same pipeline and path
    assert {r["value"]: r["method"] for r in runs} == {
        0: "baseline+boost@original",
        1: "ms-tta+boost@original",
        2: "ms-tta+boost@original",
    }
    md = (out / "sweep_ms_steps.md").read_text()
    assert "|  | paper | 72.23 | 65.81 | 12.33 |" in md  # the paper's baseline row: Flowers, average, FPS
    out2 = tmp_path / "tda-reading"
    code, _, err = _sweep(
        capsys, store, out2, "--param", "ms_steps=0,1", "--datasets", "oxford_flowers", "--method", "ms-tta"
    )
    assert code == 0, err
    runs = json.loads((out2 / "sweep_ms_steps.json").read_text())["runs"]
    assert {r["value"]: r["method"] for r in runs} == {0: "baseline", 1: "ms-tta"}


def test_values_parsed_as_typed(store, tmp_path, capsys):
    """`alpha=0.00001` was refused once ("bad value for 'alpha': '1e-05'"): the value the user typed is used."""
    assert parse_param("alpha=0.00001,0.5,1e-3") == ("alpha", [0.00001, 0.5, 0.001])
    out = tmp_path / "results"
    code, _, err = _sweep(capsys, store, out, "--param", "alpha=0.00001,0.5", "--datasets", "imagenet_a")
    assert code == 0, err
    runs = json.loads((out / "sweep_alpha.json").read_text())["runs"]
    assert sorted(r["hyperparameters"]["alpha"] for r in runs) == [0.00001, 0.5]


@pytest.mark.parametrize("spec", ["alpha=0,0.000000001,...,1", "k=" + ",".join(map(str, range(1, 10_002)))])
def test_huge_grid_refused_before_any_work(spec):
    with pytest.raises(UserError, match="at most 10,000"):
        parse_param(spec)


def test_grid_over_the_limit_counts_datasets_and_seeds(store, tmp_path, capsys):
    out = tmp_path / "results"
    code, _, err = _sweep(capsys, store, out, "--param", "k=" + ",".join(map(str, range(1, 5001))), "--seeds", "1,2,3")
    assert code == 2 and err.count("\n") == 1 and "30,000 cells" in err and "at most 10,000" in err, err
    assert not out.exists()


def test_sweep_dry_run_and_errors(store, tmp_path, capsys):
    out = tmp_path / "results"
    code, text, err = _sweep(capsys, store, out, "--param", "alpha=0,0.5,1", "--datasets", "imagenet_a", "--dry-run")
    assert code == 0, err
    assert "features cached" in text and "sweep alpha = 0, 0.5, 1 with ms-tta+boost@original: 3 cell(s) to run" in text
    assert not out.exists()
    for extra, message in (
        (["--param", "k=0,2"], "bad value for 'k'"),
        (["--param", "k=2", "--method", "nope"], "unknown method 'nope'; choose from: zero-shot,"),
        (["--param", "k=2", "--listing", "all"], "--listing: invalid choice: 'all'"),
        (["--param", "alpha=0.5,inf"], "values must be finite"),
        (["--param", "k=2", "--datasets", "eurosat"], "no dataset could run"),
        (["--param", "beta=1,2"], "the paper has no ablation for it; pass --datasets"),
    ):
        code, _, err = _sweep(capsys, store, out, *extra)
        assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not out.exists()


def test_the_imagenet_a_ablation_predicts_from_the_original_image(tmp_path, capsys):
    """Issue 18: the ablation sweeps on ImageNet-A follow the path held against the paper on OOD
    (its λ = 0 equals CLIP on the original image), not the confident views of the dataset's config."""
    store, out = tmp_path / "features", tmp_path / "results"
    _stream(store, "imagenet_a", views=4, augment="crop")
    code, _, err = _sweep(capsys, store, out, "--param", "lam=0,1", "--datasets", "imagenet_a", "--views", "4")
    assert code == 0, err
    runs = {r["value"]: r for r in json.loads((out / "sweep_lam.json").read_text())["runs"]}
    assert {r["method"] for r in runs.values()} == {"ms-tta+boost@original"}
    assert all(r["view_mode"] == "original" and r["clip_path"] == "the original image" for r in runs.values())
    assert runs[0]["accuracy"] == runs[0]["zero_shot_accuracy"]  # λ = 0 is CLIP on the original image
    md = (out / "sweep_lam.md").read_text()
    assert "## MS-TTA + boost (original image) · ViT-B-16" in md
    assert md.count("|  | paper | 49.86 |") == 1 and md.count("|  | paper | 64.63 |") == 1  # λ = 0 and λ = 1 rows
