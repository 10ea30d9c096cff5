"""Giving memory back when a run or a session ends: Python's cycles collected, then the C
allocator's free pages returned to the system (glibc's `malloc_trim`; elsewhere a no-op).

    release_memory()      # a video or webcam run ended, or a session closed

Without the trim the server grew by about 25 MB a run and kept it (the frames, features and
encoder buffers of a run are freed, but glibc keeps the freed pages in its per-thread arenas);
`benchmarks/server_memory.py` measures it (docs/ui.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import threading

log = logging.getLogger(__name__)

_lock = threading.Lock()
_libc: object | None = None


def _malloc_trim() -> int:
    """glibc's `malloc_trim(0)` (1 when memory went back), 0 where there is none."""
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        try:
            _libc = ctypes.CDLL(name) if name else False
        except OSError:
            _libc = False
    trim = getattr(_libc, "malloc_trim", None)
    return int(trim(0)) if trim is not None else 0


def release_memory() -> None:
    """Collect Python's garbage and hand the allocator's free pages back to the system (one at a time)."""
    if not _lock.acquire(blocking=False):  # another thread is releasing right now: once is enough
        return
    try:
        gc.collect()
        _malloc_trim()
    except Exception:  # never fail a run over this
        log.exception("releasing memory failed")
    finally:
        _lock.release()
