"""Issue 25, memory in proportion: a 475-byte 1 x 100000 (or 100000 x 1) image used to make extraction
peak near 3 GB (view 0 resizes its shorter side to the model's size). Such an image is refused before
its views are made (`mstta.features.views.check_image_shape`), skipped with its reason; peak memory is measured
as the process's max RSS (`resource.getrusage`) in a fresh subprocess, no timing involved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mstta.errors import UserError
from mstta.features.views import MAX_ASPECT, ImageShapeError, ViewMaker, check_image_shape

REPO = Path(__file__).resolve().parent.parent
MEASURE = r"""
import json, resource, sys
from mstta.features.extract import run_extraction
from mstta.features.format import load_features

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

out = {}
for name, folder, views, where in json.loads(sys.argv[1]):
    res = run_extraction("imagefolder:" + folder, sys.argv[2] + "/" + name + ".npz", model="mstta-tiny",
                         pretrained="none", device="cpu", workers=0, views=views, augment="crop",
                         views_on=where, cache_dir=sys.argv[2] + "/cache")
    out[name] = {"peak_mb": peak_mb(), "n": res.n, "skipped": res.skipped,
                 "reasons": load_features(res.path).meta["skipped_paths"]}
print(json.dumps(out))
"""


def _folder(root: Path, elongated: bool) -> Path:
    rng = np.random.default_rng(0)
    for c in range(2):
        for i in range(2):
            (root / f"class_{c}").mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (40, 50, 3), np.uint8)).save(root / f"class_{c}" / f"{i}.png")
    if elongated:
        Image.new("RGB", (1, 100_000), (9, 99, 199)).save(root / "class_0" / "tall.png")
        Image.new("RGB", (100_000, 1), (9, 99, 199)).save(root / "class_1" / "wide.png")
    return root


def test_elongated_images_are_skipped_and_peak_memory_stays_flat(tmp_path):
    plain, long = _folder(tmp_path / "plain", False), _folder(tmp_path / "long", True)
    assert (long / "class_0" / "tall.png").stat().st_size < 1000
    # a second plain run first: the peak a repeated extraction reaches without elongated images
    runs = [
        ("plain", str(plain), 1, "cpu"),
        ("again", str(plain), 4, "device"),
        ("long", str(long), 1, "cpu"),
        ("long4", str(long), 4, "device"),
    ]
    proc = subprocess.run(
        [sys.executable, "-c", MEASURE, json.dumps(runs), str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in ("long", "long4"):
        assert got[name]["n"] == 4 and got[name]["skipped"] == 2, got[name]
        assert all(f"aspect ratio beyond {MAX_ASPECT}:1" in r for r in got[name]["reasons"])
        # measured before the fix: +1.98 GB (975 MB -> 2,952 MB, mstta-tiny, 64 px); after: +0 to the repeat
        assert got[name]["peak_mb"] - got["again"]["peak_mb"] < 150, got


@pytest.mark.parametrize(
    "size, ok",
    [
        ((1, 100_000), False),
        ((100_000, 1), False),
        ((0, 5), False),
        ((MAX_ASPECT, 1), True),
        ((MAX_ASPECT + 1, 1), False),
        ((500, 375), True),
        ((1, 1), True),
    ],
)
def test_image_shape_bound(size, ok):
    if ok:  # accepted: the views of such an image are made
        maker = ViewMaker(lambda im: im.resize((8, 8)), 8, views=3, augment="crop")
        assert maker(Image.new("RGB", size, (200, 10, 30)), 0).shape == (3, 3, 8, 8)
    else:
        with pytest.raises(ImageShapeError, match=f"{size[0]}x{size[1]} image: aspect ratio beyond") as err:
            check_image_shape(*size)
        assert isinstance(err.value, UserError) and "\n" not in str(err.value)
