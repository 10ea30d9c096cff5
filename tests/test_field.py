"""`mstta-bench field` over stored features: every registry row (a fake family's included) with its
metrics equal to the library's, marks in every output, resume, label-tuned cells, plots."""

from __future__ import annotations

import csv
import json
import types
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from helpers_cli import run_bench
from helpers_family import register_method
from helpers_field import CLASSES, DIM, feature_store, field_argv

from mstta.bench import field as F
from mstta.bench import metrics as M
from mstta.bench.store import Backbone, FeatureKey
from mstta.engine.families import FAMILIES, Method, StepOut
from mstta.engine.replay import replay

ROWS = ("zero-shot", "tda", "ms-tta", "fake-row")


# ---------------------------------------------------------------------- a fake family
@dataclass
class _Params:
    pass


def _fake_family() -> types.SimpleNamespace:
    """A family with its own probabilities (softmax at half the logit scale) and a state."""

    def init(text, p, logit_scale, length):
        return {"seen": torch.zeros((), dtype=torch.long), "mean": torch.zeros(text.shape[1], dtype=text.dtype)}

    def step(state, x, text, p, logit_scale, shift):
        state["seen"] += 1
        state["mean"] += (x[0] - state["mean"]) / state["seen"]
        clip = logit_scale * x[0] @ text.T
        scores = clip + 10 * (state["mean"] @ text.T)
        p = torch.softmax(clip, -1)
        ent = -(p * p.clamp_min(1e-12).log()).sum()
        return StepOut(scores, clip, ent, x[0], torch.softmax(scores / 2, -1))

    row = Method(
        name="fake-row",
        title="Fake",
        summary="a family the registry does not ship",
        family="fake",
        training_free=False,
        provenance="from the paper, not the authors' code",
    )
    return types.SimpleNamespace(
        NAME="fake", METHODS=(row,), Params=_Params, init=init, step=step, state_bytes=lambda C, d, p: 4 * (d + 1)
    )


@pytest.fixture
def fake_family(monkeypatch):
    fam = _fake_family()
    monkeypatch.setitem(FAMILIES, "fake", fam)
    register_method(monkeypatch, fam.METHODS[0])
    return fam


def _csv(out):
    with open(out / "results.csv", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_every_row_with_its_metrics(tmp_path, capsys, fake_family):
    store, keys = feature_store(tmp_path)
    out = tmp_path / "out"
    code, stdout, err = run_bench(
        capsys, *field_argv(store, out, keys, "--methods", ",".join(ROWS), "--mix-with", keys[1])
    )
    assert code == 0, err
    rows = _csv(out)
    assert {(r["dataset"], r["method"]) for r in rows} == {(k, m) for k in keys for m in ROWS}
    for r in rows:
        assert r["text"] == "peer" and r["orders"] == "3"
        for col in (
            "accuracy",
            "ece",
            "nll",
            "auroc",
            "fpr95",
            "known_accuracy",
            "worst10",
            "first_half",
            "second_half",
            "samples_per_s",
            "state_bytes",
        ):
            assert r[col] != "", (r["method"], col)
        assert (r["mixed_auroc"] != "") == (r["dataset"] == keys[0])  # b mixed with itself is skipped
    # the numbers are the library's: replay + metrics on the stored stream, the family's own probabilities
    from mstta.features.format import load_features

    fs = load_features(FeatureKey(keys[0], Backbone("mstta-tiny", "none"), "fp32", 1, "augmix", 1).path(store))
    for method in ("tda", "fake-row"):
        r = replay(fs.features, fs.text, method, keep_probs=True)
        got = next(x for x in rows if x["dataset"] == keys[0] and x["method"] == method)
        assert float(got["accuracy"]) == pytest.approx(M.accuracy(r.predictions, fs.labels), abs=1e-3)
        assert float(got["ece"]) == pytest.approx(M.ece(r.probs, fs.labels), abs=1e-3)
        assert float(got["nll"]) == pytest.approx(M.nll(r.probs, fs.labels), abs=1e-3)
    fake = next(x for x in rows if x["method"] == "fake-row")
    assert "not training-free" in fake["marks"] and "from the paper, not the authors' code" in fake["marks"]
    assert int(fake["state_bytes"]) > 0
    report = (out / "report.md").read_text()
    assert "Fake [peer] (not training-free; from the paper, not the authors' code)" in report
    assert "No published numbers exist for these datasets" in report
    assert sorted(p.name.split("-")[-1] for p in (out / "plots").rglob("*.png")) == ["ece.png"] * 2 + ["stream.png"] * 2
    # a rerun skips every finished cell
    code, stdout, _ = run_bench(
        capsys, *field_argv(store, out, keys, "--methods", ",".join(ROWS), "--mix-with", keys[1])
    )
    assert code == 0 and stdout.startswith(f"ran 0 cell(s), skipped {2 * len(ROWS)} finished")


def test_withheld_auroc_is_the_sliced_classifier(tmp_path, capsys):
    store, keys = feature_store(tmp_path, names=("a",), classes=6)
    out = tmp_path / "out"
    assert run_bench(capsys, *field_argv(store, out, keys, "--methods", "tda", "--open", "withheld"))[0] == 0
    from mstta.features.format import load_features

    fs = load_features(FeatureKey(keys[0], Backbone("mstta-tiny", "none"), "fp32", 1, "augmix", 1).path(store))
    kept, labels = M.withhold(fs.labels, 6, M.withheld_classes(6, 1))
    r = replay(fs.features, fs.text[torch.as_tensor(kept)], "tda", keep_probs=True)
    want = M.open_set(r.predictions, r.probs, labels)
    got = _csv(out)[0]
    assert float(got["auroc"]) == pytest.approx(want["auroc"], abs=1e-3)
    assert float(got["known_accuracy"]) == pytest.approx(want["known_accuracy"], abs=1e-3)
    assert got["mixed_auroc"] == ""


def test_text_sets_photo_and_user(tmp_path, capsys):
    store, keys = feature_store(tmp_path, names=("a",))
    user = tmp_path / "user.npy"
    np.save(user, np.random.default_rng(0).standard_normal((CLASSES, DIM)).astype(np.float32))
    out = tmp_path / "out"
    code, _, err = run_bench(
        capsys,
        *field_argv(
            store,
            out,
            keys,
            "--methods",
            "zero-shot",
            "--text",
            "peer,photo,user",
            "--text-classifier",
            user,
            "--open",
            "none",
        ),
    )
    assert code == 0, err
    rows = {r["text"]: r for r in _csv(out)}
    assert set(rows) == {"peer", "photo", "user"}
    assert len({rows[t]["zero_shot_accuracy"] for t in rows}) > 1  # three different classifiers


def test_label_tuned_only_behind_the_flag(tmp_path, capsys, monkeypatch):
    store, keys = feature_store(tmp_path, names=("a",))
    monkeypatch.setattr(F, "label_tuned_settings", lambda: {"tda": {keys[0]: {"lam": 0.25}}})
    out = tmp_path / "out"
    assert run_bench(capsys, *field_argv(store, out, keys, "--methods", "tda", "--open", "none"))[0] == 0
    assert [r["label_tuned"] for r in _csv(out)] == ["False"]
    assert (
        run_bench(capsys, *field_argv(store, out, keys, "--methods", "tda", "--open", "none", "--label-tuned"))[0] == 0
    )
    rows = _csv(out)
    tuned = [r for r in rows if r["label_tuned"] == "True"]
    assert len(rows) == 2 and len(tuned) == 1 and "chosen on test labels: lam=0.25" in tuned[0]["marks"]
    data = json.loads((out / "results.json").read_text())
    assert next(r for r in data["runs"] if r["label_tuned"])["hyperparameters"]["lam"] == 0.25
    assert "†label-tuned" in (out / "report.md").read_text()


def test_dry_run_plans_without_writing(tmp_path, capsys):
    store, keys = feature_store(tmp_path, names=("a",))
    out = tmp_path / "out"
    code, stdout, _ = run_bench(
        capsys, *field_argv(store, out, keys, "--methods", "tda,zero-shot", "--text", "peer,photo", "--dry-run")
    )
    assert code == 0 and "4 cell(s) to run" in stdout and "tda[photo] to run" in stdout and not out.exists()
    assert run_bench(capsys, *field_argv(store, out, keys, "--methods", "tda", "--open", "none"))[0] == 0
    code, stdout, _ = run_bench(
        capsys, *field_argv(store, out, keys, "--methods", "tda", "--open", "none", "--dry-run")
    )
    assert "tda[peer] done" in stdout and "0 cell(s) to run" in stdout
