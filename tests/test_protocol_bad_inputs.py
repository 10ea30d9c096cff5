"""Issue 12's cases in `mstta-bench extract/run/sweep/tsne`: no output ever replaces an input, another
output or a special file; a one-class folder is refused at extraction; sweep values are parsed as
typed and a huge grid is refused at once; `--json` is valid JSON; an interrupted extraction leaves
no temp file (completed shards stay: resuming is a feature) and a dead run's leftovers are swept.

Every refusal: exit 2, one stderr line naming the flag or file, no traceback, inputs byte-identical."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers_cli import run_bench
from helpers_data import make_fake_dataset, make_image

import mstta.features.extract as ex
import mstta.features.shards as shards

TINY = ["--model", "mstta-tiny", "--pretrained", "none", "--workers", "0"]


def _digest(*roots: Path) -> dict[str, str]:
    """Every regular file under the roots -> sha256 (symlinks by their target text)."""
    out = {}
    for root in roots:
        for p in sorted(Path(root).rglob("*")) if Path(root).is_dir() else [Path(root)]:
            if p.is_symlink():
                out[str(p)] = "link:" + os.readlink(p)
            elif p.is_file():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A dataset, a feature file and a results folder made once; the cases only read them."""
    tmp = tmp_path_factory.mktemp("world")
    make_fake_dataset(tmp / "data", "dtd", classes=3, per_class=2)
    photos = make_fake_dataset(tmp, "imagefolder", classes=2, per_class=2).dataset
    code = run_bench_plain("extract", "--dataset", photos, *TINY, "--views", "1", "--out", tmp / "feat.npz")
    assert code == 0
    (tmp / "config.yaml").write_text("engine:\n  k: 2\n")
    (tmp / "a_file").write_text("not a folder\n")
    os.mkfifo(tmp / "fifo.npz")
    os.mkfifo(tmp / "fifo.png")
    os.mkfifo(tmp / "fifo_dir")
    (tmp / "victim.txt").write_text("precious\n")
    os.symlink(tmp / "victim.txt", tmp / "link.npz")
    os.symlink(tmp / "victim.txt", tmp / "link.png")
    (tmp / "dir.png").mkdir()
    return {"tmp": tmp, "photos": photos, "folder": Path(photos.split(":", 1)[1])}


def run_bench_plain(*argv) -> int:
    from mstta.cli import main

    return main([str(a) for a in argv])


def _sub(token: str, world) -> str:
    """Placeholders of the case table: DATA, PHOTOS, and paths under T/ (the temp folder) or FOLDER/."""
    t = world["tmp"]
    fixed = {"DATA": str(t / "data"), "PHOTOS": world["photos"]}
    if token in fixed:
        return fixed[token]
    for prefix, base in (("T/", t), ("FOLDER/", world["folder"])):
        if token.startswith(prefix):
            return str(base / token[len(prefix) :])
    return token


RUN = ["--datasets", "dtd", "--backbone", "mstta-tiny", "--no-progress", "--fps-samples", "0"]
FIELD = ["field", "--data-root", "DATA", *RUN[:-2], "--out", "T/r", "--store", "T/st", "--text", "cupl"]
FIELD_USER = [*FIELD[:-1], "user", "--text-classifier"]
CASES = [
    # (id, argv, expected in the one stderr line)
    ("extract-out-fifo", ["extract", "--dataset", "PHOTOS", *TINY, "--out", "T/fifo.npz"], "--out"),
    ("extract-out-symlink", ["extract", "--dataset", "PHOTOS", *TINY, "--out", "T/link.npz"], "symbolic link"),
    (
        "extract-out-parent-is-file",
        ["extract", "--dataset", "PHOTOS", *TINY, "--out", "T/a_file/x.npz"],
        "is a file, not a folder",
    ),
    (
        "extract-out-inside-dataset",
        ["extract", "--dataset", "PHOTOS", *TINY, "--out", "FOLDER/class_0/f.npz"],
        "inside the dataset folder",
    ),
    (
        "extract-out-existing-other-file",
        ["extract", "--dataset", "PHOTOS", *TINY, "--out", "T/feat.npz", "--views", "2"],
        "exists with different settings",
    ),
    (
        "extract-out-and-store",  # one destination (issue 33)
        ["extract", "--dataset", "PHOTOS", *TINY, "--out", "T/x.npz", "--store", "T/st"],
        "--out and --store: give one",
    ),
    (
        "extract-store-views-0",  # the store's name is checked like the extraction's
        ["extract", "--dataset", "PHOTOS", *TINY, "--views", "0", "--store", "T/st"],
        "--views 0: expected an integer in [1, 256]",
    ),
    (
        "sweep-param-family-section",  # a section is not a key: dota.eta is (issue 33)
        ["sweep", "--param", "dota=1,2", "--data-root", "DATA", *RUN[:-2], "--out", "T/r", "--store", "T/st"],
        "'dota' is not a hyperparameter",
    ),
    (
        "sweep-param-family-unknown-key",
        ["sweep", "--param", "dota.nope=1,2", "--data-root", "DATA", *RUN[:-2], "--out", "T/r", "--store", "T/st"],
        "'dota.nope' is not a hyperparameter",
    ),
    ("run-out-is-store", ["run", "--data-root", "DATA", *RUN, "--out", "T/s", "--store", "T/s"], "--out"),
    ("run-out-is-file", ["run", "--data-root", "DATA", *RUN, "--out", "T/a_file", "--store", "T/st"], "--out"),
    (
        "run-out-inside-data-root",
        ["run", "--data-root", "DATA", *RUN, "--out", "T/data/results", "--store", "T/st"],
        "inside --data-root",
    ),
    ("run-store-is-fifo", ["run", "--data-root", "DATA", *RUN, "--out", "T/r", "--store", "T/fifo_dir"], "--store"),
    (
        "sweep-out-is-store",
        ["sweep", "--param", "k=2", "--data-root", "DATA", *RUN[:-2], "--out", "T/s2", "--store", "T/s2"],
        "--out",
    ),
    ("tsne-out-fifo", ["tsne", "--features", "T/feat.npz", "--out", "T/fifo.png"], "--out"),
    ("tsne-out-symlink", ["tsne", "--features", "T/feat.npz", "--out", "T/link.png"], "symbolic link"),
    ("tsne-out-folder", ["tsne", "--features", "T/feat.npz", "--out", "T/dir.png"], "is a folder"),
    (
        "tsne-store-fifo",
        ["tsne", "--dataset", "PHOTOS", "--backbone", "mstta-tiny", "--store", "T/fifo_dir", "--out", "T/t.png"],
        "--store",
    ),
    # issue 18: seeds past torch's 64-bit generator, long integers, devices that hold no data
    *[
        (
            f"run-seeds-{name}",
            ["run", "--data-root", "DATA", *RUN, "--out", "T/r", "--store", "T/st", "--seeds", v],
            "--seeds",
        )
        for name, v in (
            ("2^63", str(2**63)),
            ("2^64", str(2**64)),
            ("in-a-list", f"1,{2**63}"),
            ("5000-digits", "9" * 5000),
            ("negative", "-1"),
        )
    ],
    (
        "sweep-seeds-2^63",
        [
            "sweep",
            "--param",
            "k=2",
            "--data-root",
            "DATA",
            *RUN[:-2],
            "--out",
            "T/r",
            "--store",
            "T/st",
            "--seeds",
            str(2**63),
        ],
        "--seeds",
    ),
    (
        "tsne-class-seed-2^63",
        ["tsne", "--features", "T/feat.npz", "--out", "T/t.png", "--class-seed", str(2**63)],
        "--class-seed",
    ),
    (
        "tsne-class-seed-negative",
        ["tsne", "--features", "T/feat.npz", "--out", "T/t.png", "--class-seed", "-1"],
        "--class-seed",
    ),
    (
        "tsne-seed-2^63",
        [
            "tsne",
            "--dataset",
            "PHOTOS",
            "--backbone",
            "mstta-tiny",
            "--store",
            "T/st",
            "--out",
            "T/t.png",
            "--seed",
            str(2**63),
        ],
        "--seed",
    ),
    (
        "tsne-set-long-int",
        ["tsne", "--features", "T/feat.npz", "--out", "T/t.png", "--set", "k=" + "9" * 5000],
        "bad value for 'k'",
    ),
    (
        "run-set-long-int",
        ["run", "--data-root", "DATA", *RUN, "--out", "T/r", "--store", "T/st", "--set", "capacity=" + "9" * 5000],
        "bad value for 'capacity'",
    ),
    (
        "run-set-logit-scale-1e-320",
        ["run", "--data-root", "DATA", *RUN, "--out", "T/r", "--store", "T/st", "--set", "logit_scale=1e-320"],
        "bad value for 'logit_scale'",
    ),
    (
        "sweep-param-long-int",
        ["sweep", "--param", "k=2," + "9" * 5000, "--data-root", "DATA", *RUN[:-2], "--out", "T/r", "--store", "T/st"],
        "--param",
    ),
    (
        "sweep-param-long-hex",
        ["sweep", "--param", "k=0x" + "f" * 5000, "--data-root", "DATA", *RUN[:-2], "--out", "T/r", "--store", "T/st"],
        "bad value for 'k'",
    ),
    (
        "run-device-meta",
        ["run", "--data-root", "DATA", *RUN, "--out", "T/r", "--store", "T/st", "--device", "meta"],
        "--device meta: holds no data",
    ),
    (
        "tsne-device-meta",
        [
            "tsne",
            "--dataset",
            "PHOTOS",
            "--backbone",
            "mstta-tiny",
            "--store",
            "T/st",
            "--out",
            "T/t.png",
            "--device",
            "meta",
        ],
        "--device meta: holds no data",
    ),
    # issue 32 point 5: a prompt file that exists but is no regular file says what it is
    ("field-cupl-dev-zero", [*FIELD, "--cupl", "/dev/zero"], "--cupl /dev/zero: is a device, not a regular file"),
    ("field-cupl-fifo", [*FIELD, "--cupl", "T/fifo.npz"], "fifo.npz: is a FIFO, not a regular file"),
    ("field-cupl-folder", [*FIELD, "--cupl", "T/dir.png"], "dir.png: is a folder, not a regular file"),
    ("field-cupl-missing", [*FIELD, "--cupl", "T/none.json"], "none.json: file not found; pass a CuPL"),
    ("field-user-fifo", [*FIELD_USER, "T/fifo.png"], "fifo.png: is a FIFO, not a regular file"),
]


@pytest.mark.parametrize("argv,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_outputs_never_replace_inputs_or_special_files(world, capsys, argv, expected):
    t = world["tmp"]
    before = _digest(t)
    argv = [_sub(a, world) for a in argv]
    code, out, err = run_bench(capsys, *argv)
    lines = [ln for ln in err.strip().splitlines() if "RANDOM weights" not in ln]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("mstta-bench: error: ") and expected in lines[0], err
    assert "Traceback" not in err
    assert _digest(t) == before  # every input (and everything else) byte-identical
    assert (t / "victim.txt").read_text() == "precious\n"
    assert not (t / "s").exists() and not (t / "r").exists() and not (t / "t.png").exists()
    assert not (t / "st").exists()


def test_one_class_folder_refused_at_extraction(tmp_path, capsys):
    make_image(tmp_path / "one" / "only_class" / "a.png", 1)
    make_image(tmp_path / "one" / "only_class" / "b.png", 2)
    before = _digest(tmp_path / "one")
    code, _, err = run_bench(
        capsys, "extract", "--dataset", f"imagefolder:{tmp_path / 'one'}", *TINY, "--out", tmp_path / "f"
    )
    assert code == 2 and err.count("\n") == 1 and "at least 2 classes" in err and "--dataset" in err, err
    assert _digest(tmp_path / "one") == before and not (tmp_path / "f").exists()


def test_extract_json_is_strict_json(world, tmp_path, capsys):
    code, out, err = run_bench(
        capsys, "extract", "--dataset", world["photos"], *TINY, "--views", "2", "--out", tmp_path / "x.npz", "--json"
    )
    assert code == 0, err

    def no_constants(name):
        raise AssertionError(f"{name} is not JSON")

    report = json.loads(out, parse_constant=no_constants)
    assert report["n"] == 4 and report["images_per_s"] > 0


def test_interrupted_shard_leaves_no_temp_file_and_resumes(world, tmp_path, monkeypatch):
    """Ctrl-C (SIGTERM becomes the same KeyboardInterrupt in `run_cli`) while a shard is being
    written: its temp file is removed, the completed shards stay, and a rerun resumes."""
    real_savez, calls = np.savez, {"n": 0}

    def savez_then_stop(fh, **arrays):
        calls["n"] += 1
        if calls["n"] == 2:  # the second shard: interrupted halfway through its write
            fh.write(b"PK partial")
            raise KeyboardInterrupt
        return real_savez(fh, **arrays)

    monkeypatch.setattr(shards.np, "savez", savez_then_stop)
    out = tmp_path / "f.npz"
    opts = dict(
        model="mstta-tiny",
        pretrained="none",
        device="cpu",
        workers=0,
        views=2,
        augment="crop",
        shard_size=1,
        batch_size=2,
        cache_dir=tmp_path / "c",
    )
    with pytest.raises(KeyboardInterrupt):
        ex.run_extraction(world["photos"], out, **opts)
    work = tmp_path / ".f.npz.work"
    assert sorted(p.name for p in work.iterdir()) == ["settings.json", "shard-000000.npz"]  # no temp file
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".") and p != work] == []
    monkeypatch.setattr(shards.np, "savez", real_savez)
    res = ex.run_extraction(world["photos"], out, **opts)
    assert res.n == 4 and not work.exists()


def test_dead_runs_leftovers_swept_before_writing(world, tmp_path, capsys):
    dead = 4_194_303  # above any pid this test machine hands out
    leftovers = [tmp_path / f".x.npz.{dead}-0123abcd.tmp", tmp_path / f".x.npz.{dead}-89abcdef.part.npz"]
    live = tmp_path / f".x.npz.{os.getpid()}-0123abcd.tmp"  # a live process's: kept
    for p in leftovers + [live]:
        p.write_bytes(b"half")
    code, _, err = run_bench(
        capsys, "extract", "--dataset", world["photos"], *TINY, "--views", "1", "--out", tmp_path / "x.npz"
    )
    assert code == 0, err
    assert not any(p.exists() for p in leftovers) and live.exists()
    results = tmp_path / "results"
    results.mkdir()
    stale = results / f".results.json.{dead}-0123abcd.tmp"
    stale.write_bytes(b"{")
    code, _, err = run_bench(
        capsys,
        "run",
        "--datasets",
        world["photos"],
        "--backbone",
        "mstta-tiny",
        "--methods",
        "zero-shot",
        "--out",
        results,
        "--store",
        tmp_path / "st",
        "--workers",
        "0",
        "--no-progress",
        "--fps-samples",
        "0",
        "--no-plots",
    )
    assert code == 0, err
    assert not stale.exists() and (results / "results.json").is_file()


HOLD = """
import sys, time
from mstta.atomic import output_lock
with output_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def holder():
    """Start a process holding `output_lock` on a path (as a concurrent run does); killed afterwards."""
    procs = []

    def start(target: Path) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(target)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "locked"
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.returncode is None:
            proc.kill()
            proc.communicate()  # reaps it and closes its pipe


def test_a_second_run_on_one_out_is_refused_naming_the_first(world, tmp_path, capsys, holder):
    """Two identical `run` commands at once: the second exits 2 before writing anything."""
    out = tmp_path / "results"
    first = holder(out / "results.json")
    before = _digest(tmp_path, world["tmp"])
    code, _, err = run_bench(
        capsys,
        "run",
        "--datasets",
        world["photos"],
        "--backbone",
        "mstta-tiny",
        "--methods",
        "zero-shot",
        "--out",
        out,
        "--store",
        tmp_path / "st",
        "--workers",
        "0",
        "--no-progress",
        "--fps-samples",
        "0",
        "--no-plots",
    )
    assert code == 2 and err.count("\n") == 1, err
    assert f"--out {out / 'results.json'}: another mstta run (pid {first.pid}) is writing it" in err
    assert _digest(tmp_path, world["tmp"]) == before and not (tmp_path / "st").exists()


def test_a_second_extract_into_one_out_is_refused_naming_the_first(world, tmp_path, capsys, holder):
    """Two identical `extract` commands at once: the second exits 2 and leaves no work folder behind."""
    out = tmp_path / "f.npz"
    first = holder(out)
    code, _, err = run_bench(
        capsys,
        "extract",
        "--dataset",
        world["photos"],
        "--model",
        "mstta-tiny",
        "--pretrained",
        "none",
        "--out",
        out,
        "--workers",
        "0",
    )
    assert code == 2 and err.count("\n") == 1, err
    assert f"--out {out}: another mstta run (pid {first.pid}) is writing it" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [".f.npz.mstta-lock"]  # the holder's lock only


@pytest.mark.parametrize("seed", [2**63, -1])
def test_extract_seed_out_of_range_is_one_line(world, tmp_path, capsys, seed):
    code, _, err = run_bench(
        capsys,
        "extract",
        "--dataset",
        world["photos"],
        "--model",
        "mstta-tiny",
        "--pretrained",
        "none",
        "--out",
        tmp_path / "f.npz",
        "--seed",
        str(seed),
    )
    assert code == 2 and err.count("\n") == 1 and "--seed" in err and "Traceback" not in err, err
    assert not list(tmp_path.iterdir())


def test_a_second_sweep_of_one_file_is_refused(world, tmp_path, capsys, holder):
    out = tmp_path / "results"
    first = holder(out / "sweep_k.json")
    code, _, err = run_bench(
        capsys,
        "sweep",
        "--param",
        "k=1,2",
        "--datasets",
        world["photos"],
        "--backbone",
        "mstta-tiny",
        "--out",
        out,
        "--store",
        tmp_path / "st",
        "--workers",
        "0",
        "--no-progress",
        "--no-plots",
    )
    assert code == 2 and f"another mstta run (pid {first.pid})" in err and err.count("\n") == 1, err
    assert sorted(p.name for p in out.iterdir()) == [".sweep_k.json.mstta-lock"]  # the holder's own lock only


def test_two_runs_sharing_a_store_never_extract_one_file_at_once(world, tmp_path, capsys, holder):
    """Another run extracting the same feature file: this run skips it, naming that run, leaves no
    orphan work folder, and extracts it on the next try."""
    from mstta.bench.config import load_dataset_config
    from mstta.bench.context import feature_key
    from mstta.bench.store import Backbone

    store = tmp_path / "st"
    key = feature_key(world["photos"], Backbone("mstta-tiny", "none"), "fp32", load_dataset_config(), 1)
    first = holder(key.path(store))
    argv = [
        "run",
        "--datasets",
        world["photos"],
        "--backbone",
        "mstta-tiny",
        "--methods",
        "zero-shot",
        "--out",
        tmp_path / "r",
        "--store",
        store,
        "--workers",
        "0",
        "--no-progress",
        "--fps-samples",
        "0",
        "--no-plots",
        "--device",
        "cpu",
        "--precision",
        "fp32",
    ]
    code, _, err = run_bench(capsys, *argv)
    assert code == 2 and err.count("\n") == 1, err
    assert f"no dataset could run: --store {key.path(store)}: another mstta run (pid {first.pid})" in err
    assert not list(key.path(store).parent.glob("*.work")) and not key.path(store).exists()
    first.kill()
    first.communicate()
    code, _, err = run_bench(capsys, *argv)
    assert code == 0, err
    assert key.path(store).is_file() and not list(key.path(store).parent.glob(".*"))  # no lock, no work folder


def test_a_240_byte_output_name_is_written(world, tmp_path, capsys):
    """A legal long name used to be refused ("File name too long") because of its temp name."""
    out = tmp_path / ("t" * 236 + ".png")
    code, _, err = run_bench(capsys, "tsne", "--features", world["tmp"] / "feat.npz", "--out", out, "--classes", "0")
    assert code == 0, err
    assert out.is_file() and os.listdir(tmp_path) == [out.name]
