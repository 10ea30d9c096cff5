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


# The files that take longest under `make test` (seconds on CI's 2-vCPU AMD EPYC, --durations): they
# start first, so `--dist loadfile` never leaves one running alone at the end (the notes walk, 355 s,
# sorted last by name, was the run's tail). Order only: every test runs.
LONG_FILES = (
    "test_ui_browser_notes.py",  # 355
    "test_ui_browser.py",
    "test_ui_client.py",
    "test_bank_dtype.py",  # 107
    "test_bad_inputs_ui.py",
    "test_bad_inputs_demo.py",
    "test_ui_browser_sessions.py",
    "test_protocol.py",
)


def pytest_collection_modifyitems(config, items):
    """LONG_FILES' tests first, in that order; the rest as collected."""
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


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
