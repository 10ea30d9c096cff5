"""Issue 25, extraction: a run killed with SIGKILL mid-shard resumes past torn and foreign shards, and
one output file has one writer however its path is spelled (real subprocesses, bounded in time)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers_data import make_fake_dataset

from mstta.cli import main as bench_main

REPO = Path(__file__).resolve().parent.parent
DEADLINE_S = 180  # a bound on each wait, never a timing assertion
NAME = "oxford_pets_mstta-tiny_none_v8-augmix_s1.npz"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    make_fake_dataset(root, "oxford_pets", classes=3, per_class=40)
    return root


def _args(data, out, cache) -> list[str]:
    return [
        "extract",
        "--dataset",
        "oxford_pets",
        "--data-root",
        str(data),
        "--model",
        "mstta-tiny",
        "--pretrained",
        "none",
        "--views",
        "8",
        "--augment",
        "augmix",
        "--shard-size",
        "2",
        "--batch-size",
        "16",
        "--workers",
        "0",
        "--device",
        "cpu",
        "--cache-dir",
        str(cache),
        "--out",
        str(out),
    ]


def _start(args: list[str], cwd: Path = REPO) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "mstta.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(path: Path, proc: subprocess.Popen) -> None:
    end = time.monotonic() + DEADLINE_S
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"the run ended before {path.name} appeared: {proc.stderr.read()[-1000:]}")
        if time.monotonic() > end:
            proc.kill()
            pytest.fail(f"{path.name} did not appear within {DEADLINE_S} s")
        time.sleep(0.02)


def _arrays(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def test_sigkill_mid_run_then_torn_and_foreign_shards_resume_to_the_clean_file(data, tmp_path):
    out = tmp_path / "k.npz"
    work = tmp_path / ".k.npz.work"
    proc = _start(_args(data, out, tmp_path / "cache"))
    _wait_for(work / "shard-000002.npz", proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=DEADLINE_S)
    proc.stdout.close(), proc.stderr.close()
    assert not out.exists()
    shards = sorted(work.glob("shard-*.npz"))
    assert len(shards) >= 3
    # torn: shard 0 cut in half; foreign: shard 2's file under shard 1's name (other positions, other
    # index), and a shard of other settings (another model's width) under shard 2's name
    torn = shards[0].read_bytes()
    shards[0].write_bytes(torn[: len(torn) // 2])
    (work / "shard-000001.npz").write_bytes((work / "shard-000002.npz").read_bytes())
    np.savez(
        work / "shard-000002.npz",
        positions=np.arange(4, 6),
        features=np.ones((2, 8, 32), np.float16),
        skipped=np.zeros(0, np.int64),
        reasons=np.asarray([""]),
    )
    again = subprocess.run(
        [sys.executable, "-m", "mstta.cli", *_args(data, out, tmp_path / "cache")],
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert "Traceback" not in again.stderr and "discarding" in again.stderr
    assert not work.exists() and not list(tmp_path.glob(".k.npz*"))
    assert bench_main(_args(data, tmp_path / "clean.npz", tmp_path / "cache")) == 0
    a, b = _arrays(out), _arrays(tmp_path / "clean.npz")
    assert set(a) == set(b)
    for k in ("features", "text", "labels", "classnames"):
        assert np.array_equal(a[k], b[k]), k


def test_one_writer_for_a_folder_and_the_file_inside_it_by_any_spelling(data, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "feats"
    (tmp_path / "link").symlink_to(folder, target_is_directory=True)
    proc = _start(_args(data, folder, tmp_path / "cache"))  # the folder spelling, absolute
    work = folder / f".{NAME}.work"
    _wait_for(work / "shard-000000.npz", proc)
    monkeypatch.chdir(tmp_path)
    # the file inside it, relative and through a symlinked folder: refused at once, nothing written
    for spelling in (f"link/{NAME}", f"feats/../feats/{NAME}", "link"):
        code = bench_main(_args(data, spelling, tmp_path / "cache"))
        err = capsys.readouterr().err
        lines = [ln for ln in err.strip().splitlines() if "RANDOM weights" not in ln]
        assert code == 2 and len(lines) == 1 and f"another mstta run (pid {proc.pid})" in lines[0], err
    try:
        proc.wait(timeout=DEADLINE_S)
    finally:
        proc.kill()
    proc.stdout.close()
    assert proc.returncode == 0, proc.stderr.read()[-2000:]
    proc.stderr.close()
    assert (folder / NAME).is_file()
    assert sorted(p.name for p in folder.iterdir()) == [NAME]  # no work folder, no lock, no temp file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "feats", "link"]
