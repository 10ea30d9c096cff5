"""mstta.atomic: whole files or nothing, pid-tagged temp names, stale temps swept."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from mstta.atomic import atomic_open, sweep_stale, temp_path

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
        assert not target.exists()                  # nothing at the target until complete
    assert target.read_text() == "a,b\n" and sorted(os.listdir(tmp_path)) == ["p.csv"]
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())   # usual mode, not mkstemp's 0600


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


def test_temp_path_keeps_a_suffix_and_is_empty(tmp_path):
    t = temp_path(tmp_path / "sub" / "video.mp4", ".part.mp4")
    assert t.parent == tmp_path / "sub" and t.name.endswith(".part.mp4") and t.stat().st_size == 0
    assert re.match(rf"^\.video\.mp4\.{os.getpid()}-[0-9a-f]{{8}}\.part\.mp4$", t.name)


def test_sweep_removes_dead_processes_temps_only(tmp_path):
    dead = _dead_pid()
    stale = [tmp_path / f".p.csv.{dead}-0badc0de.tmp", tmp_path / f".v.mp4.{dead}-0badc0de.part.mp4",
             tmp_path / f".log.jsonl.{dead}-12345678.part.jsonl", tmp_path / f".ab.npz.{dead}-abcdef01.work"]
    live = [tmp_path / f".p.csv.{os.getpid()}-0badc0de.tmp",           # this process: in flight
            tmp_path / f".p.csv.{os.getppid()}-0badc0de.tmp"]          # a running process
    other = [tmp_path / "p.csv", tmp_path / f".p.csv.{dead}-nothex00.tmp", tmp_path / f"p.csv.{dead}-0badc0de.tmp",
             tmp_path / f".notes.{dead}-0badc0de.txt"]
    for p in stale + live + other:
        p.write_text("x")
    (tmp_path / f".dir.{dead}-0badc0de.tmp").mkdir()                    # folders are never removed
    (tmp_path / f".link.{dead}-0badc0de.tmp").symlink_to(tmp_path / "p.csv")
    removed = sweep_stale(tmp_path)
    assert sorted(removed) == sorted(stale)
    assert all(p.exists() for p in live + other) and (tmp_path / f".dir.{dead}-0badc0de.tmp").is_dir()
    assert (tmp_path / "p.csv").read_text() == "x"


def test_sweep_removes_a_temp_older_than_the_live_process_owning_its_pid(tmp_path):
    """A reused pid: the temp predates the process that now has that pid."""
    t = tmp_path / f".p.csv.{os.getppid()}-0badc0de.tmp"
    t.write_text("x")
    os.utime(t, (1, 1))                                                 # written in 1970
    assert sweep_stale(tmp_path) == [t]


def test_sweep_of_a_missing_folder_is_a_no_op(tmp_path):
    assert sweep_stale(tmp_path / "nope") == []
