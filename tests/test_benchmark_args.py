"""The benchmark scripts refuse a bad flag in one line naming it (exit 2, no traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "args, named",
    [
        (["--methods", "ms-tta,bogus"], "--methods: bogus"),
        (["--methods", "dota"], "--methods: dota"),  # another family: not replayed in chunks
    ],
)
def test_replay_profile_refuses_what_it_cannot_profile(args, named):
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "replay_profile.py"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert run.returncode == 2 and named in run.stderr and "Traceback" not in run.stderr
    assert run.stdout == ""
