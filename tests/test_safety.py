"""mstta.safety: outputs never clobber inputs or special files; allocations are estimated first."""

from __future__ import annotations

import os

import pytest

from mstta import UserError
from mstta.safety import check_memory, check_output_dir, check_outputs, human_bytes, machine_memory


@pytest.fixture
def files(tmp_path):
    inp = tmp_path / "in.npz"
    inp.write_bytes(b"input")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("engine: {}\n")
    return tmp_path, inp, cfg


def _refused(message, outputs, inputs=None, stdout_ok=()):
    with pytest.raises(UserError) as err:
        check_outputs(outputs, inputs or {}, stdout_ok)
    assert message in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def test_fresh_and_existing_regular_outputs_pass(files):
    """A fresh path (in a folder still to be made) and an existing regular file pass, and checking
    them touches nothing; the same call with one output on an input is refused."""
    tmp, inp, cfg = files
    (tmp / "old.csv").write_text("x")
    before = sorted(os.listdir(tmp))
    outputs = {"--out": tmp / "new" / "p.csv", "--log": tmp / "old.csv", "--plot": None}
    inputs = {"--features": inp, "--config": cfg, "--labels": None}
    assert check_outputs(outputs, inputs) is None
    assert sorted(os.listdir(tmp)) == before and (tmp / "old.csv").read_text() == "x"  # nothing made or written
    _refused("--log", {**outputs, "--log": cfg}, inputs)


def test_same_path_and_relative_spelling(files, monkeypatch):
    tmp, inp, cfg = files
    _refused("--out", {"--out": inp}, {"--features": inp})
    monkeypatch.chdir(tmp)
    _refused(
        "--out ./sub/../in.npz: is the same file as the input --features",
        {"--out": "./sub/../in.npz"},
        {"--features": inp},
    )
    _refused("is the same file as the input --config", {"--out": "c.yaml"}, {"--features": inp, "--config": cfg})


def test_hard_link_to_an_input(files):
    tmp, inp, _ = files
    os.link(inp, tmp / "hard.npy")
    _refused(
        "--out " + str(tmp / "hard.npy") + ": is the same file as the input --features",
        {"--out": tmp / "hard.npy"},
        {"--features": inp},
    )


def test_symlink_to_an_input_and_to_elsewhere(files):
    tmp, inp, _ = files
    (tmp / "link.npy").symlink_to(inp)
    _refused("is the same file as the input --features", {"--out": tmp / "link.npy"}, {"--features": inp})
    (tmp / "other.txt").write_text("x")
    (tmp / "l2.csv").symlink_to(tmp / "other.txt")
    _refused("is a symbolic link", {"--out": tmp / "l2.csv"})
    (tmp / "dangling.csv").symlink_to(tmp / "nowhere")
    _refused("is a symbolic link", {"--out": tmp / "dangling.csv"})


def test_input_given_through_a_symlink(files):
    tmp, inp, _ = files
    (tmp / "in-link.npz").symlink_to(inp)
    _refused("is the same file as the input --features", {"--out": inp}, {"--features": tmp / "in-link.npz"})


def test_fifo_device_folder_and_proc_fd(files):
    tmp, _, _ = files
    os.mkfifo(tmp / "pipe.csv")
    _refused("is a FIFO, not a regular file", {"--out": tmp / "pipe.csv"})
    _refused("/dev/null: is a device, not a regular file", {"--out": "/dev/null"})
    _refused("is a folder, not a regular file", {"--out": tmp})
    (tmp / "stdout.csv").symlink_to("/proc/self/fd/1")
    _refused("is a symbolic link (to /proc/self/fd/1)", {"--out": tmp / "stdout.csv"})
    _refused("is a symbolic link", {"--out": "/proc/self/fd/1"})


def test_parent_is_a_file(files):
    tmp, inp, _ = files
    _refused(f"{inp} is a file, not a folder", {"--out": inp / "p.csv"})
    _refused(f"{inp} is a file, not a folder", {"--out": inp / "deeper" / "p.csv"})


def test_two_outputs_the_same(files):
    tmp, _, _ = files
    _refused("--log", {"--out": tmp / "a.jsonl", "--log": tmp / "a.jsonl"})
    _refused("is the same file as --out", {"--out": tmp / "a.jsonl", "--log": tmp / "x" / ".." / "a.jsonl"})


def test_dash_means_stdout_only_where_allowed(files):
    tmp, inp, _ = files
    check_outputs({"--log": "-", "--out": tmp / "o.mp4"}, {"--video": inp}, stdout_ok=("--log",))
    _refused("--out -: standard output is not accepted here", {"--out": "-"}, stdout_ok=("--log",))


def test_output_dir(files):
    tmp, inp, _ = files
    check_output_dir("--out-dir", tmp / "new" / "deeper")
    check_output_dir("--out-dir", tmp)
    with pytest.raises(UserError, match="--out-dir .*in.npz: exists and is a file, not a folder"):
        check_output_dir("--out-dir", inp)
    with pytest.raises(UserError, match="is the input --data"):
        check_output_dir("--out-dir", tmp, {"--data": tmp})
    with pytest.raises(UserError, match="is a file, not a folder; pass a path inside a folder"):
        check_output_dir("--out-dir", inp / "sub")
    os.mkfifo(tmp / "fifo")
    with pytest.raises(UserError, match="exists and is a FIFO"):
        check_output_dir("--out-dir", tmp / "fifo")


def test_memory_estimate_names_what_and_the_machine(monkeypatch):
    check_memory(1000, "a small thing")
    monkeypatch.setattr("mstta.safety.machine_memory", lambda: 24 * 10**9)
    with pytest.raises(
        UserError,
        match=r"^capacity 10\^9 x 1000 classes x 512 dims needs 2.05 PB; "
        r"this machine has 24 GB; lower it$",
    ):
        check_memory(10**9 * 1000 * 512 * 4, "capacity 10^9 x 1000 classes x 512 dims")
    with pytest.raises(UserError, match="x needs nan bytes"):
        check_memory(float("nan"), "x")
    check_memory(0.8 * 24e9, "exactly the allowed fraction")


def test_human_bytes_and_machine_memory():
    assert [human_bytes(n) for n in (0, 999, 1536, 2.05e12, 3e18, float("inf"))] == [
        "0 B",
        "999 B",
        "1.54 KB",
        "2.05 TB",
        "3e+03 PB",
        "inf bytes",
    ]
    assert 2**28 < machine_memory() < 2**50
