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
