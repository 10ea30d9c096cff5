"""`mstta-demo --bundled-demo` (what `make demo` runs) and a headless demo without the UI stack.

The fallback decision is tested with a fake weights cache (nothing is downloaded or probed): CLIP's
clip when ViT-B-16/openai weights are cached, else the digits demo with one line saying so; explicit
flags replace its parts; a missing asset is one line naming it and the command that makes it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_video import write_labels, write_video

import app.bundled as bundled
from app.cli import main
from mstta.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--model", "mstta-tiny", "--pretrained", "none"]
NOTE = "weights are not in the local cache"


def _args(**kw) -> argparse.Namespace:
    base = dict(model=None, pretrained=None, video=None, camera=None, labels=None, truth=None)
    return argparse.Namespace(**{**base, **kw})


@pytest.fixture
def cache(monkeypatch):
    """`cache(True)`: ViT-B-16/openai weights are on disk; `cache(False)`: they are not (offline)."""
    import mstta.features.weights as weights

    seen = []

    def set_cached(value: bool) -> None:
        monkeypatch.setattr(weights, "weights_cached", lambda name, tag: seen.append((name, tag)) or value)

    set_cached.seen = seen
    return set_cached


@pytest.fixture
def digits_assets(tmp_path, monkeypatch):
    """A stand-in assets folder holding the digits clip, its labels and its truth."""
    folder = tmp_path / "assets"
    folder.mkdir()
    write_video(folder / "digits.mp4", n=12, fourcc="mp4v")
    write_labels(folder / "digits_labels.txt", ["red circle", "green square", "blue triangle"])
    (folder / "digits_truth.csv").write_text("0,5,red circle\n6,11,green square\n", encoding="utf-8")
    (folder / "mstta-digits.pt").write_bytes(b"a stand-in checkpoint")
    monkeypatch.setattr(bundled, "ASSETS_DIR", folder)
    return folder


def test_cached_clip_weights_play_the_bundled_photographs_with_no_note(cache):
    cache(True)
    args = _args()
    assert bundled.apply_bundled(args) is None
    assert (args.model, args.pretrained) == ("ViT-B-16", "openai") and cache.seen == [("ViT-B-16", "openai")]
    assert [Path(p).relative_to(ROOT / "assets").as_posix() for p in (args.video, args.labels, args.truth)] == [
        "demo.mp4",
        "labels.txt",
        "truth.csv",
    ]


def test_offline_falls_back_to_the_digits_model_and_clip(cache, digits_assets, monkeypatch):
    import mstta.features.models as models

    cache(False)
    monkeypatch.setattr(models, "list_models", lambda: ["mstta-tiny", "mstta-digits"])  # its config is known
    args = _args()
    note = bundled.apply_bundled(args)
    assert (args.model, args.pretrained) == ("mstta-digits", "bundled")
    assert (args.video, args.labels, args.truth) == tuple(
        str(digits_assets / n) for n in ("digits.mp4", "digits_labels.txt", "digits_truth.csv")
    )
    assert NOTE in note and "mstta-digits" in note and "digits.mp4" in note and "\n" not in note


def test_explicit_flags_replace_their_part(cache, digits_assets):
    cache(False)
    args = _args(model="mstta-tiny", pretrained="none")  # the model part is the user's
    assert NOTE in bundled.apply_bundled(args)
    assert (args.model, args.pretrained, Path(args.video).name) == ("mstta-tiny", "none", "digits.mp4")
    mine = _args(video="mine.mp4", labels="mine.txt", model="RN50")  # both parts the user's: nothing changes
    assert bundled.apply_bundled(mine) is None and cache.seen == [("ViT-B-16", "openai")]
    assert (mine.video, mine.labels, mine.truth, mine.model, mine.pretrained) == (
        "mine.mp4",
        "mine.txt",
        None,
        "RN50",
        None,
    )


def test_a_missing_digits_asset_names_it_and_how_to_make_it(cache, digits_assets, monkeypatch):
    import mstta.features.models as models

    cache(False)
    (digits_assets / "digits_truth.csv").unlink()
    with pytest.raises(
        UserError,
        match=r"--bundled-demo: the bundled truth file .*digits_truth.csv is missing; "
        r"make it with: python assets/make_digits\.py",
    ):
        bundled.apply_bundled(_args())
    (digits_assets / "digits_truth.csv").write_text("0,5,red circle\n", encoding="utf-8")
    monkeypatch.setattr(models, "list_models", lambda: ["mstta-tiny"])  # the digits model's config not made yet
    with pytest.raises(UserError, match=r"the bundled model mstta-digits is missing .* python assets/make_digits\.py"):
        bundled.apply_bundled(_args())
    monkeypatch.setattr(models, "list_models", lambda: ["mstta-tiny", "mstta-digits"])
    (digits_assets / "mstta-digits.pt").unlink()  # its checkpoint not made yet
    with pytest.raises(
        UserError, match=r"mstta-digits is missing \(its config, and its checkpoint .*mstta-digits\.pt\)"
    ):
        bundled.apply_bundled(_args())
    assert bundled.apply_bundled(_args(model="mstta-tiny", pretrained="none")) is not None  # not needed then


def test_cli_fallback_prints_exactly_one_line_and_other_flags_apply(cache, digits_assets, tmp_path, capsys):
    cache(False)
    log = tmp_path / "out" / "p.jsonl"
    code = main(["--bundled-demo", "--headless", *TINY, "--every", "4", "--log", str(log), "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert [line for line in err.splitlines() if NOTE in line] == [
        f"mstta-demo: ViT-B-16 (openai) {NOTE}: playing the bundled digits demo instead "
        f"(mstta-tiny on its clip {digits_assets / 'digits.mp4'})"
    ]
    assert "3 frames processed" in out and "accuracy CLIP" in out  # the digits truth file was loaded
    assert len(log.read_text().splitlines()) == 3


def test_cli_missing_asset_is_one_line_exit_2(cache, digits_assets, capsys):
    cache(False)
    (digits_assets / "digits.mp4").unlink()
    assert main(["--bundled-demo", "--headless", *TINY]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("mstta-demo: error: --bundled-demo: the bundled video file")
    assert err[0].endswith("make it with: python assets/make_digits.py")


# ---------------------------------------------------------------------------- no UI stack
_BLOCK_GRADIO = '''
import sys

class _NoGradio:
    """As on a machine without Gradio: importing it fails."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("gradio", "gradio_client"):
            raise ImportError(f"No module named {name!r} (blocked by the test)", name=name)
        return None

sys.meta_path.insert(0, _NoGradio())
'''


def test_headless_runs_where_gradio_cannot_be_imported(tmp_path):
    (tmp_path / "block").mkdir()
    (tmp_path / "block" / "sitecustomize.py").write_text(_BLOCK_GRADIO, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "block"), str(ROOT)])}
    blocked = subprocess.run([sys.executable, "-c", "import gradio"], env=env, capture_output=True, text=True)
    assert blocked.returncode == 1 and "blocked by the test" in blocked.stderr  # the blocker works
    video, labels = write_video(tmp_path / "v.mp4", n=6, fourcc="mp4v"), write_labels(tmp_path / "l.txt")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "--headless",
            "--video",
            str(video),
            "--labels",
            str(labels),
            *TINY,
            "--every",
            "2",
            "--out",
            str(tmp_path / "a.mp4"),
            "--json",
            "--quiet",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert '"frames_processed": 3' in run.stdout and (tmp_path / "a.mp4").stat().st_size > 0
    ui = subprocess.run(
        [sys.executable, "-m", "app.cli", "--video", str(video), "--labels", str(labels), *TINY],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ui.returncode == 2 and "Traceback" not in ui.stderr
    assert ui.stderr.strip().splitlines()[-1] == (
        "mstta-demo: error: the browser UI needs gradio, which is not "
        "installed (pip install -e .); or run without a browser: --headless"
    )
    helped = subprocess.run(
        [sys.executable, "-m", "app.cli", "--help"], env=env, capture_output=True, text=True, timeout=600
    )
    assert helped.returncode == 0 and "--headless" in helped.stdout
    assert "gradio is not installed" in " ".join(helped.stdout.split())
