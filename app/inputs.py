"""Reading the demo's small input files (labels, ground truth) safely: regular files only, bounded.

    data = read_small_file("labels.txt", "--labels", MAX_LABELS_BYTES, "a text file with one class name per line")

`/dev/zero` would be read until memory runs out and a FIFO would block the run forever; both are
refused before a byte is read. The file is opened without blocking (O_NONBLOCK: a FIFO's open does
not wait for a writer), checked to be a regular file on the open descriptor (no race with a rename),
and read up to its bound, so a file that grows while it is read is refused too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from mstta.errors import UserError
from mstta.safety import file_kind

from .progress import plural


def read_small_file(path: str | Path, flag: str, limit: int, expected: str) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; anything else is a one-line UserError
    naming `flag`, the file and the fix (`expected` says what to pass instead)."""
    p = Path(path)
    where = f"{flag} {p}"
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UserError(f"{where}: no such file; pass {expected}") from None
    except IsADirectoryError:
        raise UserError(f"{where}: is a folder; pass {expected}") from None
    except OSError as exc:
        raise UserError(f"{where}: cannot be read ({exc.strerror or exc}); pass {expected}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise UserError(f"{where}: is a folder; pass {expected}")
        if not stat.S_ISREG(mode):
            raise UserError(f"{where}: is {file_kind(mode)}, not a regular file; pass {expected}")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise UserError(f"{where}: cannot be read ({exc.strerror or exc}); pass {expected}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UserError(f"{where}: larger than the limit of {limit:,} {plural(limit, 'byte')}; pass {expected}")
    return data
