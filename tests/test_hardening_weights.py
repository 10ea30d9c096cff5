"""Issue 25, non-finite weights and checkpoint files: a NaN checkpoint, weights beyond float16, text or
image features that overflow in fp16, and a TorchScript archive are refused in one line naming the
flag and the file; `extract` never writes a non-finite feature or text row (exit 2, nothing left)."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from helpers_data import make_fake_dataset

from mstta.cli import main as bench_main
from mstta.errors import UserError
from mstta.features.extract import run_extraction
from mstta.features.models import build_text_classifier, load_clip

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    make_fake_dataset(root, "oxford_pets", classes=2, per_class=2)
    return root


def _checkpoint(tiny_clip, path: Path, **changes) -> Path:
    sd = {k: v.clone() for k, v in tiny_clip.model.state_dict().items()}
    for key, fn in changes.items():
        sd[key] = fn(sd[key])
    torch.save(sd, path)
    return path


def _nan(t):
    t[0, 0] = float("nan")
    return t


def _huge(t):  # finite in fp32, beyond fp16's 65504
    return t * 1e9


def _overflowing(t):  # finite in fp16, but a row's sum of products overflows it
    return 60000.0 * torch.randn_like(t).sign()


def _extract_cli(capsys, data, out, tmp_path, *extra) -> tuple[int, list[str]]:
    code = bench_main(
        [
            "extract",
            "--dataset",
            "oxford_pets",
            "--data-root",
            str(data),
            "--model",
            "mstta-tiny",
            "--device",
            "cpu",
            "--workers",
            "0",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--out",
            str(out),
            *map(str, extra),
        ]
    )
    err = capsys.readouterr().err
    return code, [ln for ln in err.strip().splitlines() if ln.strip()]


@pytest.mark.parametrize(
    "key, change, precision, expected",
    [
        ("visual.proj", _nan, "fp32", "non-finite values (NaN or inf) in visual.proj: a damaged checkpoint"),
        (
            "text_projection",
            _huge,
            "fp16",
            "non-finite values (NaN or inf) in text_projection: beyond fp16's range (pass --precision fp32)",
        ),
    ],
)
def test_non_finite_weights_refused_at_load_naming_the_checkpoint(
    tiny_clip, tmp_path, capsys, data, key, change, precision, expected
):
    path = _checkpoint(tiny_clip, tmp_path / "bad.pt", **{key: change})
    with pytest.raises(UserError) as err:
        load_clip("mstta-tiny", str(path), "cpu", precision)
    assert str(err.value).startswith(f"--pretrained {path}: ") and expected in str(err.value)
    code, lines = _extract_cli(capsys, data, tmp_path / "o", tmp_path, "--pretrained", path, "--precision", precision)
    assert code == 2 and len(lines) == 1 and expected in lines[0]
    assert not (tmp_path / "o").exists()


def test_fp16_text_overflow_refused_when_the_classifier_is_built(tiny_clip, tmp_path, capsys, data):
    path = _checkpoint(tiny_clip, tmp_path / "over.pt", text_projection=_overflowing)
    clip = load_clip("mstta-tiny", str(path), "cpu", "fp16")  # finite weights: loads
    with pytest.raises(UserError, match=rf"^--pretrained {path}: --model mstta-tiny gives non-finite text features"):
        build_text_classifier(clip, ["cat", "dog"], ["a photo of a {}."])
    code, lines = _extract_cli(capsys, data, tmp_path / "o", tmp_path, "--pretrained", path, "--precision", "fp16")
    assert code == 2 and len(lines) == 1 and "non-finite text features" in lines[0] and "--precision fp32" in lines[0]
    assert not (tmp_path / "o").exists()


def test_fp16_image_overflow_writes_no_feature_file(tiny_clip, tmp_path, data):
    path = _checkpoint(tiny_clip, tmp_path / "over.pt", **{"visual.proj": _overflowing})
    clip = load_clip("mstta-tiny", str(path), "cpu", "fp16")
    with pytest.raises(UserError, match=rf"^--pretrained {path}: .* non-finite image features .* --precision fp32"):
        run_extraction(
            "oxford_pets",
            tmp_path / "o",
            data,
            model="mstta-tiny",
            pretrained=str(path),
            precision="fp16",
            device="cpu",
            workers=0,
            clip=clip,
            cache_dir=tmp_path / "cache",
        )
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())  # no file, no work folder


def test_torchscript_archive_is_one_line_naming_flag_and_file(tmp_path, data):
    path = tmp_path / "scripted.pt"
    with warnings.catch_warnings():  # torch deprecates TorchScript; the archive is the input here
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace(torch.nn.Linear(2, 2), torch.zeros(1, 2)), str(path))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mstta.cli",
            "extract",
            "--dataset",
            "oxford_pets",
            "--data-root",
            str(data),
            "--model",
            "mstta-tiny",
            "--pretrained",
            str(path),
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "o"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"--pretrained {path}: is a TorchScript archive" in lines[0] and "state_dict" in lines[0]
    assert not (tmp_path / "o").exists()
