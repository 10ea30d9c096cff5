"""Issue 25, decoder chatter: libjpeg's "Corrupt JPEG data: ..." lines, printed by torchvision's decoder
straight to the process's stderr, never reach the terminal under `--views-on device` (the PIL path is
silent on the same files); they go to the debug log."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from mstta.features.decode import native_stderr_to_log

REPO = Path(__file__).resolve().parent.parent


def _corrupt_jpeg(path: Path, seed: int) -> Path:
    """A JPEG that decodes (PIL and libjpeg agree) but makes libjpeg warn: bytes before the SOS marker."""
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (40, 50, 3), np.uint8)).save(buf, "JPEG")
    data = buf.getvalue()
    i = data.index(b"\xff\xda")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data[:i] + b"\x12\x34" + data[i:])
    return path


def test_views_on_device_prints_no_decoder_chatter(tmp_path):
    for c in range(2):
        for i in range(2):
            _corrupt_jpeg(tmp_path / "photos" / f"class_{c}" / f"{i}.jpg", 10 * c + i)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mstta.cli",
            "extract",
            "--dataset",
            f"imagefolder:{tmp_path / 'photos'}",
            "--model",
            "mstta-tiny",
            "--pretrained",
            "none",
            "--device",
            "cpu",
            "--workers",
            "0",
            "--views",
            "2",
            "--augment",
            "crop",
            "--views-on",
            "device",
            "--out",
            str(tmp_path / "o.npz"),
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Corrupt JPEG" not in proc.stderr and "extraneous bytes" not in proc.stderr, proc.stderr
    assert (tmp_path / "o.npz").is_file()


def test_native_stderr_goes_to_the_debug_log(capfd, caplog):
    with caplog.at_level(logging.DEBUG, logger="mstta.features.decode"):
        with native_stderr_to_log("JPEG decoder"):
            os.write(2, b"Corrupt JPEG data: 2 extraneous bytes before marker 0xda\n")
        os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"
    assert "JPEG decoder: Corrupt JPEG data: 2 extraneous bytes" in caplog.text
