"""Atomic file writes: a temp file beside the target, renamed into place only when complete."""
from __future__ import annotations

import contextlib
import os
import re
import secrets
import tempfile
from pathlib import Path
from typing import IO, Iterator

# Every temp file a command writes is `.<target name>.<pid>-<token><suffix>` beside its target,
# so a later run can tell a dead process's leftovers from a live one's (see `sweep_stale`).
_TEMP_RE = re.compile(r"^\..+\.(\d+)-[0-9a-f]{8}(\.tmp|\.part(\.[A-Za-z0-9]+)?|\.work)$")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temp file for writing; on success rename it onto `path`, on error delete it."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.{os.getpid()}-{secrets.token_hex(4)}", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
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


def sweep_stale(folder: str | Path) -> list[Path]:
    """Remove the temp files that a dead process left in `folder`: names of `temp_path`'s pattern whose pid no longer runs. Returns
    what was removed. Called by a command before it writes into a folder."""
    removed: list[Path] = []
    d = Path(folder)
    if not d.is_dir():
        return removed
    for entry in d.iterdir():
        m = _TEMP_RE.match(entry.name)
        if m is None or not entry.is_file() or _alive(int(m.group(1))):
            continue
        with contextlib.suppress(OSError):
            entry.unlink()
            removed.append(entry)
    return removed
