"""Atomic file writes: a temp file beside the target, renamed into place only when complete; and
an exclusive lock on an output, so two runs never write one output at once."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import threading
from pathlib import Path
from typing import IO, Iterator

from .errors import UserError

# Every temp file a command writes is `.<target name>.<pid>-<token><suffix>` beside its target,
# so a later run can tell a dead process's leftovers from a live one's (see `sweep_stale`).
_TEMP_RE = re.compile(r"^\..+\.(\d+)-[0-9a-f]{8}(\.tmp|\.part(\.[A-Za-z0-9]+)?|\.work)$")
LOCK_SUFFIX = ".mstta-lock"  # `.<target name>.mstta-lock`: see `output_lock`
_LOCK_RE = re.compile(r"^\..+\.mstta-lock$")
NAME_MAX = 255  # bytes in one file name (Linux, macOS)
_HELD: set[tuple[str, int]] = set()  # (lock file, thread) this process holds (`output_lock` nests per thread)


def hidden_name(name: str, tail: str) -> str:
    """`.<name><tail>` within NAME_MAX bytes: a long name is cut (on a character boundary), never the
    tail, so a legal 255-byte output name still gets a legal temp or lock name beside it."""
    room = NAME_MAX - 1 - len(tail.encode())
    raw = name.encode()
    if len(raw) > room:
        name = raw[:room].decode("utf-8", "ignore")
    return f".{name}{tail}"


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temp file (`temp_path`) for writing; on success rename it onto `path`, on any
    error or interrupt (Ctrl-C, SIGTERM through `run_cli`) delete it: never a half-written file."""
    p = Path(path)
    held: list[Path] = []  # the latest temp name (one that collided is another's file)

    def hold(name: Path) -> None:
        held[:] = [name]

    try:
        tmp = temp_path(p, record=hold)
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        for t in held:  # the temp's name is held before the file exists: an interrupt leaves none
            t.unlink(missing_ok=True)
        raise


def temp_path(target: str | Path, suffix: str = ".tmp", record=None) -> Path:
    """Create (empty, usual file mode) and return a hidden temp file beside `target`, named
    `.<name>.<pid>-<token><suffix>` (e.g. suffix `.part.mp4` keeps a muxer's extension; a name too
    long for that is cut: `hidden_name`). `record(path)` is called with the name before the file is
    made, so a caller that deletes what it recorded when interrupted never leaves a temp behind."""
    p = Path(target)
    p.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = p.parent / hidden_name(p.name, f".{os.getpid()}-{secrets.token_hex(4)}{suffix}")
        if record is not None:
            record(tmp)
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
        boot = next(
            float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime ")
        )
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
    whose pid no longer runs (or was reused since), and lock files no process holds. Returns what was
    removed. Called by a command before it writes into a folder."""
    removed: list[Path] = []
    d = Path(folder)
    if not d.is_dir():
        return removed
    for entry in d.iterdir():
        if _LOCK_RE.match(entry.name):
            if _remove_unheld_lock(entry):
                removed.append(entry)
            continue
        m = _TEMP_RE.match(entry.name)
        try:
            if m is None or not entry.is_file() or entry.is_symlink() or not _stale(entry, int(m.group(1))):
                continue
            entry.unlink()
        except OSError:
            continue
        removed.append(entry)
    return removed


def _remove_unheld_lock(entry: Path) -> bool:
    """Remove a lock file of `output_lock` that no process holds (a killed run's); a held one stays."""
    try:
        fd = os.open(entry, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        entry.unlink()  # a waiter that opened it meanwhile sees another inode and retries
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


@contextlib.contextmanager
def output_lock(target: str | Path, flag: str = "--out") -> Iterator[Path]:
    """Hold an exclusive lock on the output `target` (a file or a folder) for the block, or refuse at
    once with a one-line UserError naming the run that holds it. The lock is `flock` on the file
    `.<name>.mstta-lock` beside `target`, holding the holder's pid; the kernel releases it when the
    process ends (even on kill -9) and the file is removed on exit. Under torchrun only rank 0 (the
    writer) locks. The lock sits beside the resolved target (symlinked folders, `..` and relative
    spellings of one output take one lock); a block inside a block holding the same lock in this
    process runs under it (the benchmark's store lock, then the extraction's).
    Usage: `with output_lock(path, "--out"): ...`."""
    if os.environ.get("RANK", "0") != "0":
        yield Path(target)
        return
    p = Path(os.path.realpath(os.path.expanduser(os.fspath(target))))
    lock = p.parent / hidden_name(p.name, LOCK_SUFFIX)
    held = (str(lock), threading.get_ident())
    if held in _HELD:
        yield lock
        return
    made = [d for d in (lock.parent, *lock.parent.parents) if not d.exists()]
    near = next((d for d in (lock.parent, *lock.parent.parents) if d.exists()), None)
    if near is not None and not near.is_dir():
        raise UserError(f"{flag} {target}: {near} is a file, not a folder; pass a path inside a folder")
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = _acquire(lock, flag, Path(target))
    _HELD.add(held)
    try:
        yield lock
    finally:
        _HELD.discard(held)
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)
        for d in made:  # folders made only for the lock go again when nothing was written
            with contextlib.suppress(OSError):
                d.rmdir()


def _acquire(lock: Path, flag: str, target: Path) -> int:
    """Open, flock (non-blocking) and stamp `lock` with this pid; retry when the file was replaced
    between open and flock (its holder removed it on exit)."""
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            raise UserError(
                f"{flag} {target}: another mstta run (pid {holder}) is writing it; wait for it to "
                f"finish or pass another {flag}"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        os.close(fd)
