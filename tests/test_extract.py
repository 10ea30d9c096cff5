"""`mstta-bench extract`: file format, stream order, reuse, resume, skipping, torchrun sharding, CLI errors."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers_cli import run_bench
from helpers_data import make_fake_dataset
from PIL import Image

import mstta.features.extract as ex
import mstta.features.extract_encode as encode
from mstta.cli import main as bench_main
from mstta.data import load_split
from mstta.errors import UserError
from mstta.features.extract import default_file_name, run_extraction, stream_order
from mstta.features.extract_settings import ExtractSettings
from mstta.features.format import load_features
from mstta.features.models import build_text_classifier

REPO = Path(__file__).resolve().parent.parent
TINY = {"model": "mstta-tiny", "pretrained": "none", "device": "cpu", "workers": 0}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    make_fake_dataset(root, "oxford_pets", classes=3, per_class=3)
    return root


def _run(data, out, tmp_path, **kw):
    opts = {
        **TINY,
        "views": 4,
        "augment": "crop",
        "shard_size": 4,
        "batch_size": 8,
        "cache_dir": tmp_path / "cache",
        **kw,
    }
    return run_extraction("oxford_pets", out, data, **opts)


def _arrays(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def test_feature_file_in_replay_format(data, tmp_path, tiny_clip):
    res = _run(data, tmp_path / "out", tmp_path)
    assert res.path == tmp_path / "out" / "oxford_pets_mstta-tiny_none_v4-crop_s1.npz" and not res.reused
    fs = load_features(res.path)
    split = load_split("oxford_pets", data)
    order = stream_order(len(split), 1)
    assert fs.features.shape == (9, 4, 64) and fs.text.shape == (3, 64)
    assert fs.labels.tolist() == [split.items[i][1] for i in order]
    assert fs.classnames == split.classnames
    meta = fs.meta
    for key, value in {
        "model": "mstta-tiny",
        "pretrained": "none",
        "dataset": "oxford_pets",
        "views": 4,
        "augment": "crop",
        "seed": 1,
        "n": 9,
        "skipped": 0,
        "precision": "fp32",
    }.items():
        assert meta[key] == value, key
    assert {"template_hash", "version", "stream_hash", "weights"} <= set(meta)
    text = build_text_classifier(tiny_clip, split.classnames, split.templates)
    assert torch.allclose(fs.text.float(), text, atol=2e-3)
    # view 0 of stream position j is CLIP's preprocessing of item order[j]
    for j in (0, 5):
        img = Image.open(split.items[order[j]][0]).convert("RGB")
        want = tiny_clip.encode_images(tiny_clip.preprocess(img)[None])[0]
        assert torch.allclose(fs.features[j, 0].float(), want, atol=3e-3)
    assert not list((tmp_path / "out").glob(".*"))  # no temp file or work folder left behind


def test_single_view_is_n_by_d_and_limit_takes_the_stream_head(data, tmp_path):
    full = load_features(_run(data, tmp_path / "a.npz", tmp_path, views=1).path)
    head = load_features(_run(data, tmp_path / "b.npz", tmp_path, views=1, limit=4).path)
    assert full.features.shape == (9, 64) and head.features.shape == (4, 64)
    assert torch.equal(head.features, full.features[:4]) and head.labels.tolist() == full.labels[:4].tolist()
    assert head.meta["limit"] == 4 and head.meta["augment"] == "none"


def test_existing_file_reused_or_refused(data, tmp_path, monkeypatch):
    out = tmp_path / "f.npz"
    _run(data, out, tmp_path)
    monkeypatch.setattr(ex, "load_clip", lambda *a, **k: pytest.fail("model loaded despite reuse"))
    res = _run(data, out, tmp_path)
    assert res.reused and res.path == out
    with pytest.raises(UserError, match=r"exists with different settings \(views: 4 -> 2.*pass a different --out"):
        _run(data, out, tmp_path, views=2)
    with pytest.raises(UserError, match="seed: 1 -> 2"):
        _run(data, out, tmp_path, seed=2)
    bogus = tmp_path / "bogus.npz"
    bogus.write_text("not a zip")
    with pytest.raises(UserError, match="exists but is not a feature file"):
        _run(data, bogus, tmp_path)


def test_interrupted_run_resumes_from_its_last_shard(data, tmp_path, monkeypatch):
    out = tmp_path / "r.npz"
    real_write, real_load = encode.write_shard, ex.load_clip

    def write_then_stop(*args):
        real_write(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(encode, "write_shard", write_then_stop)
    with pytest.raises(KeyboardInterrupt):
        _run(data, out, tmp_path)
    work = tmp_path / ".r.npz.work"
    assert not out.exists() and sorted(p.name for p in work.iterdir()) == ["settings.json", "shard-000000.npz"]

    encoded = []

    def counting_clip(*args, **kwargs):  # the model the resumed run loads, counting the views it encodes
        clip = real_load(*args, **kwargs)
        real_images = clip.encode_images
        clip.encode_images = lambda pixels: encoded.append(len(pixels)) or real_images(pixels)
        return clip

    monkeypatch.setattr(encode, "write_shard", real_write)
    monkeypatch.setattr(ex, "load_clip", counting_clip)
    _run(data, out, tmp_path)
    assert sum(encoded) == (9 - 4) * 4 and not work.exists()  # the 5 samples past the kept shard, 4 views each
    fresh = _run(data, tmp_path / "fresh.npz", tmp_path).path
    a, b = _arrays(out), _arrays(fresh)
    assert all(np.array_equal(a[k], b[k]) for k in ("features", "text", "labels", "classnames"))


def test_preloaded_model_is_used(data, tmp_path, tiny_clip, monkeypatch):
    monkeypatch.setattr(ex, "load_clip", lambda *a, **k: pytest.fail("model loaded although one was given"))
    a = _run(data, tmp_path / "pre.npz", tmp_path, clip=tiny_clip)
    assert load_features(a.path).num_samples == 9
    with pytest.raises(UserError, match="the loaded model is mstta-tiny none fp32"):
        _run(data, tmp_path / "pre2.npz", tmp_path, clip=tiny_clip, precision="bf16")


def test_stale_work_folder_of_other_settings_is_discarded(data, tmp_path):
    work = tmp_path / ".s.npz.work"
    work.mkdir()
    (work / "settings.json").write_text("{}")
    (work / "shard-000000.npz").write_bytes(b"stale")
    res = _run(data, tmp_path / "s.npz", tmp_path)
    assert load_features(res.path).num_samples == 9 and not work.exists()


def test_corrupt_image_is_skipped_and_counted(tmp_path, caplog):
    make_fake_dataset(tmp_path / "d", "oxford_pets", classes=3, per_class=3)
    bad = load_split("oxford_pets", tmp_path / "d").items[4][0]
    bad.write_bytes(b"\xff\xd8 truncated jpeg")
    res = run_extraction(
        "oxford_pets", tmp_path / "o.npz", tmp_path / "d", **TINY, views=2, shard_size=3, cache_dir=tmp_path / "cache"
    )
    fs = load_features(res.path)
    assert res.skipped == 1 and fs.num_samples == 8 and fs.meta["skipped"] == 1
    assert str(bad) in fs.meta["skipped_paths"][0] and "skipped 1 unreadable image" in caplog.text


def test_worker_processes_give_the_same_file(data, tmp_path):
    a = _arrays(_run(data, tmp_path / "w0.npz", tmp_path, views=3, augment="augmix").path)
    b = _arrays(_run(data, tmp_path / "w1.npz", tmp_path, views=3, augment="augmix", workers=1).path)
    x, y = a["features"].astype(np.float32), b["features"].astype(np.float32)
    print("differing", int((x != y).sum()), "of", x.size, "max", float(np.abs(x - y).max()), float(np.abs(x).max()))
    assert np.array_equal(a["features"], b["features"]) and np.array_equal(a["labels"], b["labels"])


def test_batch_size_gives_the_same_file(data, tmp_path):
    """The encoder computes each image's row alone: `--batch-size` (e.g. `field --digits`'s 4096) changes
    no feature by more than one fp16 step, and almost none at all (the same bytes where the machine's
    products do not depend on how many rows they take; AMD Zen 3's MKL moves 1 value of 2,304)."""
    a = _arrays(_run(data, tmp_path / "b3.npz", tmp_path, views=4, augment="augmix", batch_size=3).path)
    b = _arrays(_run(data, tmp_path / "b64.npz", tmp_path, views=4, augment="augmix", batch_size=64).path)
    x, y = a["features"], b["features"]
    assert np.array_equal(a["labels"], b["labels"]) and x.shape == y.shape and x.dtype == y.dtype == np.float16
    step = np.abs(np.spacing(np.maximum(np.abs(x), np.abs(y))))  # one fp16 step at each value
    assert (np.abs(x.astype(np.float32) - y.astype(np.float32)) <= step).all()
    assert (x != y).mean() < 0.01


def test_views_on_device_match_cpu_views_and_replay_alike(tmp_path):
    """`--views-on device` (tensor views, here on CPU tensors) vs `cpu` (PIL), same seed: view-by-view
    feature cosine and every method's replayed predictions."""
    from helpers_family import feature_methods
    from helpers_images import smooth_image

    from mstta.engine.replay import replay

    fake = make_fake_dataset(tmp_path / "d", "oxford_pets", classes=4, per_class=10)
    for k, (path, _) in enumerate(fake.items):  # photo-like 160x120 JPEGs, not 24x20 noise
        smooth_image(160, 120, k).save(path, quality=90)
    for augment in ("augmix", "crop"):
        files = {}
        for where in ("cpu", "device"):
            res = _run(
                fake.data_root,
                tmp_path / f"{augment}-{where}.npz",
                tmp_path,
                views=8,
                augment=augment,
                shard_size=16,
                batch_size=64,
                views_on=where,
            )
            files[where] = load_features(res.path)
            assert files[where].meta["views_on"] == where
        a, b = files["cpu"].features.float(), files["device"].features.float()
        cos = torch.nn.functional.cosine_similarity(a, b, dim=-1)
        assert a.shape == (40, 8, 64) and cos.mean() >= 0.99 and cos.min() >= 0.95, (augment, cos.mean(), cos.min())
        for method in feature_methods():  # the prompt-tuning rows need a text tower: tests/test_family_tpt.py
            pa = replay(a, files["cpu"].text.float(), method).predictions
            pb = replay(b, files["device"].text.float(), method).predictions
            assert np.mean(pa == pb) >= 0.99, (augment, method, np.mean(pa == pb))


@pytest.mark.slow
def test_torchrun_two_ranks_equal_single_process(data, tmp_path):
    """`torchrun --nproc-per-node 2` (gloo, CPU): rank 0 merges the ranks' shards into the same file."""
    common = [
        "--dataset",
        "oxford_pets",
        "--data-root",
        str(data),
        "--model",
        "mstta-tiny",
        "--pretrained",
        "none",
        "--views",
        "4",
        "--augment",
        "augmix",
        "--shard-size",
        "2",
        "--batch-size",
        "8",
        "--workers",
        "0",
        "--device",
        "cpu",
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "mstta.cli",
            "extract",
            *common,
            "--out",
            str(tmp_path / "dist.npz"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("wrote ") == 1  # only rank 0 reports
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert bench_main(["extract", *common, "--out", str(tmp_path / "single.npz")]) == 0
    finally:
        torch.set_num_threads(threads)
    a, b = _arrays(tmp_path / "dist.npz"), _arrays(tmp_path / "single.npz")
    assert set(a) == set(b)
    for k in a:
        assert np.array_equal(a[k], b[k]), k
    assert not list(tmp_path.glob(".*.work"))


def test_default_file_names():
    s = ExtractSettings(
        "imagefolder:/data/my photos", "ViT-B-16", "/ckpt/model.pt", "w", "fp16", 64, "augmix", 3, "h", 100, "x"
    )
    assert default_file_name(s) == "imagefolder-my-photos_ViT-B-16_model_v64-augmix_s3_n100.npz"
    crop = dataclasses.replace(s, augment="crop")  # the same V, another view kind: another file (issue 33)
    assert default_file_name(crop) == "imagefolder-my-photos_ViT-B-16_model_v64-crop_s3_n100.npz"
    one = dataclasses.replace(s, views=1, augment="none")
    assert default_file_name(one) == "imagefolder-my-photos_ViT-B-16_model_v1_s3_n100.npz"


# --- CLI -----------------------------------------------------------------------------------------------


def _cli(capsys, *args) -> tuple[int, str, str]:
    return run_bench(capsys, "extract", *args)


@pytest.mark.parametrize(
    "dataset, views, augment",
    [("oxford_pets", 64, "crop"), ("imagenet_a", 64, "augmix"), ("imagenet", 1, "none"), ("imagefolder", 1, "none")],
)
def test_cli_views_default_from_dataset_config(tmp_path, capsys, dataset, views, augment):
    fake = make_fake_dataset(tmp_path / "d", dataset, classes=2, per_class=1)
    code, out, _ = _cli(
        capsys,
        "--dataset",
        fake.dataset,
        "--data-root",
        fake.data_root,
        "--model",
        "mstta-tiny",
        "--pretrained",
        "none",
        "--out",
        tmp_path / "o",
        "--cache-dir",
        tmp_path / "c",
        "--workers",
        0,
        "--limit",
        1,
        "--json",
    )
    report = json.loads(out.strip().splitlines()[-1])
    meta = load_features(report["out"]).meta
    assert code == 0 and (meta["views"], meta["augment"], report["n"]) == (views, augment, 1)


def test_cli_template_for_imagefolder(tmp_path, capsys):
    fake = make_fake_dataset(tmp_path, "imagefolder", classes=2, per_class=1)
    args = [
        "--dataset",
        fake.dataset,
        "--model",
        "mstta-tiny",
        "--pretrained",
        "none",
        "--cache-dir",
        tmp_path / "c",
        "--workers",
        0,
    ]
    assert _cli(capsys, *args, "--out", tmp_path / "a.npz")[0] == 0
    assert _cli(capsys, *args, "--out", tmp_path / "b.npz", "--template", "a photo of a {}.")[0] == 0
    a, b = load_features(tmp_path / "a.npz"), load_features(tmp_path / "b.npz")
    assert a.meta["template_hash"] != b.meta["template_hash"] and not torch.allclose(a.text.float(), b.text.float())
    code, out, _ = _cli(capsys, *args, "--out", tmp_path / "a.npz")
    assert code == 0 and "reused" in out


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--views", "0"], "--views 0: expected an integer in [1, 256] (1 = the original image only)"),
        (["--views", "100000"], "--views 100000: expected an integer in [1, 256]"),
        (["--views-on", "gpu"], "invalid choice: 'gpu'"),
        (["--limit", "0"], "--limit 0: expected an integer in [1, "),
        (["--batch-size", "0"], "--batch-size 0: expected an integer in [1, 65,536]"),
        (["--batch-size", "10000000"], "--batch-size 10000000: expected an integer in [1, 65,536]"),
        (["--shard-size", "0"], "--shard-size 0: expected an integer in [1, "),
        (["--workers", "-1"], "--workers -1: expected an integer in [0, 256]"),
        (["--workers", "100000"], "--workers 100000: expected an integer in [0, 256]"),
        (["--template", "no placeholder"], "exactly one '{}'"),
        (["--precision", "fp8"], "invalid choice: 'fp8'"),
        (["--device", "cuda:7"], "--device cuda:7"),
        (["--model", "NoSuchNet"], "--model NoSuchNet"),
        (["--pretrained", "/no/such.pt"], "checkpoint file not found"),
        (["--out", "IS_A_FILE"], "exists and is a file"),
        (["--pretrained", "IS_A_FILE"], "could not load checkpoint"),
    ],
)
def test_cli_bad_inputs_exit_2(data, tmp_path, capsys, extra, expected):
    (tmp_path / "IS_A_FILE").write_text("x")
    extra = [str(tmp_path / "IS_A_FILE") if e == "IS_A_FILE" else e for e in extra]
    args = [
        "--dataset",
        "oxford_pets",
        "--data-root",
        data,
        "--model",
        "mstta-tiny",
        "--pretrained",
        "none",
        "--out",
        tmp_path / "o",
        "--cache-dir",
        tmp_path / "c",
        "--workers",
        0,
        *extra,
    ]
    code, _, err = _cli(capsys, *args)
    lines = [ln for ln in err.strip().splitlines() if "RANDOM weights" not in ln]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("mstta-bench: error: ") and expected in lines[0]
    assert "Traceback" not in err and not (tmp_path / "o").exists()


def test_cli_unknown_dataset_and_missing_data_root(tmp_path, capsys):
    code, _, err = _cli(capsys, "--dataset", "cifar10", "--out", tmp_path)
    assert code == 2 and "unknown dataset" in err and len(err.strip().splitlines()) == 1
    code, _, err = _cli(capsys, "--dataset", "dtd", "--out", tmp_path)
    assert code == 2 and "--data-root is required" in err and len(err.strip().splitlines()) == 1


def test_cli_refuses_existing_file_of_other_settings(data, tmp_path, capsys):
    args = [
        "--dataset",
        "oxford_pets",
        "--data-root",
        data,
        "--model",
        "mstta-tiny",
        "--pretrained",
        "none",
        "--out",
        tmp_path / "x.npz",
        "--cache-dir",
        tmp_path / "c",
        "--workers",
        0,
        "--views",
        "2",
    ]
    assert _cli(capsys, *args)[0] == 0
    before = (tmp_path / "x.npz").read_bytes()
    code, _, err = _cli(capsys, *args[:-1], "3")
    assert code == 2 and "exists with different settings (views: 2 -> 3" in err and "delete" in err
    assert (tmp_path / "x.npz").read_bytes() == before
