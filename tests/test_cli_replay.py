"""`mstta-bench replay`: outputs, the JSON report, and one-line errors with exit code 2."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
from helpers_cli import run_bench
from synthetic import make_stream

from mstta.features.format import save_features


@pytest.fixture
def feats(tmp_path):
    s = make_stream(n=200, classes=5, dim=16, seed=5)
    return save_features(
        tmp_path / "f.npz",
        s["features"],
        s["text"],
        s["labels"],
        list("abcde"),
        {"model": "synthetic"},
        dtype=np.float32,
    )


def _run(capsys, *argv):
    return run_bench(capsys, *argv)


def test_json_report_and_npy(tmp_path, feats, capsys):
    code, out, err = _run(
        capsys,
        "replay",
        "--features",
        str(feats),
        "--method",
        "ms-tta",
        "--set",
        "k=4",
        "--out",
        str(tmp_path / "p.npy"),
        "--json",
    )
    assert code == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["method"] == "ms-tta" and report["n"] == 200 and report["classes"] == 5
    assert report["hyperparameters"]["k"] == 4 and report["samples_per_s"] > 0
    preds = np.load(tmp_path / "p.npy")
    labels = np.load(feats)["labels"]
    assert preds.shape == (200,)
    assert report["accuracy"] == pytest.approx((preds == labels).mean() * 100)
    assert 0 <= report["zero_shot_accuracy"] <= 100


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_csv_and_jsonl_rows(tmp_path, feats, capsys, fmt):
    out_path = tmp_path / f"p.{fmt}"
    code, _, err = _run(capsys, "replay", "--features", str(feats), "--method", "tda", "--out", str(out_path))
    assert code == 0, err
    if fmt == "csv":
        rows = list(csv.DictReader(out_path.open()))
    else:
        rows = [json.loads(line) for line in out_path.read_text().splitlines()]
    assert len(rows) == 200
    assert {"index", "prediction", "score", "clip_prediction", "clip_score", "label", "prediction_name"} <= set(rows[0])
    assert rows[0]["prediction_name"] in list("abcde")


def test_config_file_is_applied(tmp_path, feats, capsys):
    code, out, _ = _run(capsys, "replay", "--features", str(feats), "--config", "configs/eurosat.yaml", "--json")
    assert code == 0
    assert json.loads(out.splitlines()[-1])["hyperparameters"]["beta"] == 8.0


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--method", "msta"], "unknown method 'msta'; choose one of: zero-shot, tda,"),
        (["--set", "kk=1"], "unknown key 'kk'"),
        (["--set", "k=-1"], "bad value for 'k'"),
        (["--config", "nope.yaml"], "config file not found"),
        (["--out", "preds.txt"], "unknown format '.txt'"),
        (["--device", "cuda:7"], "cuda"),
    ],
)
def test_bad_flags_exit_2_one_line(tmp_path, feats, capsys, argv, message):
    code, out, err = _run(capsys, "replay", "--features", str(feats), *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("mstta-bench: error:")
    assert message in err
    assert not list(tmp_path.glob("preds*"))


def test_missing_or_unreadable_feature_file(tmp_path, capsys):
    code, _, err = _run(capsys, "replay", "--features", str(tmp_path / "none.npz"))
    assert code == 2 and "feature file not found" in err
    (tmp_path / "bad.npz").write_text("garbage")
    code, _, err = _run(capsys, "replay", "--features", str(tmp_path / "bad.npz"))
    assert code == 2 and "not a valid .npz" in err


def test_missing_required_flag_and_no_command(capsys):
    code, _, err = _run(capsys, "replay")
    assert code == 2 and "--features" in err and err.count("\n") == 1
    code, _, err = _run(capsys)
    assert code == 2 and "no command given" in err


def test_console_script_no_traceback(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, features=np.full((3, 4), np.nan, dtype=np.float32), text=np.eye(4, dtype=np.float32)[:2])
    proc = subprocess.run(
        [sys.executable, "-m", "mstta.cli", "replay", "--features", str(bad)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert (
        proc.stderr.strip() == f"mstta-bench: error: {bad}: array 'features' has a non-finite value at index 0; "
        "re-extract the features or drop that sample"
    )


def test_a_command_with_a_missing_package_breaks_only_itself(tmp_path, feats, capsys, monkeypatch):
    import importlib

    import mstta.cli as cli

    real = importlib.import_module

    def fake(name, *a):
        if name == "mstta.commands.tsne":
            raise ModuleNotFoundError("No module named 'sklearn'", name="sklearn")
        return real(name, *a)

    monkeypatch.setattr(cli.importlib, "import_module", fake)
    code, _, err = _run(capsys, "replay", "--features", str(feats))
    assert code == 0, err
    code, _, err = _run(capsys, "tsne", "--dataset", "dtd")
    assert code == 2 and err == (
        "mstta-bench: error: 'tsne' cannot run: No module named 'sklearn'; install the missing package (make install)\n"
    )
