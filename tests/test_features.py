"""Feature files: round trip, normalisation on load, and every bad input named."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from mstta import UserError, load_features, save_features


def _arrays(n=5, c=3, d=4, views=None):
    g = np.random.default_rng(0)
    shape = (n, d) if views is None else (n, views, d)
    return {
        "features": g.standard_normal(shape).astype(np.float32),
        "text": g.standard_normal((c, d)).astype(np.float32),
        "labels": np.array([0, 1, 2, -1, 0][:n]),
    }


def test_round_trip_normalises_and_keeps_everything(tmp_path):
    a = _arrays(views=3)
    p = save_features(
        tmp_path / "f.npz",
        a["features"] * 5,
        a["text"],
        a["labels"],
        ["a", "b", "c"],
        {"model": "mstta-tiny", "views": 3},
    )
    fs = load_features(p)
    assert fs.features.shape == (5, 3, 4) and fs.num_views == 3
    assert fs.features.dtype == torch.float16  # stored dtype kept (memory)
    assert torch.allclose(fs.features.float().norm(dim=-1), torch.ones(5, 3), atol=1e-3)
    assert fs.labels.tolist() == [0, 1, 2, -1, 0]
    assert fs.classnames == ["a", "b", "c"] and fs.meta == {"model": "mstta-tiny", "views": 3}
    assert not list(tmp_path.glob(".*tmp*"))  # no temp file left behind


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda a: a.pop("text"), "missing array 'text'"),
        (lambda a: a.update(features=a["features"][:, :3]), "shape mismatch"),
        (lambda a: a["features"].__setitem__((2, 1), np.nan), "'features' has a non-finite value at index 2"),
        (lambda a: a["features"].__setitem__(3, 0.0), "'features' has an all-zero row at index 3"),
        (lambda a: a["text"].__setitem__((1, 0), np.inf), "'text' has a non-finite value at index 1"),
        (lambda a: a.update(labels=np.array([0, 1, 3, 0, 0])), "'labels' is out of range at index 2"),
        (lambda a: a.update(labels=np.array([0, 1, 0])), "'labels' has 3 entries"),
        (lambda a: a.update(labels=np.array([0.0, 1, 0, 0, 0])), "'labels' must be a 1-D integer array"),
        (lambda a: a.update(features=a["features"].astype(np.int32)), "must be float16, float32 or float64, got int32"),
        (lambda a: a.update(extra=np.zeros(2)), "unknown array 'extra'"),
        (lambda a: a.update(meta=np.asarray("{not json")), "'meta' must be a JSON string"),
        (lambda a: a.update(classnames=np.asarray(["a", "b"])), "'classnames' must hold 3 strings"),
    ],
)
def test_bad_files_name_the_array_and_index(tmp_path, mutate, message):
    a = _arrays()
    mutate(a)
    np.savez(tmp_path / "bad.npz", **a)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace("[", r"\[")) as err:
        load_features(tmp_path / "bad.npz")
    assert "\n" not in str(err.value)


def test_bad_view_row_is_named_by_sample_and_view(tmp_path):
    a = _arrays(views=2)
    a["features"][4, 1] = 0.0
    np.savez(tmp_path / "bad.npz", **a)
    with pytest.raises(UserError, match=r"index \[4, 1\]"):
        load_features(tmp_path / "bad.npz")


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_features(tmp_path / "nope.npz")
    (tmp_path / "junk.npz").write_bytes(b"this is not a zip")
    with pytest.raises(UserError, match="not a valid .npz"):
        load_features(tmp_path / "junk.npz")
    with pytest.raises(UserError, match="not a file"):
        load_features(tmp_path)


def test_meta_is_json(tmp_path):
    a = _arrays()
    save_features(tmp_path / "f.npz", a["features"], a["text"], meta={"seed": 1})
    with np.load(tmp_path / "f.npz") as z:
        assert json.loads(str(z["meta"])) == {"seed": 1}
        assert z["features"].dtype == np.float16


def write_npy_member(path, name, header: dict, payload: bytes):
    """An .npz whose member `name` has the given .npy header (it may lie) and payload."""
    import io
    import zipfile

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    with zipfile.ZipFile(path, "a" if path.exists() else "w") as zf:
        zf.writestr(f"{name}.npy", buf.getvalue() + payload)
    return path


@pytest.mark.parametrize(
    "features,text,message",
    [
        (np.ones((3, 4), np.longdouble), np.eye(4)[:2], "'features' must be float16, float32 or float64, got float128"),
        (np.ones((3, 4), np.float32), np.eye(4, dtype=np.longdouble)[:2], "'text' must be float16, float32 or float64"),
        (np.ones((3, 0), np.float32), np.ones((2, 0), np.float32), "N, V, d >= 1, got shape (3, 0)"),
        (np.ones((3, 0, 4), np.float32), np.eye(4, dtype=np.float32)[:2], "N, V, d >= 1, got shape (3, 0, 4)"),
        (np.ones((0, 4), np.float32), np.eye(4, dtype=np.float32)[:2], "N, V, d >= 1, got shape (0, 4)"),
        (np.ones((3, 4), np.float32), np.eye(4, dtype=np.float32)[:1], "C >= 2 classes"),
        (
            np.ones((3, 4), np.float32) * 1e-40,
            np.eye(4, dtype=np.float32)[:2],
            "'features' has a row of subnormal values at index 0",
        ),
        (
            np.ones((3, 4), np.float32),
            np.eye(4, dtype=np.float32)[:2] * 1e-42,
            "'text' has a row of subnormal values at index 0",
        ),
        (np.ones((3, 4), np.complex64), np.eye(4, dtype=np.float32)[:2], "got complex64"),
    ],
)
def test_dtypes_and_empty_axes_refused(tmp_path, recwarn, features, text, message):
    np.savez(tmp_path / "bad.npz", features=features, text=text)
    with pytest.raises(UserError) as err:
        load_features(tmp_path / "bad.npz")
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]  # no extra stderr lines


def test_float64_and_big_endian_files_load(tmp_path):
    a = _arrays()
    np.savez(tmp_path / "f.npz", features=a["features"].astype(">f8"), text=a["text"].astype(">f4"))
    fs = load_features(tmp_path / "f.npz")
    assert fs.features.dtype == torch.float64 and fs.text.dtype == torch.float32
    assert torch.allclose(fs.features.norm(dim=-1), torch.ones(5, dtype=torch.float64))


def test_header_claiming_more_than_the_file_holds_is_refused_before_allocating(tmp_path):
    p = write_npy_member(
        tmp_path / "lie.npz", "features", {"descr": "<f4", "fortran_order": False, "shape": (10**12, 64)}, b"\0" * 256
    )
    np_text = np.eye(4, dtype=np.float32)[:2]
    import io
    import zipfile

    buf = io.BytesIO()
    np.save(buf, np_text)
    with zipfile.ZipFile(p, "a") as zf:
        zf.writestr("text.npy", buf.getvalue())
    with pytest.raises(
        UserError,
        match=r"array 'features' declares shape \(1000000000000, 64\) float32 "
        r"\(256 TB\) but holds 256 B; the file is truncated",
    ):
        load_features(p)


def test_memory_estimate_before_loading(tmp_path, monkeypatch):
    a = _arrays()
    p = save_features(tmp_path / "f.npz", a["features"], a["text"], dtype=np.float32)
    monkeypatch.setattr("mstta.safety.machine_memory", lambda: 100)  # a 100-byte machine
    with pytest.raises(
        UserError,
        match=r"feature file .*f.npz \(features 5x4 float32\) needs 128 B; "
        r"this machine has 100 B; split the file",
    ):
        load_features(p)


@pytest.mark.parametrize(
    "write,message",
    [
        (lambda p: np.save(p, np.ones((3, 4), np.float32)), "not a valid .npz"),  # a lone .npy
        (lambda p: np.savez(p, features=np.array([object()] * 3), text=np.eye(2)), "holds Python objects"),
        (lambda p: np.savez(p, features=np.ones((3, 2), np.float32)), "missing array 'text'"),
        (
            lambda p: np.savez(
                p, features=np.ones((3, 2), np.float32), text=np.eye(2, dtype=np.float32), meta=np.arange(3)
            ),
            "'meta' must be a JSON string",
        ),
    ],
)
def test_archives_that_are_not_feature_files(tmp_path, write, message):
    p = tmp_path / "x.npz"
    with open(p, "wb") as fh:
        write(fh)
    with pytest.raises(UserError, match=message):
        load_features(p)


@pytest.mark.parametrize(
    "scale,dtype",
    [
        (1e-300, np.float64),
        (1e300, np.float64),
        (3e38, np.float32),
        (1e-37, np.float32),
        (1e20, np.float32),
        (6e4, np.float16),
    ],
)
def test_rows_are_normalised_at_any_finite_scale(tmp_path, scale, dtype):
    """Scale-invariant normalisation: the unit rows of a file at 1e-300 or 3e38 equal those at scale 1."""
    g = np.random.default_rng(3)
    f = g.standard_normal((6, 2, 4))
    f /= np.abs(f).max(-1, keepdims=True)
    text = (np.eye(4)[:3] + 0.1) / 1.1
    np.savez(tmp_path / "one.npz", features=f.astype(dtype), text=text.astype(dtype))
    np.savez(tmp_path / "big.npz", features=(f * scale).astype(dtype), text=(text * scale).astype(dtype))
    one, big = load_features(tmp_path / "one.npz"), load_features(tmp_path / "big.npz")
    tol = 1e-3 if dtype == np.float16 else 1e-6
    assert torch.allclose(big.features.double(), one.features.double(), atol=tol)
    assert torch.allclose(big.text, one.text, atol=tol)
    assert torch.allclose(big.features.double().norm(dim=-1), torch.ones(6, 2, dtype=torch.float64), atol=tol)


def test_the_shared_tiny_clip_is_loaded_once(tiny_clip, request):
    """tests/conftest.py's session fixture: one model object for every test that asks for it."""
    assert request.getfixturevalue("tiny_clip") is tiny_clip
    assert (tiny_clip.name, tiny_clip.pretrained, tiny_clip.precision, str(tiny_clip.device)) == (
        "mstta-tiny",
        "none",
        "fp32",
        "cpu",
    )
