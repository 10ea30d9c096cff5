"""Bad inputs to `mstta-bench replay` and the library it stands on (issue 12, parts 1, 2, 3, 5).

Table-driven: every case builds its files in a fresh folder, runs `mstta-bench replay` in-process
and asserts exit code 2, exactly one stderr line `mstta-bench: error: ...` naming the flag or
file (the case's expected text), no traceback, no warning, every file in the folder byte-identical
afterwards, nothing new written (no output, no temp file), and special files left as they were.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

from mstta.cli import main
from mstta.safety import machine_memory

N, C, D = 40, 4, 8


def _feats(tmp: Path, name: str = "f.npz", **over) -> Path:
    g = np.random.default_rng(0)
    arrays = {
        "features": g.standard_normal((N, D)).astype(np.float32),
        "text": g.standard_normal((C, D)).astype(np.float32),
        "labels": g.integers(0, C, N),
    }
    arrays.update(over)
    arrays = {k: v for k, v in arrays.items() if v is not None}
    with open(tmp / name, "wb") as fh:  # exactly this name (np.savez would append .npz)
        np.savez(fh, **arrays)
    return tmp / name


def _tiny_file(tmp: Path, views: int, nan: bool = False) -> Path:
    """A feature file of mstta-tiny's 64 dims naming its model (`meta`) and its C classes."""
    g = np.random.default_rng(0)
    feats = g.standard_normal((N, views, 64) if views > 1 else (N, 64)).astype(np.float32)
    if nan:
        feats[3, 1, 5] = np.nan
    meta = np.array(json.dumps({"model": "mstta-tiny", "pretrained": "none"}))
    names = np.array([f"class {i}" for i in range(C)])
    return _feats(
        tmp, "tiny.npz", features=feats, text=g.standard_normal((C, 64)).astype(np.float32), meta=meta, classnames=names
    )


def _lying_header(tmp: Path) -> Path:
    """features.npy declares 10^12 x 64 float32 (256 TB) over 64 bytes of data."""
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f4", "fortran_order": False, "shape": (10**12, 64)})
    text = io.BytesIO()
    np.save(text, np.eye(64, dtype=np.float32)[:2])
    with zipfile.ZipFile(tmp / "lie.npz", "w") as zf:
        zf.writestr("features.npy", head.getvalue() + b"\0" * 64)
        zf.writestr("text.npy", text.getvalue())
    return tmp / "lie.npz"


def _npy(a: np.ndarray) -> bytes:
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def _base_arrays() -> dict[str, bytes]:
    g = np.random.default_rng(0)
    return {
        "features.npy": _npy(g.standard_normal((N, D)).astype(np.float32)),
        "text.npy": _npy(g.standard_normal((C, D)).astype(np.float32)),
    }


def _zip_with_flags(tmp: Path, name: str, method: int | None = None, encrypted: bool = False) -> Path:
    """An archive whose members claim another compression method, or to be encrypted (as a hostile
    or foreign zip tool writes them): the fields of each local and central header, patched."""
    with zipfile.ZipFile(tmp / name, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in _base_arrays().items():
            zf.writestr(member, data)
    raw = bytearray((tmp / name).read_bytes())
    for sig, flags_at, method_at in ((b"PK\x03\x04", 6, 8), (b"PK\x01\x02", 8, 10)):
        i = raw.find(sig)
        while i >= 0:
            if encrypted:
                raw[i + flags_at] |= 1
            if method is not None:
                raw[i + method_at : i + method_at + 2] = method.to_bytes(2, "little")
            i = raw.find(sig, i + 4)
    (tmp / name).write_bytes(bytes(raw))
    return tmp / name


def _bad_header(tmp: Path, header: str, name: str = "h.npz") -> Path:
    """features.npy with a hand-written (malformed) header dict."""
    text = header.encode("latin1")
    text += b" " * (15 - (10 + len(text)) % 16) + b"\n"
    arrays = _base_arrays()
    with zipfile.ZipFile(tmp / name, "w") as zf:
        zf.writestr("features.npy", b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + b"\0" * (4 * N * D))
        zf.writestr("text.npy", arrays["text.npy"])
    return tmp / name


def _scaled(tmp: Path, feats: float = 1.0, text: float = 1.0, dtype=np.float32) -> Path:
    """The base file with its features and text multiplied (random signs keep every row's direction)."""
    g = np.random.default_rng(0)
    return _feats(
        tmp,
        features=(g.standard_normal((N, D)) * feats).astype(dtype),
        text=(g.standard_normal((C, D)) * text).astype(dtype),
    )


def _truncated(tmp: Path) -> Path:
    data = _feats(tmp, "whole.npz").read_bytes()
    (tmp / "whole.npz").unlink()
    (tmp / "cut.npz").write_bytes(data[: len(data) // 2])
    return tmp / "cut.npz"


def _write(tmp: Path, name: str, text: str | bytes) -> Path:
    p = tmp / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


def _link(tmp: Path, name: str, to) -> Path:
    (tmp / name).symlink_to(to)
    return tmp / name


def _fifo(tmp: Path, name: str) -> Path:
    os.mkfifo(tmp / name)
    return tmp / name


BOMB = (
    "a: &a [x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8)
    )
    + "engine:\n  k: *i\n"
)

# 9^9 = 387 million leaves if expanded: an error message must not try to print the value.
BOMB_FIELD = (
    "engine:\n  k: [&a [x, x, x, x, x, x, x, x, x], "
    + ", ".join(f"&{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(8))
    + "]\n"
)

# (id, argv builder: tmp -> extra argv after `replay`, texts the one error line must contain).
# `F` stands for the good feature file tmp/f.npz.
CASES = [
    # 1. Outputs never overwrite inputs or special files
    (
        "out-is-features",
        lambda t: ["--features", _feats(t, "same.npy"), "--out", t / "same.npy"],
        ["--out", "same.npy: is the same file as the input --features"],
    ),
    (
        "out-hard-link-to-features",
        lambda t: (os.link(_feats(t), t / "h.npy"), ["--features", t / "f.npz", "--out", t / "h.npy"])[1],
        ["--out", "h.npy: is the same file as the input --features"],
    ),
    (
        "out-symlink-to-features",
        lambda t: ["--features", _feats(t), "--out", _link(t, "s.csv", t / "f.npz")],
        ["--out", "s.csv: is the same file as the input --features"],
    ),
    (
        "out-is-config",
        lambda t: ["--features", _feats(t), "--config", _write(t, "c.jsonl", "engine: {}\n"), "--out", t / "c.jsonl"],
        ["--out", "c.jsonl: is the same file as the input --config"],
    ),
    (
        "out-fifo",
        lambda t: ["--features", _feats(t), "--out", _fifo(t, "p.csv")],
        ["--out", "p.csv: is a FIFO, not a regular file"],
    ),
    ("out-dev-null", lambda t: ["--features", _feats(t), "--out", "/dev/null"], ["--out /dev/null: is a device"]),
    (
        "out-symlink-to-proc-fd-1",
        lambda t: ["--features", _feats(t), "--out", _link(t, "o.csv", "/proc/self/fd/1")],
        ["--out", "o.csv: is a symbolic link (to /proc/self/fd/1)"],
    ),
    (
        "out-symlink-elsewhere",
        lambda t: ["--features", _feats(t), "--out", _link(t, "o.jsonl", _write(t, "keep.txt", "keep"))],
        ["--out", "o.jsonl: is a symbolic link"],
    ),
    (
        "out-dangling-symlink",
        lambda t: ["--features", _feats(t), "--out", _link(t, "o.npy", t / "missing" / "x")],
        ["--out", "o.npy: is a symbolic link"],
    ),
    (
        "out-parent-is-a-file",
        lambda t: ["--features", _feats(t), "--out", t / "f.npz" / "p.csv"],
        ["--out", "f.npz is a file, not a folder"],
    ),
    (
        "out-grandparent-is-a-file",
        lambda t: ["--features", _feats(t), "--out", t / "f.npz" / "a" / "p.npy"],
        ["--out", "f.npz is a file, not a folder"],
    ),
    (
        "out-is-a-folder",
        lambda t: ["--features", _feats(t), "--out", (t / "d.csv").mkdir() or t / "d.csv"],
        ["--out", "d.csv: is a folder"],
    ),
    ("out-dash", lambda t: ["--features", _feats(t), "--out", "-"], ["--out -: standard output is not accepted"]),
    (
        "out-unknown-format",
        lambda t: ["--features", _feats(t), "--out", t / "p.txt"],
        ["--out", "unknown format '.txt'"],
    ),
    # 2. Every value has bounds: --set
    *[
        (
            f"set-{kv}",
            lambda t, kv=kv: ["--features", _feats(t), "--set", kv],
            ["--set", f"bad value for '{kv.split('=')[0]}'"],
        )
        for kv in [
            "lam=.inf",
            "lam=.nan",
            "lam=nan",
            "beta=.inf",
            "cache_alpha=.inf",
            "neg_alpha=-.inf",
            "neg_beta=.inf",
            "logit_scale=1e400",
            "logit_scale=0",
            "alpha=NaN",
            "lam=1e7",
            f"lam={10**400}",
            "view_ratio=0",
            "neg_entropy_lower=2",
            "neg_mask_upper=.inf",
            "capacity=1000000000",
            "neg_capacity=1000000000",
            "ms_steps=1000000000",
            "k=1000000",
            "views=100000",
            "delta=1000000000",
            "bank_size=1000000000000",
            "capacity=0",
            "k=true",
            "k=[1, 2]",
            "k=2.5",
            "kernel=rbf",
            "bank_size=-1",
        ]
    ],
    (
        "online-bank-size-10^12",
        lambda t: ["--features", _feats(t), "--online", "--set", "bank_size=1000000000000"],
        ["--set", "bad value for 'bank_size': 1000000000000; expected an integer in [1, 16,777,216] or none"],
    ),
    ("set-without-equals", lambda t: ["--features", _feats(t), "--set", "k"], ["--set 'k': expected KEY=VALUE"]),
    ("set-unknown-key", lambda t: ["--features", _feats(t), "--set", "kk=1"], ["--set: unknown key 'kk'"]),
    (
        "set-python-tag",
        lambda t: ["--features", _feats(t), "--set", "k=!!python/object/apply:os.system [true]"],
        ["--set", "bad value for 'k'"],
    ),
    # 2. YAML configs
    (
        "yaml-duplicate-key",
        lambda t: ["--features", _feats(t), "--config", _write(t, "c.yaml", "engine:\n  k: 2\n  k: 4\n")],
        ["c.yaml: duplicate key 'k' (line 3)"],
    ),
    (
        "yaml-duplicate-section",
        lambda t: [
            "--features",
            _feats(t),
            "--config",
            _write(t, "c.yaml", "engine: {k: 2}\nbench: {}\nengine: {k: 3}\n"),
        ],
        ["c.yaml: duplicate key 'engine' (line 3)"],
    ),
    (
        "yaml-lam-inf",
        lambda t: ["--features", _feats(t), "--config", _write(t, "c.yaml", "engine:\n  lam: .inf\n")],
        ["c.yaml.engine: bad value for 'lam': inf"],
    ),
    (
        "yaml-capacity-huge",
        lambda t: ["--features", _feats(t), "--config", _write(t, "c.yaml", "engine:\n  capacity: 1000000000\n")],
        ["c.yaml.engine: bad value for 'capacity'"],
    ),
    (
        "yaml-views-huge",
        lambda t: ["--features", _feats(t), "--config", _write(t, "c.yaml", "bench:\n  views: 100000\n")],
        ["c.yaml.bench: bad value for 'views'"],
    ),
    (
        "yaml-python-object",
        lambda t: [
            "--features",
            _feats(t),
            "--config",
            _write(t, "c.yaml", "engine: !!python/object/apply:os.system [true]\n"),
        ],
        ["c.yaml: not valid YAML"],
    ),
    (
        "yaml-alias-bomb",
        lambda t: ["--features", _feats(t), "--config", _write(t, "c.yaml", BOMB)],
        ["c.yaml", "unknown key 'a'"],
    ),
    (
        "yaml-bomb-in-a-field",
        lambda t: ["--features", _feats(t), "--config", _write(t, "c.yaml", BOMB_FIELD)],
        ["c.yaml.engine: bad value for 'k': [[...], [...], [...], [...], ...]; expected an integer"],
    ),
    (
        "yaml-not-a-mapping",
        lambda t: ["--features", _feats(t), "--config", _write(t, "c.yaml", "- 1\n- 2\n")],
        ["c.yaml: expected a YAML mapping"],
    ),
    (
        "yaml-unknown-key",
        lambda t: ["--features", _feats(t), "--config", _write(t, "c.yaml", "engine:\n  alhpa: 0.8\n")],
        ["unknown key 'alhpa' in", "c.yaml.engine"],
    ),
    (
        "yaml-not-utf8",
        lambda t: ["--features", _feats(t), "--config", _write(t, "c.yaml", b"engine:\n  k: \xff\xfe\n")],
        ["c.yaml: not valid YAML"],
    ),
    (
        "yaml-too-big",
        lambda t: ["--features", _feats(t), "--config", _write(t, "c.yaml", "#" * 1_000_001)],
        ["c.yaml is 1,000,001 bytes"],
    ),
    (
        "yaml-too-deep",
        lambda t: ["--features", _feats(t), "--config", _write(t, "c.yaml", "[" * 200_000)],
        ["c.yaml: not valid YAML"],
    ),
    (
        "yaml-is-a-folder",
        lambda t: ["--features", _feats(t), "--config", (t / "cfg").mkdir() or t / "cfg"],
        ["cfg is not a regular file"],
    ),
    (
        "yaml-is-a-fifo",
        lambda t: ["--features", _feats(t), "--config", _fifo(t, "c.yaml")],
        ["c.yaml is not a regular file"],
    ),
    (
        "yaml-missing",
        lambda t: ["--features", _feats(t), "--config", t / "none.yaml"],
        ["config file not found", "none.yaml"],
    ),
    # 2. Feature files
    (
        "features-float128",
        lambda t: ["--features", _feats(t, features=np.ones((N, D), np.longdouble))],
        ["f.npz: array 'features' must be float16, float32 or float64, got float128"],
    ),
    (
        "text-float128",
        lambda t: ["--features", _feats(t, text=np.ones((C, D), np.longdouble))],
        ["f.npz: array 'text' must be float16"],
    ),
    (
        "features-int",
        lambda t: ["--features", _feats(t, features=np.ones((N, D), np.int64))],
        ["f.npz: array 'features' must be float16"],
    ),
    (
        "features-d-0",
        lambda t: ["--features", _feats(t, features=np.ones((N, 0), np.float32), text=np.ones((C, 0), np.float32))],
        ["f.npz: array 'features' must be [N, d] or [N, V, d] with N, V, d >= 1, got shape (40, 0)"],
    ),
    (
        "features-zero-views",
        lambda t: ["--features", _feats(t, features=np.ones((N, 0, D), np.float32))],
        ["f.npz", "N, V, d >= 1, got shape (40, 0, 8)"],
    ),
    (
        "features-zero-views-original",
        lambda t: ["--features", _feats(t, features=np.ones((N, 0, D), np.float32)), "--set", "view_mode=original"],
        ["f.npz", "N, V, d >= 1, got shape (40, 0, 8)"],
    ),
    (
        "features-n-0",
        lambda t: ["--features", _feats(t, features=np.ones((0, D), np.float32), labels=None)],
        ["f.npz", "got shape (0, 8)"],
    ),
    (
        "features-4d",
        lambda t: ["--features", _feats(t, features=np.ones((N, 1, 1, D), np.float32))],
        ["f.npz", "got shape (40, 1, 1, 8)"],
    ),
    (
        "text-one-class",
        lambda t: ["--features", _feats(t, text=np.ones((1, D), np.float32), labels=None)],
        ["f.npz: array 'text' must be [C, d] with C >= 2"],
    ),
    (
        "text-d-mismatch",
        lambda t: ["--features", _feats(t, text=np.ones((C, D + 1), np.float32))],
        ["f.npz: shape mismatch"],
    ),
    (
        "header-claims-10^12x64",
        lambda t: ["--features", _lying_header(t)],
        ["lie.npz: array 'features' declares shape (1000000000000, 64) float32 (256 TB) but holds 64 B"],
    ),
    ("truncated-archive", lambda t: ["--features", _truncated(t)], ["cut.npz: not a valid .npz"]),
    (
        "pickled-objects",
        lambda t: ["--features", _feats(t, features=np.array([object()] * N))],
        ["f.npz: array 'features' holds Python objects"],
    ),
    (
        "lone-npy-array",
        lambda t: (np.save(t / "a.npy", np.ones((N, D), np.float32)), ["--features", t / "a.npy"])[1],
        ["a.npy: not a valid .npz"],
    ),
    (
        "features-nan",
        lambda t: ["--features", _feats(t, features=np.full((N, D), np.nan, np.float32))],
        ["f.npz: array 'features' has a non-finite value at index 0"],
    ),
    (
        "features-zero-row",
        lambda t: ["--features", _feats(t, features=np.zeros((N, D), np.float32))],
        ["f.npz: array 'features' has an all-zero row"],
    ),
    (
        "labels-out-of-range",
        lambda t: ["--features", _feats(t, labels=np.full(N, C))],
        ["f.npz: array 'labels' is out of range"],
    ),
    (
        "labels-float",
        lambda t: ["--features", _feats(t, labels=np.zeros(N))],
        ["f.npz: array 'labels' must be a 1-D integer array"],
    ),
    ("unknown-array", lambda t: ["--features", _feats(t, extra=np.zeros(3))], ["f.npz: unknown array 'extra'"]),
    (
        "meta-not-json",
        lambda t: ["--features", _feats(t, meta=np.asarray("{oops"))],
        ["f.npz: array 'meta' must be a JSON string"],
    ),
    ("features-is-a-folder", lambda t: ["--features", t], ["feature file is not a file"]),
    ("features-is-a-fifo", lambda t: ["--features", _fifo(t, "f.npz")], ["feature file is not a file", "f.npz"]),
    ("features-missing", lambda t: ["--features", t / "none.npz"], ["feature file not found", "none.npz"]),
    # Issue 18: archives numpy cannot read, malformed headers, long integers, magnitudes, names
    (
        "npz-encrypted-member",
        lambda t: ["--features", _zip_with_flags(t, "e.npz", encrypted=True)],
        ["e.npz: array 'features' is encrypted; save the file with np.savez"],
    ),
    *[
        (
            f"npz-compression-{m}",
            lambda t, m=m: ["--features", _zip_with_flags(t, "z.npz", method=m)],
            [f"z.npz: array 'features' uses zip compression method {m}, which numpy cannot read"],
        )
        for m in (93, 95, 97, 98, 99, 1)
    ],
    *[
        (f"npy-header-{i}", lambda t, h=h: ["--features", _bad_header(t, h)], ["h.npz: not a valid .npz"])
        for i, h in enumerate(
            [
                "garbage(",  # tokenize error
                "{'descr': '<f4', 'fortran_order': False}",  # no shape
                "[1, 2]",  # not a dict
                "{'descr': 'zz', 'fortran_order': False, 'shape': (40, 8)}",  # bad dtype
                "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 8)}",  # negative dimension
                "{'descr': '<f4', 'fortran_order': False, 'shape': (40, 8.5)}",
                "{'descr': '<f4', 'fortran_order': 3, 'shape': (40, 8)}",
                "{'descr': '<f4', 'fortran_order': False, 'shape': (10**400, 8)}",  # an expression
                "{'descr': '<f4', 'fortran_order': False, 'shape': (" + "9" * 5000 + ", 8)}",  # 5,000 digits
                "{'descr': '<f4', 'fortran_order': False, 'shape': (40, 8), 'x': 1}",
                "{'descr': '<f4', 'fortran_order': False, 'shape': ((40, 8)",
            ]
        )
    ],
    # forget.*: every key bounded (one line naming forget.KEY and its range); neighbours pass in test_forget.py
    *[
        (
            f"set-{kv}",
            lambda t, kv=kv: ["--features", _feats(t), "--set", kv],
            ["--set.forget: bad value for", expected],
        )
        for kv, expected in [
            ("forget.rule=sometimes", "'forget.rule': 'sometimes'; expected one of none, timeliness, idle, periodic"),
            ("forget.rule=1", "'rule': 1; expected a string"),
            ("forget.horizon=0", "expected an integer in [1, 10,000,000] or none"),
            ("forget.horizon=10000001", "expected an integer in [1, 10,000,000] or none"),
            ("forget.horizon=2.5", "'horizon': 2.5; expected an integer or none"),
            ("forget.weight=-0.1", "expected a finite number in [0, 1e+06]"),
            ("forget.weight=.inf", "expected a finite number in [0, 1e+06]"),
            ("forget.idle=0", "expected an integer in [1, 10,000,000]"),
            ("forget.idle=10000001", "expected an integer in [1, 10,000,000]"),
            ("forget.every=0", "expected an integer in [1, 10,000,000]"),
            ("forget.every=" + "9" * 5000, "'every': '999"),
            ("forget.detect=maybe", "'detect': 'maybe'; expected true or false"),
            ("forget.detect_rate=0", "expected a finite number in (0, 1]"),
            ("forget.detect_rate=1.5", "expected a finite number in (0, 1]"),
            ("forget.detect_threshold=0", "expected a finite number in (0, 1e+06]"),
            ("forget.detect_threshold=.nan", "expected a finite number in (0, 1e+06]"),
            ("forget.detect_slack=-0.1", "expected a finite number in [0, 1e+06]"),
            ("forget.detect_slack=.inf", "expected a finite number in [0, 1e+06]"),
            ("forget.detect_ridge=0", "expected a finite number in (0, 1]"),
            ("forget.detect_ridge=1.5", "expected a finite number in (0, 1]"),
            ("forget.detect_warmup=1", "expected an integer in [2, 10,000,000]"),
            ("forget.detect_warmup=10000001", "expected an integer in [2, 10,000,000]"),
        ]
    ],
    (
        "set-forget-unknown-key",
        lambda t: ["--features", _feats(t), "--set", "forget.horizn=5"],
        ["unknown key 'horizn'"],
    ),
    *[
        (
            f"set-long-int-{key}-{form}",
            lambda t, key=key, v=v: ["--features", _feats(t), "--set", f"{key}={v}"],
            ["--set: bad value for", key],
        )
        for key in ("k", "bank_size", "lam", "logit_scale", "capacity")
        for form, v in (
            ("dec", "9" * 5000),
            ("neg", "-" + "9" * 5000),
            ("hex", "0x" + "f" * 5000),
            ("underscores", "1_" + "0" * 5000),
        )
    ],
    (
        "yaml-long-int",
        lambda t: ["--features", _feats(t), "--config", _write(t, "c.yaml", "engine:\n  k: " + "9" * 5000 + "\n")],
        ["c.yaml: a number has too many digits"],
    ),
    (
        "yaml-long-negative-int",
        lambda t: ["--features", _feats(t), "--config", _write(t, "c.yaml", "engine:\n  lam: -" + "9" * 5000 + "\n")],
        ["c.yaml: a number has too many digits"],
    ),
    (
        "yaml-long-hex-int",
        lambda t: ["--features", _feats(t), "--config", _write(t, "c.yaml", "engine:\n  k: 0x" + "f" * 5000 + "\n")],
        ["c.yaml.engine: bad value for 'k': an integer of 20,000 bits; expected an integer in [1, 256]"],
    ),
    (
        "yaml-long-int-key",
        lambda t: [
            "--features",
            _feats(t),
            "--config",
            _write(t, "c.yaml", "engine:\n  ? " + "9" * 5000 + "\n  : 1\n"),
        ],
        ["c.yaml: a number has too many digits"],
    ),
    *[
        (
            f"set-logit-scale-{v}",
            lambda t, v=v: ["--features", _feats(t), "--set", f"logit_scale={v}"],
            ["--set: bad value for 'logit_scale'", "expected a finite number in [0.001, 1e+06]"],
        )
        for v in ("1e-320", "5e-324", "1e-300", "1e-45", "0.0009", "-1e-320")
    ],
    *[
        (
            f"features-subnormal-{v}",
            lambda t, v=v: ["--features", _scaled(t, feats=v)],
            ["f.npz: array 'features' has a row of subnormal values at index 0", "below float32's 1.18e-38"],
        )
        for v in (1e-39, 1e-42)
    ],
    (
        "features-1e-45-rounds-to-zero-or-subnormal",
        lambda t: ["--features", _scaled(t, feats=1e-45)],
        ["f.npz: array 'features' has a", "at index 0"],
    ),
    *[
        (
            f"text-subnormal-{v}",
            lambda t, v=v: ["--features", _scaled(t, text=v)],
            ["f.npz: array 'text' has a row of subnormal values at index 0"],
        )
        for v in (1e-42, 1e-40)
    ],
    (
        "features-fp16-subnormal",
        lambda t: ["--features", _scaled(t, feats=1e-6, dtype=np.float16)],
        ["f.npz: array 'features' has a row of subnormal values at index 0", "float16's 6.1e-05"],
    ),
    (
        "features-one-subnormal-row-among-good",
        lambda t: [
            "--features",
            _feats(
                t,
                features=np.vstack(
                    [np.ones((5, D), np.float32), np.full((1, D), 1e-40, np.float32), np.ones((N - 6, D), np.float32)]
                ),
            ),
        ],
        ["f.npz: array 'features' has a row of subnormal values at index 5"],
    ),
    (
        "features-3d-subnormal-view",
        lambda t: [
            "--features",
            _feats(
                t,
                features=np.concatenate(
                    [np.ones((N, 2, D), np.float32), np.full((N, 1, D), 1e-40, np.float32)], axis=1
                ),
            ),
        ],
        ["f.npz: array 'features' has a row of subnormal values at index [0, 2]"],
    ),
    (
        "classnames-duplicate",
        lambda t: ["--features", _feats(t, classnames=np.array(["cat", "dog", "cat", "eel"]))],
        ["f.npz: array 'classnames' has 'cat' twice (classes 0 and 2); give each class one name"],
    ),
    (
        "classnames-duplicate-bytes",
        lambda t: ["--features", _feats(t, classnames=np.array([b"a", b"b", b"c", b"b"]))],
        ["f.npz: array 'classnames' has 'b' twice (classes 1 and 3)"],
    ),
    *[
        (
            f"device-{d}",
            lambda t, d=d: ["--features", _feats(t), "--device", d],
            ["--device", d, "use auto, cpu, cuda or cuda:N"],
        )
        for d in ("meta", "mps", "xpu", "cuda:-1", "bogus")
    ],
    # Flags
    ("unknown-method", lambda t: ["--features", _feats(t), "--method", "msta"], ["--method: unknown method 'msta'"]),
    ("unknown-flag", lambda t: ["--features", _feats(t), "--bogus"], ["unrecognized arguments: --bogus"]),
    # The prompt-tuning rows need the feature file's model (its text tower) and views
    (
        "tpt-file-names-no-model",
        lambda t: ["--features", _feats(t), "--method", "tpt"],
        ["--features", "names no model"],
    ),
    (
        "c-tpt-one-view",
        lambda t: ["--features", _tiny_file(t, views=1), "--method", "c-tpt"],
        ["1 view per sample", "at least 2", "--views 64"],
    ),
    (
        "tpt-nan-view",
        lambda t: ["--features", _tiny_file(t, views=4, nan=True), "--method", "tpt"],
        ["tiny.npz: array 'features' has a non-finite value at index [3, 1]"],
    ),
    ("missing-features-flag", lambda t: [], ["the following arguments are required: --features"]),
]


def _snapshot(folder: Path) -> dict[str, object]:
    """Every entry under `folder`: a regular file's hash, a link's target, a special file's kind."""
    out: dict[str, object] = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            out[str(p)] = ("link", os.readlink(p))
        elif stat.S_ISREG(st.st_mode):
            out[str(p)] = ("file", st.st_ino, hashlib.sha256(p.read_bytes()).hexdigest())
        else:
            out[str(p)] = ("special", stat.S_IFMT(st.st_mode))
    return out


def run_case(tmp: Path, capsys, argv) -> tuple[int, str, str, list]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(["replay", *[str(a) for a in argv]])
    out, err = capsys.readouterr()
    return code, out, err, caught


@pytest.mark.parametrize("build,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_one_line_exit_2_inputs_unchanged(tmp_path, capsys, build, expected):
    argv = build(tmp_path)
    before = _snapshot(tmp_path)
    dev_null = os.stat("/dev/null")
    code, out, err, caught = run_case(tmp_path, capsys, argv)
    assert code == 2, (out, err)
    assert err.startswith("mstta-bench: error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err and out == ""
    for text in expected:
        assert text in err, err
    assert not caught, [str(w.message) for w in caught]  # no warning line either
    assert _snapshot(tmp_path) == before  # inputs byte-identical, nothing new
    st = os.stat("/dev/null")
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == dev_null.st_rdev


def test_case_ids_are_unique():
    """Each case is reported by its id: two cases never share one."""
    assert len(CASES) == len({c[0] for c in CASES})


def test_control_the_good_file_replays_and_writes(tmp_path, capsys):
    """The cases' base file is valid: without the fault, replay succeeds and writes its output."""
    code, out, err, _ = run_case(
        tmp_path,
        capsys,
        [
            "--features",
            _feats(tmp_path),
            "--out",
            tmp_path / "p.csv",
            "--config",
            _write(tmp_path, "c.yaml", "engine:\n  k: 3\n"),
        ],
    )
    assert code == 0, err
    assert len((tmp_path / "p.csv").read_text().splitlines()) == N + 1
    assert sorted(os.listdir(tmp_path)) == ["c.yaml", "f.npz", "p.csv"]


def _strict_json(line: str) -> dict:
    def refuse(name):
        raise AssertionError(f"non-JSON constant {name}")

    return json.loads(line, parse_constant=refuse)


def test_json_is_always_valid(tmp_path, capsys, monkeypatch):
    """--json never prints Infinity/NaN: a non-finite number becomes null, named in `notes`."""
    import mstta.commands.replay as cmd

    real = cmd.replay

    def instant(*a, **k):
        r = real(*a, **k)
        r.seconds = 0.0  # too short to time: samples/s = inf
        return r

    monkeypatch.setattr(cmd, "replay", instant)
    code, out, err, _ = run_case(
        tmp_path, capsys, ["--features", _feats(tmp_path), "--json", "--set", "bank_size=none"]
    )
    assert code == 0, err
    report = _strict_json(out.strip().splitlines()[-1])
    assert report["samples_per_s"] is None and report["hyperparameters"]["bank_size"] is None
    assert report["notes"] == ["samples_per_s was inf (not representable in JSON); null"]


def test_memory_estimate_of_the_replay_is_one_line(tmp_path, capsys, monkeypatch):
    """The file fits but the replay's working set does not: refused before replaying."""
    f = _feats(tmp_path)
    file_bytes = 4 * N * D + 4 * C * D + 8 * N
    work = 4 * N * (3 * D + 6 * C)
    monkeypatch.setattr("mstta.safety.machine_memory", lambda: int((file_bytes + work / 2) / 0.8))
    before = _snapshot(tmp_path)
    code, _, err, _ = run_case(tmp_path, capsys, ["--features", f, "--out", tmp_path / "p.npy"])
    assert code == 2 and err.count("\n") == 1
    assert f"replaying {N} samples x {C} classes x {D} dims (--features {f}) needs" in err
    assert _snapshot(tmp_path) == before


def test_real_process_stderr_is_one_line(tmp_path):
    """Out of process: what a shell user sees for a file of subnormal float32 values."""
    f = _scaled(tmp_path, feats=1e-40)
    proc = subprocess.run(
        [sys.executable, "-m", "mstta.cli", "replay", "--features", str(f), "--set", "lam=2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert (
        proc.stderr == f"mstta-bench: error: {f}: array 'features' has a row of subnormal values at index 0 "
        "(all below float32's 1.18e-38); too small to carry a direction: save the features at "
        "their usual scale (CLIP's are near 1) or as float64\n"
    )


@pytest.mark.parametrize(
    "feats,text,dtype",
    [
        (1e-300, 1, np.float64),
        (1e-45, 1, np.float64),
        (1e20, 1, np.float32),
        (3e38, 1, np.float32),
        (1, 1e25, np.float32),
        (1, 1e-300, np.float64),
        (1e300, 1e300, np.float64),
        (1e-30, 1e30, np.float32),
    ],
)
def test_any_finite_scale_gives_the_unit_scale_predictions(tmp_path, capsys, feats, text, dtype):
    """Magnitudes that used to under/overflow when normalised (every sample the same prediction):
    rows are normalised scale-invariantly, so the predictions equal those of the file at scale 1."""
    g = np.random.default_rng(0)
    f = g.standard_normal((N, D))
    f = f / np.abs(f).max(-1, keepdims=True)  # |values| <= 1: x 3e38 stays finite in float32
    t = g.standard_normal((C, D))
    t = t / np.abs(t).max(-1, keepdims=True)
    unit = tmp_path / "unit"
    scaled = tmp_path / "scaled"
    unit.mkdir()
    scaled.mkdir()
    _feats(unit, features=f.astype(np.float32), text=t.astype(np.float32))
    _feats(scaled, features=(f * feats).astype(dtype), text=(t * text).astype(dtype))
    for folder in (unit, scaled):
        code, _, err, _ = run_case(folder, capsys, ["--features", folder / "f.npz", "--out", folder / "p.npy"])
        assert code == 0, err
    want, got = np.load(unit / "p.npy"), np.load(scaled / "p.npy")
    assert len(set(want.tolist())) > 1 and np.array_equal(got, want)


def test_machine_memory_is_known():
    assert machine_memory() > 0


@pytest.mark.parametrize("online", [False, True], ids=["vectorised", "online"])
@pytest.mark.parametrize("memory_size,refused", [(4096, True), (50, False)])
def test_dmn_memory_has_one_bound_for_both_replays(tmp_path, capsys, monkeypatch, online, memory_size, refused):
    """Issue 32 point 5: dmn-zs's memory (memory_size x C x d floats) that `--online` refuses was
    accepted by the vectorised replay; now both refuse it in the same line, before replaying."""
    f = _feats(tmp_path)
    state = 4 * C * 4096 * (D + 1) + 8 * C  # dmn.state_bytes at memory_size 4096: 590 KB
    monkeypatch.setattr("mstta.safety.machine_memory", lambda: int(state / 2 / 0.8))  # half of it fits
    argv = ["--features", f, "--method", "dmn-zs", "--set", f"dmn.memory_size={memory_size}"]
    code, _, err, _ = run_case(tmp_path, capsys, argv + (["--online"] if online else []))
    if refused:
        assert code == 2 and err.count("\n") == 1 and "DMN-ZS's state (590 KB for C = 4, d = 8) needs" in err, err
    else:
        assert code == 0, err
