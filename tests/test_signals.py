"""SIGTERM and kill -9 against a real `mstta-bench replay` process (issue 12, part 5).

SIGTERM mid-write and mid-run: exit 130 with one line, no temp file, no partial output, the
input unchanged. kill -9 mid-write leaves a pid-tagged temp that the next run sweeps away.
Each test is bounded in time (the waits fail rather than hang)."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers_cli import run_bench

N = 400_000  # rows of the stream: writing its CSV takes seconds, so SIGTERM lands mid-write


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    g = np.random.default_rng(0)
    p = tmp_path_factory.mktemp("big") / "f.npz"
    with open(p, "wb") as fh:
        np.savez(
            fh,
            features=g.standard_normal((N, 8)).astype(np.float16),
            text=g.standard_normal((3, 8)).astype(np.float32),
            labels=g.integers(0, 3, N),
        )
    return p


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _start(*argv) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "mstta.cli", "replay", *map(str, argv)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(pred, proc: subprocess.Popen, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = pred()
        if found:
            return found
        if proc.poll() is not None:
            pytest.fail(f"replay ended (code {proc.returncode}) before {what}: {proc.stderr.read()}")
        time.sleep(0.002)
    proc.kill()
    pytest.fail(f"timed out waiting for {what}")


def _temps(folder: Path, pid: int) -> list[Path]:
    return [p for p in folder.iterdir() if re.match(rf"^\.p\.csv\.{pid}-[0-9a-f]{{8}}\.tmp$", p.name)]


def _sigterm_caught(pid: int) -> bool:
    """True once run_cli has installed its SIGTERM handler (bit 15 of SigCgt)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(re.search(r"^SigCgt:\s*([0-9a-f]+)$", status, re.M).group(1), 16)
    return bool(caught >> (signal.SIGTERM - 1) & 1)


def _assert_interrupted(proc: subprocess.Popen) -> None:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    lines = err.splitlines()  # the file's missing-scale warning may come first (a generated file records none)
    assert lines[-1].startswith("mstta-bench: interrupted; rerun the same command") and out == "", err
    assert all(line.startswith("mstta") for line in lines), err  # one-line messages, no traceback


def test_sigterm_mid_write_leaves_nothing(big, tmp_path):
    before = _sha(big)
    out = tmp_path / "out"
    proc = _start("--features", big, "--method", "zero-shot", "--out", out / "p.csv")
    (temp,) = _wait_for(lambda: out.is_dir() and _temps(out, proc.pid), proc, "the temp file")
    assert temp.exists()
    proc.send_signal(signal.SIGTERM)
    _assert_interrupted(proc)
    assert list(out.iterdir()) == []  # no temp, no half-written p.csv
    assert _sha(big) == before


def test_sigterm_mid_run_leaves_nothing(big, tmp_path):
    before = _sha(big)
    proc = _start("--features", big, "--method", "ms-tta", "--online", "--out", tmp_path / "p.csv")
    _wait_for(lambda: _sigterm_caught(proc.pid), proc, "the SIGTERM handler")
    time.sleep(0.5)  # inside the load or the (minutes-long) online replay
    proc.send_signal(signal.SIGTERM)
    _assert_interrupted(proc)
    assert list(tmp_path.iterdir()) == []
    assert _sha(big) == before


def test_kill_9_leftover_is_swept_by_the_next_run(big, tmp_path, capsys):
    before = _sha(big)
    proc = _start("--features", big, "--method", "zero-shot", "--out", tmp_path / "p.csv")
    (temp,) = _wait_for(lambda: _temps(tmp_path, proc.pid), proc, "the temp file")
    proc.kill()
    proc.wait(timeout=60)
    assert temp.exists() and not (tmp_path / "p.csv").exists()  # kill -9 cannot clean up
    keep = tmp_path / f".p.csv.{os.getppid()}-0badc0de.tmp"  # a live process's temp: kept
    keep.write_text("in flight")
    small = tmp_path / "small.npz"
    with open(small, "wb") as fh:
        np.savez(fh, features=np.eye(4, dtype=np.float32), text=np.eye(4, dtype=np.float32)[:2])
    code, _, err = run_bench(capsys, "replay", "--features", small, "--out", tmp_path / "p.csv")
    assert code == 0, err
    assert not temp.exists() and keep.exists()
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 5
    assert _sha(big) == before
