"""Guards every command runs before it writes or allocates: outputs never clobber inputs or
special files, and no allocation is attempted that the machine cannot hold.

One function per guard, shared by `mstta-bench` and `mstta-demo`; each raises a one-line
`UserError` naming the flag, the file and the fix.
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path
from typing import Mapping

from .errors import UserError

PathLike = str | os.PathLike

STDOUT = "-"  # an output flag that accepts "-" writes to standard output (no file is touched)


def _resolve(p: PathLike) -> Path:
    return Path(os.path.abspath(os.path.realpath(os.fspath(p))))


def _same(a: Path, b: Path) -> bool:
    if a == b:
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_outputs(
    outputs: Mapping[str, PathLike | None], inputs: Mapping[str, PathLike | None] = {}, stdout_ok: tuple[str, ...] = ()
) -> None:
    """Refuse output paths that would destroy something: an output that resolves to an input or
    to another output (same path, symlink or hard link), an existing output that is not a regular
    file (device such as /dev/null, FIFO, folder, socket) or is a symbolic link (the atomic rename
    would replace the link; a link to /proc/self/fd/1 or /dev/null is refused with it), an output
    whose parent is a file or a folder this process cannot write. Keys are the flags (`--out`).

    `stdout_ok` names the output flags for which `-` means standard output; elsewhere `-` is refused.
    """
    ins = {flag: _resolve(p) for flag, p in inputs.items() if p is not None and os.fspath(p) != STDOUT}
    seen: dict[str, Path] = {}
    for flag, raw in outputs.items():
        if raw is None:
            continue
        if os.fspath(raw) == STDOUT:
            if flag in stdout_ok:
                continue
            raise UserError(f"{flag} -: standard output is not accepted here; pass a file path")
        p = Path(os.fspath(raw))
        shown = os.fspath(raw)  # as the user typed it
        r = _resolve(p)
        for in_flag, q in ins.items():
            if _same(r, q):
                raise UserError(
                    f"{flag} {shown}: is the same file as the input {in_flag}; pass a different output path"
                )
        for out_flag, q in seen.items():
            if _same(r, q):
                raise UserError(f"{flag} {shown}: is the same file as {out_flag}; pass a different path to each output")
        if p.is_symlink():
            raise UserError(
                f"{flag} {shown}: is a symbolic link (to {os.readlink(p)}); pass a regular file path "
                "(a link is never written through)"
            )
        if p.exists() and not p.is_file():
            raise UserError(f"{flag} {shown}: is {_kind(p)}, not a regular file; pass a path to a regular file")
        _check_parent(flag, p, shown)
        seen[flag] = r


def check_output_dir(flag: str, path: PathLike, inputs: Mapping[str, PathLike | None] = {}) -> None:
    """An output folder: refused when it exists as something other than a folder, when a parent
    is a file or unwritable, or when it is one of the inputs."""
    p = Path(os.fspath(path))
    if p.exists() and not p.is_dir():
        raise UserError(
            f"{flag} {p}: exists and is {_kind(p) if not p.is_file() else 'a file'}, not a folder; pass a folder path"
        )
    r = _resolve(p)
    for in_flag, q in inputs.items():
        if q is not None and os.fspath(q) != STDOUT and _same(r, _resolve(q)):
            raise UserError(f"{flag} {p}: is the input {in_flag}; pass a different output folder")
    if p.is_dir():
        if not os.access(p, os.W_OK | os.X_OK):
            raise UserError(f"{flag} {p}: this process cannot write into that folder; pass a writable folder")
    else:
        _check_parent(flag, p)


def _check_parent(flag: str, p: Path, shown: str | None = None) -> None:
    """The nearest existing ancestor of `p` must be a folder this process can write into."""
    shown = shown if shown is not None else os.fspath(p)
    for parent in [p.parent, *p.parent.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise UserError(f"{flag} {shown}: {parent} is a file, not a folder; pass a path inside a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise UserError(f"{flag} {shown}: this process cannot write into {parent}; pass a writable folder")
            return


def check_input_file(flag: str, path: PathLike, expected: str) -> Path:
    """An input that must be a regular file: missing says "file not found", anything else (a folder,
    a FIFO, /dev/zero) says what it is; never opened here (a FIFO would block)."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise UserError(f"{flag} {p}: file not found; pass {expected}") from None
    except OSError as exc:
        raise UserError(f"{flag} {p}: cannot be read ({exc.strerror or exc}); pass {expected}") from None
    if not stat.S_ISREG(mode):
        raise UserError(f"{flag} {p}: is {file_kind(mode)}, not a regular file; pass {expected}")
    return p


def _kind(p: Path) -> str:
    return file_kind(p.stat().st_mode)


def file_kind(mode: int) -> str:
    """What a file of this `st_mode` is, for messages ("a FIFO", "a device", ...)."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def machine_memory() -> int:
    """Memory this process may use, in bytes: physical memory, or a container's (cgroup) limit
    when lower. The bound every allocation estimate meets."""
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        have = 16 * 2**30
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            have = min(have, int(Path(limit).read_text().strip()))
        except (OSError, ValueError):  # absent, or "max" (no limit)
            continue
    return have


def human_bytes(n: float) -> str:
    """1536 -> '1.54 KB' (decimal units, as a user reads them)."""
    if not math.isfinite(n):
        return f"{n} bytes"
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    return f"{n} PB"  # pragma: no cover


def check_memory(nbytes: float, what: str, fraction: float = 0.8, fix: str = "lower it") -> None:
    """Refuse, before allocating, a structure needing more than `fraction` of this machine's memory:
    "<what> needs 2.05 TB; this machine has 24 GB; <fix>". `what` says what is allocated, from
    which flags; `fix` what to do about it."""
    have = machine_memory()
    if not nbytes <= fraction * have:  # NaN refused too
        raise UserError(f"{what} needs {human_bytes(nbytes)}; this machine has {human_bytes(have)}; {fix}")
