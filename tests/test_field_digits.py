"""The shifted-digits benchmark (mstta.data.digits): deterministic, readable layout, never overwrites."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from mstta.data import digits as D
from mstta.data import load_split
from mstta.errors import UserError


@pytest.fixture
def small(monkeypatch):
    """Two held-out digits of each class and 3 crops per photograph: the same code path, a fraction of the images."""
    xs, ys = D.test_digits()
    pick = np.concatenate([np.flatnonzero(ys == c)[:2] for c in range(10)])
    monkeypatch.setattr(D, "test_digits", lambda: (xs[pick], ys[pick]))
    monkeypatch.setattr(D, "PHOTO_CROPS", 3)


def _digest(root):
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.png")):
        h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


def test_held_out_split_is_the_models():
    xs, ys = D.test_digits()
    assert len(xs) == 599 and np.bincount(ys).min() >= 58  # assets/make_digits.py's test third


def test_generated_twice_identically_as_imagefolders(tmp_path, small):
    a, b = D.make_shifted_digits(tmp_path / "a"), D.make_shifted_digits(tmp_path / "b")
    assert _digest(a) == _digest(b)
    for shift in D.SHIFTS:
        split = load_split(f"imagefolder:{a / shift}")
        assert split.classnames == sorted(D.CLASSNAMES) and len(split) == 20  # imagefolder: sorted names
    assert load_split(f"imagefolder:{a / 'photos'}").classnames == ["flower", "temple"]
    shifted = {
        s: np.asarray(__import__("PIL.Image", fromlist=["Image"]).open(next((a / s / "zero").iterdir())))
        for s in D.SHIFTS
    }
    for s in D.SHIFTS[1:]:  # every shift changes the picture
        assert np.abs(shifted[s].astype(int) - shifted["clean"].astype(int)).mean() > 2


def test_reused_and_never_overwritten(tmp_path, small):
    root = D.make_shifted_digits(tmp_path / "sd")
    stamp = {p: p.stat().st_mtime_ns for p in root.rglob("*.png")}
    assert D.make_shifted_digits(root) == root and {p: p.stat().st_mtime_ns for p in root.rglob("*.png")} == stamp
    other = tmp_path / "mine"
    (other / "x").mkdir(parents=True)
    with pytest.raises(UserError, match="does not hold this shifted-digits benchmark"):
        D.make_shifted_digits(other)
    assert sorted(p.name for p in other.iterdir()) == ["x"]
    assert not D.make_shifted_digits(tmp_path / "dry", write=False).exists()


@pytest.mark.parametrize("given,want", [([], 4096), (["--batch-size", "8"], 8)])
def test_digits_preset_encodes_in_large_batches(tmp_path, given, want):
    """`field --digits` encodes 4096 images per forward unless --batch-size says (the same features:
    tests/test_extract.py `test_batch_size_gives_the_same_file`)."""
    import argparse

    from mstta.commands import field as F

    p = argparse.ArgumentParser()
    F.add_arguments(p)
    args = p.parse_args(["--digits", "--dry-run", "--store", str(tmp_path), *given])
    F.digits_preset(args)
    assert args.batch_size == want == (F.DIGITS_BATCH if not given else 8)
