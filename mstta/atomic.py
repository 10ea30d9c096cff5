"""Atomic file writes: a temp file beside the target, renamed into place only when complete."""
from __future__ import annotations

import contextlib
import os
import re
import secrets
from pathlib import Path
from typing import IO, Iterator

# Every temp file a command writes is `.<target name>.<pid>-<token><suffix>` beside its target,
# so a later run can tell a dead process's leftovers from a live one's (see `sweep_stale`).
_TEMP_RE = re.compile(r"^\..+\.(\d+)-[0-9a-f]{8}(\.tmp|\.part(\.[A-Za-z0-9]+)?|\.work)$")


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temp file (`temp_path`) for writing; on success rename it onto `path`, on any
    error or interrupt (Ctrl-C, SIGTERM through `run_cli`) delete it: never a half-written file."""
    p = Path(path)
    tmp = temp_path(p)
    try:
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def temp_path(target: str | Path, suffix: str = ".tmp") -> Path:
    """Create (empty, usual file mode) and return a hidden temp file beside `target`, named
    `.<name>.<pid>-<token><suffix>` (e.g. suffix `.part.mp4` keeps a muxer's extension)."""
    p = Path(target)
    p.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = p.parent / f".{p.name}.{os.getpid()}-{secrets.token_hex(4)}{suffix}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:  # pragma: no cover - 2^32 tokens
            continue
        os.close(fd)
        return tmp


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _start_time(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch, from /proc), or None if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, after the parenthesised name
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _stale(entry: Path, pid: int) -> bool:
    """A temp file is stale when its process is gone, or when the pid now belongs to a process
    started after the file was last written (the pid was reused)."""
    if pid == os.getpid():
        return False
    if not _alive(pid):
        return True
    started = _start_time(pid)
    return started is not None and entry.stat().st_mtime < started - 1.0


def sweep_stale(folder: str | Path) -> list[Path]:
    """Remove the temp files that a dead process left in `folder`: names of `temp_path`'s pattern
    whose pid no longer runs (or was reused since). Returns what was removed. Called by a command
    before it writes into a folder."""
    removed: list[Path] = []
    d = Path(folder)
    if not d.is_dir():
        return removed
    for entry in d.iterdir():
        m = _TEMP_RE.match(entry.name)
        try:
            if m is None or not entry.is_file() or entry.is_symlink() or not _stale(entry, int(m.group(1))):
                continue
            entry.unlink()
        except OSError:
            continue
        removed.append(entry)
    return removed
