"""Shared fixtures: generated feature streams (no CLIP, no network) and the one tiny CLIP model."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from synthetic import make_stream

# Without a GPU, Triton's kernels (`mstta.engine.fused`) run through its interpreter on CPU tensors
# (tests/test_fused.py). Triton reads this when it is first imported, which may be any test's doing.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# The files that take longest under `make test` (test-seconds in a `.ci/run` rehearsal on a 2-vCPU AMD
# EPYC, --durations=0): they start first, so `--dist loadfile` never leaves one running alone at the
# end. Without this, pytest-xdist starts the files with the most tests first, and the notes walk, one
# test, ran last and alone (the tests took 1,323 s where half their sum was 1,113; with this order
# 1,016 s where half is 981). `make test` passes --no-loadscope-reorder so that xdist keeps this
# order; xdist gives each worker two files at the start, the 1st and 3rd to one, the 2nd and 4th to the
# other, so a Chromium file and a file without one take turns: the two long Chromium files run one after
# the other, never side by side (run together at the start, a plot of test_ui_browser.py's first test
# once stayed a frame short). Order only: every test runs.
LONG_FILES = (
    "test_ui_browser.py",  # 361
    "test_ui_client.py",  # 173
    "test_ui_browser_notes.py",  # 284
    "test_bad_inputs_ui.py",  # 112
    "test_ui_browser_sessions.py",  # 72
    "test_protocol.py",  # 77
    "test_ui_browser_race.py",  # 68
    "test_bank_dtype.py",  # 53
    "test_host_reads.py",  # 49
    "test_fused.py",  # 46
    "test_benchmark_run.py",  # 43
    "test_bad_inputs_demo.py",  # 38
    "test_multi.py",  # 36
    "test_tensor_views.py",  # 35
    "test_extract.py",  # 34
    "test_hardening_extract.py",  # 33
)


def pytest_collection_modifyitems(config, items):
    """LONG_FILES' tests first, in that order; then the other files by their count of tests, most
    first (xdist's own order); each file's tests as collected."""
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    count: dict = {}
    for item in items:
        count[item.path] = count.get(item.path, 0) + 1
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), -count[item.path], str(item.path)))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    np.random.seed(0)


@pytest.fixture(scope="session")
def tiny_clip():
    """The random-weight `mstta-tiny` CLIP (a `mstta.features.models.ClipModel`, 64x64 input, CPU, fp32), loaded
    once per test session and shared: tests read it, never change it."""
    from helpers_video import tiny_clip as load_tiny  # one cached model, also for tests that call the helper

    return load_tiny()


@pytest.fixture
def stream():
    """A small labelled single-view stream: features [300, 16], text [6, 16]."""
    return make_stream(n=300, classes=6, dim=16, seed=3)


def write_npz(path, **arrays):
    np.savez(path, **arrays)
    return path
