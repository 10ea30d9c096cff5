"""Issue 33: a benchmark a researcher can trust on their own data. Each test holds one point of the
issue: the protocol nobody chose (1), the checkpoint's logit scale (2), row labels built from their
family (3), one store and truthful provenance (4, 5), one text set for `run` and `field` (6), sweeps
over every family's keys (7), paper-ready tables (8), help and messages that say what happens (9)."""

from __future__ import annotations

import hashlib
import json
import logging

import numpy as np
import pytest
import torch
from helpers_cli import run_bench
from helpers_data import make_fake_dataset
from synthetic import make_stream

from mstta import EngineConfig, load_features, replay
from mstta.bench.context import BenchmarkConfig, RunContext, dataset_config
from mstta.bench.field import FieldOptions
from mstta.bench.papertable import render
from mstta.bench.sweep import engine_for, parse_param
from mstta.engine.methods import get_method, list_methods
from mstta.engine.protocol import clip_label, describe, few_views, predicts_from
from mstta.features.format import save_features

V = 16  # floor(0.1 * 16) = 1: TDA's confident selection keeps one view


@pytest.fixture(scope="module")
def stream():
    s = make_stream(n=90, classes=5, dim=16, views=V, seed=3, view_noise=1.5)
    return torch.tensor(s["features"]), torch.tensor(s["text"]), s


# ---------------------------------------------------------------- 1. the protocol nobody chose
def test_no_protocol_given_is_the_cross_dataset_protocol(tmp_path, stream):
    """A dataset without a config and an engine given no view mode predict from the original image:
    several views change no row that reads none of its own (the cache family, DOTA, BCA)."""
    feats, text, _ = stream
    assert EngineConfig().view_mode == "original"
    assert dataset_config(f"imagefolder:{tmp_path}", {}).engine.view_mode == "original"
    view0 = (feats[:, 0] @ text.T).argmax(-1).numpy()
    for method in ("ms-tta", "tda", "dota", "bca"):
        many, one = replay(feats, text, method), replay(feats[:, :1], text, method)
        assert np.array_equal(many.predictions, one.predictions), method
        assert np.array_equal(many.clip_predictions, view0), method  # its CLIP is CLIP on the original image


def test_a_selection_of_fewer_than_two_views_is_warned(stream, caplog):
    feats, text, _ = stream
    confident = EngineConfig(view_mode="confident")
    assert few_views("ms-tta", confident, V) is not None and few_views("ms-tta", confident, 64) is None
    assert few_views("ms-tta", EngineConfig(), V) is None  # original: no selection to starve
    assert few_views("boostadapter", EngineConfig(), V) is not None  # its boosting views are selected
    assert few_views("dota", confident, V) is not None and few_views("zero", confident, V) is None  # 0.3 * 16 = 4
    with caplog.at_level(logging.WARNING):
        replay(feats, text, "tda", confident)
    assert "floor(view_ratio 0.1 x 16 views) = 1" in caplog.text


def test_replay_labels_clip_by_what_it_is(tmp_path, stream, capsys):
    _, _, s = stream
    path = save_features(tmp_path / "f.npz", s["features"], s["text"], s["labels"], list("abcde"))
    code, out, _ = run_bench(capsys, "replay", "--features", path, "--method", "zero-shot")
    assert code == 0 and "(zero-shot " in out and "predicts from the original image" in out
    code, out, _ = run_bench(capsys, "replay", "--features", path, "--method", "tda", "--set", "view_mode=confident")
    assert code == 0 and "(zero-shot CLIP on the mean of its 1 most confident views " in out


# ---------------------------------------------------------------- 3. labels built from each family
CONFIDENT_64 = {  # what each family predicts from with 64 views in TDA's OOD protocol
    "cache": "the mean of its 6 most confident views",
    "zero": "a zero-temperature vote of its 19 most confident views",
    "mta": "the MeanShift mode of its 64 views",
    "dmn": "the original image, with a memory of its 6 most confident views' mean",
    "dota": "the mean logits of its 6 most confident views",
    "onzeta": "the original image",
    "bca": "the mean of its 6 most confident views",
    "dpe": "the original image, with a cache of its 6 most confident views' mean",
    "tpt": "the original image, with a prompt tuned on its 6 most confident views",
    "ctpt": "the original image, with a prompt tuned on its 6 most confident views",
}


@pytest.mark.parametrize("name", list_methods())
def test_every_registered_rows_protocol_is_built_from_its_family(name):
    m = get_method(name)
    confident = EngineConfig(view_mode="confident")
    assert predicts_from(name, confident, 64).startswith(f"predicts from {CONFIDENT_64[m.family]}")
    assert predicts_from(name, confident, 1).startswith("predicts from the original image")
    text = describe(name, EngineConfig(), 64, "augmix", "photo")
    assert text.endswith("; text set photo")
    own = m.augment is not None or m.boosting_views  # rows whose authors' code reads views on every dataset
    assert ("reads 64 augmix views" in text) == own and ("reads 1 view (the original image)" in text) != own
    if not own:
        assert "predicts from the original image" in text
    assert clip_label(name, EngineConfig(), 64) == "zero-shot"  # its CLIP reference: the original image


# ---------------------------------------------------------------- 2, 3, 4, 6, 8 on a user's image folder
@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """`run` with the defaults on a user's image folder with several views, two seeds, LaTeX output."""
    root = tmp_path_factory.mktemp("own")
    ds = make_fake_dataset(root, "imagefolder", classes=3, per_class=3)
    out, store = root / "out", root / "features"
    argv = ["run", "--datasets", ds.dataset, "--backbone", "mstta-tiny", "--views", "4", "--seeds", "1,2"]
    argv += ["--methods", "zero-shot,tda,ms-tta,dota", "--store", store, "--out", out, "--device", "cpu"]
    argv += ["--no-progress", "--fps-samples", "0", "--no-plots", "--format", "latex"]
    from mstta.cli import main

    assert main([str(a) for a in argv]) == 0
    runs = json.loads((out / "results.json").read_text())["runs"]
    return {"ds": ds, "out": out, "store": store, "runs": runs}


def test_own_data_defaults_predict_from_the_original_image_at_the_models_scale(own):
    for r in own["runs"]:
        assert r["view_mode"] == "original" and r["clip_path"] == "the original image", r["method"]
        assert r["clip_view_accuracy"] == r["zero_shot_accuracy"]  # nobody's CLIP is one crop's
        assert r["logit_scale"] == pytest.approx(1 / 0.07) and r["logit_scale_from"] == "checkpoint"
        assert load_features(r["features"]).logit_scale == pytest.approx(r["logit_scale"])  # from the file
        assert r["protocol"] == describe(r["method"], EngineConfig(), 4, r["augment"], "peer") and r["text"] == "peer"


def test_own_data_reports_say_what_they_rest_on(own):
    report = (own["out"] / "report.md").read_text()
    assert "logit scale 14.2857 (checkpoint)" in report and "view mode photos: original" in report
    assert "text set(s) peer" in report and "predicts from the original image; text set peer" in report
    assert str(own["ds"].data_root) not in report and "‡" not in report and "| paper" not in report
    tex = (own["out"] / "table.tex").read_text()
    assert "photos Acc" in tex and "$\\pm$" in tex and "\\begin{tabular}" in tex  # two seeds: mean ± std


def test_extract_writes_the_stores_file(own, capsys):
    """`extract --store` names the very file `run` read (one store), and finds it already there."""
    ds, store = own["ds"], own["store"]
    argv = ["extract", "--dataset", ds.dataset, "--model", "mstta-tiny", "--pretrained", "none", "--views", "4"]
    argv += ["--augment", "augmix", "--seed", "2", "--store", store, "--device", "cpu", "--workers", "0", "--json"]
    code, out, _ = run_bench(capsys, *argv)
    read = {r["features"] for r in own["runs"] if r["seed"] == 2 and r["method"] == "tda"}
    assert code == 0 and json.loads(out.splitlines()[-1])["out"] in read and json.loads(out.splitlines()[-1])["reused"]
    code, _, err = run_bench(capsys, *argv, "--out", own["out"] / "x.npz")
    assert code == 2 and "--out and --store: give one" in err


# ---------------------------------------------------------------- 5. provenance
def test_bundled_weights_are_recorded_as_bundled_with_their_hash(tmp_path, caplog):
    from mstta.features.extract import extract_features
    from mstta.features.models import BUNDLED_CHECKPOINTS

    ds = make_fake_dataset(tmp_path, "imagefolder", classes=2, per_class=1)
    with caplog.at_level(logging.WARNING):
        path = extract_features(
            ds.dataset, tmp_path / "out", None, model="mstta-digits", device="cpu", workers=0, cache_dir=tmp_path / "c"
        )
    meta = load_features(path).meta
    assert "mstta-digits has no 'openai' weights" in caplog.text and "_bundled_" in path.name
    assert meta["pretrained"] == "bundled" and meta["logit_scale"] == pytest.approx(16.1, abs=0.05)
    digest = hashlib.sha256(BUNDLED_CHECKPOINTS["mstta-digits"].read_bytes()).hexdigest()
    assert meta["weights_sha256"] == digest


# ---------------------------------------------------------------- 2. replay's scale
def test_replay_uses_the_files_scale_unless_set(tmp_path, stream, capsys, caplog):
    _, _, s = stream
    f = s["features"][:, 0]
    scaled = save_features(tmp_path / "a.npz", f, s["text"], s["labels"], None, {"logit_scale": 10.0})
    plain = save_features(tmp_path / "b.npz", f, s["text"], s["labels"])
    got = {}
    for name, path, extra in (("file", scaled, []), ("set", scaled, ["--set", "logit_scale=100"]), ("none", plain, [])):
        code, out, err = run_bench(capsys, "replay", "--features", path, "--method", "dota", "--json", *extra)
        got[name] = json.loads(out.splitlines()[-1])
    assert got["file"]["logit_scale"] == 10.0 and got["file"]["logit_scale_from"] == "checkpoint"
    assert got["set"]["logit_scale"] == 100.0 and got["set"]["logit_scale_from"] == "--set"
    assert got["none"]["logit_scale"] == 100.0 and "records no logit scale" in caplog.text
    ref = replay(torch.tensor(f), torch.tensor(s["text"]), "dota", EngineConfig(logit_scale=10.0))
    assert got["file"]["accuracy"] == pytest.approx(float((ref.predictions == s["labels"]).mean() * 100))


# ---------------------------------------------------------------- 6, 7, 8, 9
def test_run_and_field_share_one_default_text_set():
    from mstta.cli import build_parser

    assert FieldOptions().texts == ["peer"]
    assert build_parser().parse_args(["field"]).text == "peer"


def test_sweeps_reach_every_familys_keys(tmp_path):
    assert parse_param("dota.eta=0.1,0.3") == ("dota.eta", [0.1, 0.3])
    assert engine_for(dataset_config(f"imagefolder:{tmp_path}", {}), "dota.eta", 0.3, "dota").dota.eta == 0.3
    with pytest.raises(Exception, match="dota.eta") as err:
        parse_param("dota=1")
    assert ", dota," not in str(err.value)  # a section is no choice


def test_paper_table_has_a_column_per_metric_and_dataset():
    runs = [
        {"dataset": "imagefolder:/data/my_set", "method": m, "seed": s, "text": "peer", "accuracy": a, "ece": 5.0 + s,
         "auroc": 70.0, "zero_shot_accuracy": 60.0, "logit_scale": 16.1, "logit_scale_from": "checkpoint",
         "view_mode": "original"}
        for m, a in (("tda", 61.0), ("ms-tta", 63.0)) for s in (1, 2)
    ]  # fmt: skip
    md = render(runs, (("Acc", "accuracy"), ("ECE", "ece")), "md")
    assert "| my_set Acc | my_set ECE |" in md and "6.50 ± 0.71" in md and "/data/" not in md
    assert "logit scale 16.1 (checkpoint)" in md and "paper" not in md.lower()  # no paper rows for a custom set
    assert "my\\_set ECE" in render(runs, (("Acc", "accuracy"), ("ECE", "ece")), "latex")


def test_field_says_when_the_mixed_setting_cannot_run():
    assert "needs --mix-with" in FieldOptions(open=("withheld", "mixed")).skipped
    assert FieldOptions(open=("withheld", "mixed"), mix_with="x").skipped is None


def test_interrupted_says_to_rerun(tmp_path, stream, capsys, monkeypatch):
    from mstta.commands import replay as command

    def stop(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "run", stop)
    code, _, err = run_bench(capsys, "replay", "--features", tmp_path / "x.npz")
    assert code == 130 and "interrupted; rerun the same command to continue" in err


def test_progress_bars_only_on_a_terminal(tmp_path):
    cfg = BenchmarkConfig(datasets=[], backbones=[], out=tmp_path, progress=True, device="cpu")
    assert RunContext(cfg).bar([1, 2]).disable  # pytest's stderr is no terminal: no `[A` debris in logs
