"""Shared fixtures: generated feature streams (no CLIP, no network)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from synthetic import make_stream


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    np.random.seed(0)


@pytest.fixture
def stream():
    """A small labelled single-view stream: features [300, 16], text [6, 16]."""
    return make_stream(n=300, classes=6, dim=16, seed=3)


def write_npz(path, **arrays):
    np.savez(path, **arrays)
    return path
