"""mstta.atomic: whole files or nothing, pid-tagged temp names, stale temps swept."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from mstta import atomic
from mstta.atomic import NAME_MAX, atomic_open, hidden_name, output_lock, sweep_stale, temp_path
from mstta.errors import UserError

TEMP_NAME = re.compile(r"^\.p\.csv\.(\d+)-[0-9a-f]{8}\.tmp$")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_atomic_open_writes_through_a_pid_tagged_temp(tmp_path):
    target = tmp_path / "p.csv"
    with atomic_open(target) as fh:
        fh.write("a,b\n")
        (temp,) = [p for p in tmp_path.iterdir()]
        m = TEMP_NAME.match(temp.name)
        assert m and int(m.group(1)) == os.getpid()
        assert not target.exists()  # nothing at the target until complete
    assert target.read_text() == "a,b\n" and sorted(os.listdir(tmp_path)) == ["p.csv"]
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())  # usual mode, not mkstemp's 0600


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_error_or_interrupt_keeps_the_old_file_and_no_temp(tmp_path, exc):
    target = tmp_path / "p.csv"
    target.write_text("old")
    with pytest.raises(exc):
        with atomic_open(target) as fh:
            fh.write("half")
            raise exc()
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["p.csv"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_as_the_temp_is_made_leaves_nothing(tmp_path, monkeypatch, signum):
    """A signal that arrives just after the temp file is made, before `temp_path` returns: the name
    was recorded first, so the cleanup finds it and no temp is left (SIGTERM as `run_cli` maps it)."""
    real = atomic.temp_path

    def made_then_interrupted(target, suffix=".tmp", record=None):
        path = real(target, suffix, record)
        os.kill(os.getpid(), signum)  # delivered here unless held back
        return path

    def to_interrupt(sig, frame):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic, "temp_path", made_then_interrupted)
    previous = signal.signal(signal.SIGTERM, to_interrupt)
    try:
        with pytest.raises(KeyboardInterrupt), atomic_open(tmp_path / "x.txt") as fh:
            fh.write("a")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert list(tmp_path.iterdir()) == []


def test_temp_path_keeps_a_suffix_and_is_empty(tmp_path):
    t = temp_path(tmp_path / "sub" / "video.mp4", ".part.mp4")
    assert t.parent == tmp_path / "sub" and t.name.endswith(".part.mp4") and t.stat().st_size == 0
    assert re.match(rf"^\.video\.mp4\.{os.getpid()}-[0-9a-f]{{8}}\.part\.mp4$", t.name)


def test_sweep_removes_dead_processes_temps_only(tmp_path):
    dead = _dead_pid()
    stale = [
        tmp_path / f".p.csv.{dead}-0badc0de.tmp",
        tmp_path / f".v.mp4.{dead}-0badc0de.part.mp4",
        tmp_path / f".log.jsonl.{dead}-12345678.part.jsonl",
        tmp_path / f".ab.npz.{dead}-abcdef01.work",
    ]
    live = [
        tmp_path / f".p.csv.{os.getpid()}-0badc0de.tmp",  # this process: in flight
        tmp_path / f".p.csv.{os.getppid()}-0badc0de.tmp",
    ]  # a running process
    other = [
        tmp_path / "p.csv",
        tmp_path / f".p.csv.{dead}-nothex00.tmp",
        tmp_path / f"p.csv.{dead}-0badc0de.tmp",
        tmp_path / f".notes.{dead}-0badc0de.txt",
    ]
    for p in stale + live + other:
        p.write_text("x")
    (tmp_path / f".dir.{dead}-0badc0de.tmp").mkdir()  # folders are never removed
    (tmp_path / f".link.{dead}-0badc0de.tmp").symlink_to(tmp_path / "p.csv")
    removed = sweep_stale(tmp_path)
    assert sorted(removed) == sorted(stale)
    assert all(p.exists() for p in live + other) and (tmp_path / f".dir.{dead}-0badc0de.tmp").is_dir()
    assert (tmp_path / "p.csv").read_text() == "x"


def test_sweep_removes_a_temp_older_than_the_live_process_owning_its_pid(tmp_path):
    """A reused pid: the temp predates the process that now has that pid."""
    t = tmp_path / f".p.csv.{os.getppid()}-0badc0de.tmp"
    t.write_text("x")
    os.utime(t, (1, 1))  # written in 1970
    assert sweep_stale(tmp_path) == [t]


def test_sweep_of_a_missing_folder_is_a_no_op(tmp_path):
    assert sweep_stale(tmp_path / "nope") == []


# ---------------------------------------------------------------------- names within NAME_MAX
@pytest.mark.parametrize("length", [200, 229, 230, 240, 254, 255])
def test_temp_and_lock_names_of_a_long_legal_name_stay_legal(tmp_path, length):
    """A legal 240-byte output name used to be refused ("File name too long"): the temp name adds
    `.`, `.<pid>-<token>` and a suffix. The hidden names are cut to NAME_MAX, never the tail."""
    target = tmp_path / ("é" * (length // 2) + "x" * (length % 2))  # 2-byte characters: cut on a boundary
    assert len(target.name.encode()) == length
    with atomic_open(target) as fh:
        fh.write("whole")
        (temp,) = [p for p in tmp_path.iterdir()]
        assert len(temp.name.encode()) <= NAME_MAX and temp.name.endswith(".tmp")
    assert target.read_text() == "whole" and os.listdir(tmp_path) == [target.name]
    part = temp_path(target, ".part.mp4")
    assert len(part.name.encode()) <= NAME_MAX and part.name.endswith(".part.mp4")
    part.unlink()
    with output_lock(target) as lock:
        assert len(lock.name.encode()) <= NAME_MAX and lock.name.endswith(".mstta-lock")
    assert os.listdir(tmp_path) == [target.name]


def test_a_cut_temp_name_is_still_swept_when_its_process_is_gone(tmp_path):
    dead = _dead_pid()
    name = hidden_name("y" * 255, f".{dead}-0badc0de.tmp")
    assert len(name.encode()) == NAME_MAX
    (tmp_path / name).write_text("half")
    assert sweep_stale(tmp_path) == [tmp_path / name]


# ---------------------------------------------------------------------- one writer per output
HOLD = """
import sys, time
from mstta.atomic import output_lock
with output_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(60)
"""


def _holder(target):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(target)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_writer_of_one_output_is_refused_naming_the_first(tmp_path):
    target = tmp_path / "results" / "results.json"
    proc = _holder(target)
    try:
        with pytest.raises(UserError) as err:
            with output_lock(target, "--out"):
                pass
        msg = str(err.value)
        assert f"--out {target}: another mstta run (pid {proc.pid}) is writing it" in msg and "\n" not in msg
        assert sweep_stale(target.parent) == []  # a held lock is never swept
    finally:
        proc.kill()
        proc.communicate()  # reaps it and closes its pipe
    with output_lock(target, "--out") as lock:  # kill -9 released it: the kernel does
        assert lock.read_text() == f"{os.getpid()}\n"
    assert sorted(os.listdir(tmp_path / "results")) == []  # the lock file goes with its holder


def test_a_killed_holders_lock_file_is_swept(tmp_path):
    target = tmp_path / "f.npz"
    proc = _holder(target)
    proc.kill()
    proc.communicate()  # reaps it and closes its pipe
    lock = tmp_path / ".f.npz.mstta-lock"
    assert lock.is_file()  # kill -9 cannot remove it...
    assert sweep_stale(tmp_path) == [lock] and os.listdir(tmp_path) == []  # ...the next run's sweep does


def test_a_lock_makes_no_folder_that_outlives_it(tmp_path):
    with output_lock(tmp_path / "a" / "b" / "results.json"):
        assert (tmp_path / "a" / "b").is_dir()
    assert os.listdir(tmp_path) == []


def test_under_torchrun_only_rank_0_locks(tmp_path, monkeypatch):
    """Rank 0 takes the lock (so a held one refuses it); any other rank passes and writes nothing."""
    target, lock = tmp_path / "f.npz", tmp_path / ".f.npz.mstta-lock"
    proc = _holder(target)
    try:
        monkeypatch.setenv("RANK", "0")
        with pytest.raises(UserError, match=rf"another mstta run \(pid {proc.pid}\) is writing it"):
            with output_lock(target, "--out"):
                pass
        monkeypatch.setenv("RANK", "1")
        with output_lock(target, "--out") as got:  # rank 1 writes nothing itself
            assert got == target and os.listdir(tmp_path) == [lock.name]
        assert lock.read_text() == f"{proc.pid}\n"  # the holder's lock, untouched
    finally:
        proc.kill()
        proc.communicate()  # reaps it and closes its pipe


def test_a_folder_output_is_locked_beside_it(tmp_path):
    """`extract --out features/` locks the folder (`.features.mstta-lock` beside it); its contents stay."""
    folder = tmp_path / "features"
    folder.mkdir()
    (folder / "keep.npz").write_bytes(b"x")
    proc = _holder(folder)
    try:
        assert (tmp_path / ".features.mstta-lock").is_file()
        with pytest.raises(UserError, match=rf"--out {folder}: another mstta run \(pid {proc.pid}\)"):
            with output_lock(folder, "--out"):
                pass
    finally:
        proc.kill()
        proc.communicate()
    assert sorted(os.listdir(tmp_path)) == [".features.mstta-lock", "features"]  # kill -9: the file stays...
    with output_lock(folder, "--out"):
        pass
    assert sorted(os.listdir(tmp_path)) == ["features"] and os.listdir(folder) == ["keep.npz"]  # ...until the next
