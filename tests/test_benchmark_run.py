"""`mstta-bench run` end to end: two tiny generated datasets (ImageNet-A layout, a CoOp split),
the random-weight `mstta-tiny`, every report file, resume after an interruption, dry run, errors."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest
from helpers_cli import default_model_dir, default_views_suffix, run_bench
from helpers_data import make_fake_dataset

from mstta.bench import runner
from mstta.cli import main
from mstta.engine.methods import list_methods
from mstta.engine.replay import replay
from mstta.features.format import load_features

DATASETS = ("imagenet_a", "dtd")
# every method on both datasets, plus the +boost reading predicting from the original image on the
# OOD dataset (on dtd it would repeat ms-tta+boost, whose view mode there is already `original`)
CELLS = {(d, m) for d in DATASETS for m in list_methods()} | {
    ("imagenet_a", "ms-tta+boost@original"),
    ("imagenet_a", "baseline+boost@original"),
}
N = len(CELLS)


def _run(capsys, *argv):
    return run_bench(capsys, *argv)


def _argv(root, out, store, *extra):
    return [
        "run",
        "--data-root",
        str(root),
        "--datasets",
        ",".join(DATASETS),
        "--backbone",
        "mstta-tiny",
        "--views",
        "4",
        "--out",
        str(out),
        "--store",
        str(store),
        "--workers",
        "0",
        "--no-progress",
        "--fps-samples",
        "2",
        *extra,
    ]


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """One full run (extracting both datasets), shared by the checks below; read-only for them."""
    tmp = tmp_path_factory.mktemp("bench")
    root = tmp / "data"
    for key in DATASETS:
        make_fake_dataset(root, key, classes=3, per_class=3)
    out, store = tmp / "results", tmp / "features"
    code = main(_argv(root, out, store))
    assert code == 0
    return {
        "root": root,
        "out": out,
        "store": store,
        "tmp": tmp,
        "data": json.loads((out / "results.json").read_text()),
    }


def test_every_cell_recorded_with_its_settings(bench):
    runs = bench["data"]["runs"]
    assert len(runs) == N == 2 * len(list_methods()) + 2
    assert {(r["dataset"], r["method"]) for r in runs} == CELLS
    for r in runs:
        assert {
            "dataset",
            "backbone",
            "pretrained",
            "method",
            "seed",
            "accuracy",
            "zero_shot_accuracy",
            "fps",
            "peak_memory_mb",
            "hyperparameters",
            "versions",
        } <= set(r)
        assert r["backbone"] == "mstta-tiny" and r["pretrained"] == "none" and r["seed"] == 1
        assert 0 <= r["accuracy"] <= 100 and r["n"] == 9 and r["views"] == 4
        assert r["fps"] > 0 and r["peak_memory_mb"] > 0
        assert {"mstta", "torch", "open_clip"} <= set(r["versions"])
    by = {(r["dataset"], r["method"]): r for r in runs}
    # configs/<dataset>.yaml applies: TDA's per-dataset cache alpha/beta, BoostAdapter's delta, view modes
    assert by["imagenet_a", "tda"]["hyperparameters"]["beta"] == 5.0
    assert by["imagenet_a", "tda"]["hyperparameters"]["delta"] == 3
    assert by["imagenet_a", "ms-tta"]["view_mode"] == "confident" and by["imagenet_a", "ms-tta"]["augment"] == "augmix"
    assert by["dtd", "ms-tta"]["hyperparameters"]["beta"] == 3.0
    assert by["dtd", "boostadapter"]["view_mode"] == "original" and by["dtd", "boostadapter"]["augment"] == "crop"
    assert by["imagenet_a", "boostadapter"]["augment"] == "crop"  # BoostAdapter's crops on OOD too
    assert by["imagenet_a", "ms-tta+boost@original"]["view_mode"] == "original"
    assert by["imagenet_a", "ms-tta+boost"]["view_mode"] == "confident"
    assert by["imagenet_a", "zero-shot"]["view_mode"] == "original"  # CLIP scores the original image
    assert by["imagenet_a", "zero-shot"]["accuracy"] == by["imagenet_a", "tda"]["zero_shot_accuracy"]


def test_one_feature_file_per_dataset_and_accuracy_matches_replay(bench):
    files = sorted(p.relative_to(bench["store"]).as_posix() for p in bench["store"].rglob("*.npz"))
    model, v = default_model_dir(), default_views_suffix()  # mstta-tiny-none-fp32 on a CPU, -fp16 on a GPU
    assert files == [
        f"{model}/dtd/views4-augmix-seed1{v}.npz",  # DMN-ZS's AugMix on the fine-grained sets (tpt32)
        f"{model}/dtd/views4-crop-seed1{v}.npz",
        f"{model}/imagenet_a/views4-augmix-seed1{v}.npz",
        f"{model}/imagenet_a/views4-crop-seed1{v}.npz",
    ]
    run = next(r for r in bench["data"]["runs"] if r["dataset"] == "imagenet_a" and r["method"] == "ms-tta")
    fs = load_features(run["features"])
    assert fs.num_views == 4 and fs.num_samples == 9 and fs.classnames[0] == "class_0 name"
    from mstta.bench.config import load_dataset_config

    # the run used the checkpoint's logit scale, which extraction recorded in the file (issue 33)
    assert (
        run["logit_scale"] == fs.logit_scale == pytest.approx(1 / 0.07, rel=2e-3)
        and run["logit_scale_from"] == "checkpoint"
    )
    cfg = load_dataset_config("configs/imagenet_a.yaml", ["views=4", f"logit_scale={fs.logit_scale!r}"])
    r = replay(fs.features, fs.text, "ms-tta", cfg.engine)
    assert run["accuracy"] == pytest.approx((r.predictions == fs.labels).mean() * 100, abs=1e-3)
    # cross-dataset (original view mode): the run replays view 0 only; same as all views
    run = next(r for r in bench["data"]["runs"] if r["dataset"] == "dtd" and r["method"] == "tda")
    fs = load_features(run["features"])
    dtd = load_dataset_config("configs/dtd.yaml", ["views=4", f"logit_scale={fs.logit_scale!r}"])
    r = replay(fs.features, fs.text, "tda", dtd.engine)
    assert run["accuracy"] == pytest.approx((r.predictions == fs.labels).mean() * 100, abs=1e-3)


def test_report_files(bench):
    out = bench["out"]
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert len(rows) == N and {
        "accuracy",
        "zero_shot_accuracy",
        "clip_view_accuracy",
        "gain_over_clip",
        "gain_over_clip_views",
        "listing",
        "fps",
        "peak_memory_mb",
        "hp_k",
        "version_torch",
    } <= set(rows[0])
    md = (out / "report.md").read_text()
    assert "| Method |  | A | R | S | V2 | Avg |" in md
    assert (
        "| Method |  | Aircraft | Caltech101 | EuroSAT | Flowers102 | Pets | SUN397 | UCF101 | Cars | DTD "
        "| Food101 | Average |"
    ) in md
    assert "The paper reports no numbers for mstta-tiny" in md
    ms = md.split("| MS-TTA | ours |")[1].split("\n")[0]
    assert ms.count("—") == 4  # only A ran in the OOD table: R, S, V2 and the average are empty
    assert "## Efficiency" in md and "MS-TTA − Baseline (cache)" in md
    pngs = sorted(p.name for p in (out / "plots").rglob("*.png"))
    assert pngs == ["dtd-seed1.png", "imagenet_a-seed1.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in (out / "plots").rglob("*.png"))
    assert len(bench["data"]["efficiency"]) == len(list_methods()) + 2  # timed on imagenet_a
    eff = {e["method"]: e for e in bench["data"]["efficiency"]}
    assert eff["zero-shot"]["views"] == 1 and eff["tda"]["views"] == 4 and eff["ms-tta"]["fps"] > 0
    # on the CPU, views are timed as extraction makes them: PIL in data-loader workers, said under the table
    assert all(e["views_made"].startswith("with PIL by ") for e in eff.values())
    assert "Views made: with PIL by " in md


def test_rerun_skips_finished_cells(bench, capsys):
    before = (bench["out"] / "results.json").read_text()
    code, out, err = _run(capsys, *_argv(bench["root"], bench["out"], bench["store"]))
    assert code == 0, err
    assert f"ran 0 cell(s), skipped {N} finished" in out
    assert json.loads((bench["out"] / "results.json").read_text())["runs"] == json.loads(before)["runs"]


def test_interrupted_run_resumes(bench, tmp_path, monkeypatch, capsys):
    out = tmp_path / "results"
    calls = {"n": 0}

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return replay(*a, **k)

    monkeypatch.setattr(runner, "replay", flaky)
    code, _, err = _run(capsys, *_argv(bench["root"], out, bench["store"], "--fps-samples", "0"))
    assert code == 130 and "interrupted" in err
    data = json.loads((out / "results.json").read_text())  # valid JSON, the finished cells in it
    assert len(data["runs"]) == 2
    monkeypatch.setattr(runner, "replay", replay)
    code, text, err = _run(capsys, *_argv(bench["root"], out, bench["store"], "--fps-samples", "0"))
    assert code == 0, err
    assert f"ran {N - 2} cell(s), skipped 2 finished" in text
    assert len(json.loads((out / "results.json").read_text())["runs"]) == N


def test_interrupt_while_writing_keeps_old_results(bench, tmp_path, monkeypatch):
    from mstta.bench import results as results_mod

    out = tmp_path / "r"
    shutil.copytree(bench["out"], out)
    before = (out / "results.json").read_bytes()
    store = results_mod.ResultsStore(out / "results.json")

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(results_mod.json, "dump", boom)
    with pytest.raises(KeyboardInterrupt):
        store.record({**store.runs[0], "accuracy": 0.0})
    assert (out / "results.json").read_bytes() == before
    assert not list(out.glob(".results.json.*"))


def test_changed_hyperparameters_rerun_cells(bench, tmp_path, capsys):
    out = tmp_path / "r"
    shutil.copytree(bench["out"], out)
    code, text, err = _run(
        capsys,
        *_argv(
            bench["root"],
            out,
            bench["store"],
            "--set",
            "k=4",
            "--methods",
            "ms-tta",
            "--fps-samples",
            "0",
            "--no-plots",
        ),
    )
    assert code == 0, err
    assert "ran 2 cell(s)" in text
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert len(runs) == N and {r["hyperparameters"]["k"] for r in runs if r["method"] == "ms-tta"} == {4}


def test_missing_dataset_is_reported_and_others_run(bench, tmp_path, capsys):
    out = tmp_path / "r"
    code, text, err = _run(
        capsys,
        *_argv(
            bench["root"],
            out,
            bench["store"],
            "--datasets",
            "imagenet_a,eurosat",
            "--methods",
            "zero-shot,ms-tta",
            "--fps-samples",
            "0",
        ),
    )
    assert code == 0, err
    assert err.count("\n") == 1 and err.startswith("mstta-bench: warning: dataset eurosat skipped")
    data = json.loads((out / "results.json").read_text())
    assert [m["dataset"] for m in data["missing"]] == ["eurosat"]
    assert {r["dataset"] for r in data["runs"]} == {"imagenet_a"}
    assert "## Missing datasets" in (out / "report.md").read_text()


def test_dry_run_lists_and_writes_nothing(bench, tmp_path, capsys):
    out, store = tmp_path / "r", tmp_path / "f"
    code, text, err = _run(capsys, *_argv(bench["root"], out, store, "--datasets", "imagenet_a,eurosat", "--dry-run"))
    assert code == 0, err
    assert "weights random" in text
    assert "imagenet_a: views 4, view_mode confident; data ok (9 images, 3 classes)" in text
    assert "eurosat:" in text and "data MISSING" in text
    v = default_views_suffix()
    assert f"views4-augmix-seed1{v}.npz); zero-shot to run, tda to run, ms-tta to run" in text
    assert f"views4-crop-seed1{v}.npz); boostadapter to run, ms-tta+boost to run" in text
    assert "features to extract" in text and f"{len(list_methods()) * 2 + 2} cell(s) to run" in text
    assert not out.exists() and not store.exists()
    code, text, _ = _run(capsys, *_argv(bench["root"], bench["out"], bench["store"], "--dry-run"))
    assert "features cached" in text and "ms-tta done" in text and "0 cell(s) to run" in text


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--datasets", "imagenet_q"], "--datasets: unknown dataset 'imagenet_q'"),
        (["--methods", "ms-tta,msta"], "--methods: unknown method 'msta'"),
        (["--backbone", "ViT-Q-99"], "--backbone ViT-Q-99: unknown architecture"),
        (["--pretrained", "/nope/ckpt.pt"], "--pretrained /nope/ckpt.pt: checkpoint file not found"),
        (["--pretrained", "laion9"], "--pretrained laion9: 'laion9' is not a known pretrained tag for mstta-tiny"),
        (["--seeds", "1,x"], "--seeds 'x': expected an integer seed in [0, 2^63 - 1]"),
        (["--seeds", "-1"], "--seeds '-1': expected an integer seed"),
        (["--seeds", str(2**63)], f"--seeds '{2**63}': expected an integer seed"),
        (["--seeds", "1,,2"], "--seeds"),
        (["--set", "kk=1"], "unknown key 'kk'"),
        (["--views", "0"], "--views 0"),
        (["--datasets", "eurosat"], "no dataset could run: dataset eurosat: folder not found"),
        (["--fps-dataset", "eurosat"], "--fps-dataset eurosat"),
    ],
)
def test_bad_inputs_exit_2_with_one_line(bench, tmp_path, capsys, extra, message):
    out, store = tmp_path / "r", tmp_path / "f"
    code, _, err = _run(capsys, *_argv(bench["root"], out, store, *extra))
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("mstta-bench: error:"), err
    assert message in err
    assert not out.exists() and not store.exists()


def test_report_only_rebuilds(bench, tmp_path, capsys):
    out = tmp_path / "r"
    shutil.copytree(bench["out"], out)
    (out / "report.md").unlink()
    code, text, _ = _run(capsys, "run", "--out", str(out), "--report-only", "--no-plots")
    assert code == 0 and (out / "report.md").is_file()
    code, _, err = _run(capsys, "run", "--out", str(tmp_path / "none"), "--report-only")
    assert code == 2 and "no results.json" in err


def test_several_seeds_extract_per_seed_and_report_mean_std(bench, tmp_path, capsys):
    out = tmp_path / "r"
    code, _, err = _run(
        capsys,
        *_argv(
            bench["root"],
            out,
            bench["store"],
            "--datasets",
            "imagenet_a",
            "--methods",
            "boostadapter,ms-tta",
            "--seeds",
            "1,2,3",
            "--fps-samples",
            "0",
        ),
    )
    assert code == 0, err
    assert sorted(p.name for p in (bench["store"] / default_model_dir() / "imagenet_a").glob("*.npz")) == [
        f"views4-{kind}-seed{s}{default_views_suffix()}.npz" for kind in ("augmix", "crop") for s in (1, 2, 3)
    ]
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert sorted((r["method"], r["seed"]) for r in runs) == [
        (m, s) for m in ("boostadapter", "ms-tta") for s in (1, 2, 3)
    ]
    md = (out / "report.md").read_text()
    accs = [r["accuracy"] for r in runs if r["method"] == "ms-tta"]
    assert f"{np.mean(accs):.2f} ± {np.std(accs, ddof=1):.2f}" in md
    assert "## Robustness over seeds" in md


def test_limit_uses_a_prefix_of_the_stream(bench, tmp_path, capsys):
    out, store = tmp_path / "r", tmp_path / "f"
    code, _, err = _run(
        capsys,
        *_argv(
            bench["root"],
            out,
            store,
            "--datasets",
            "dtd",
            "--methods",
            "zero-shot",
            "--limit",
            "5",
            "--fps-samples",
            "0",
            "--no-plots",
        ),
    )
    assert code == 0, err
    run = json.loads((out / "results.json").read_text())["runs"][0]
    assert run["n"] == 5 and run["features"].endswith(f"views4-crop-seed1-n5{default_views_suffix()}.npz")
