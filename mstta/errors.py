"""User-facing errors and the one-line CLI error convention (exit code 2, no traceback)."""
from __future__ import annotations

import logging
import sys
from typing import Callable, Sequence

log = logging.getLogger(__name__)

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


class UserError(ValueError):
    """Bad input a user can fix: the message names the file/flag/value and the fix, in one line."""


def one_line(message: object) -> str:
    """Collapse a message onto one line (error output is always a single line)."""
    return " ".join(str(message).split())


def run_cli(prog: str, main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> int:
    """Run a CLI body; user errors print `prog: error: ...` on one stderr line and return 2."""
    previous = _sigterm_as_interrupt()
    try:
        return int(main(argv) or 0)
    except (UserError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if previous is not None:
            import signal

            signal.signal(signal.SIGTERM, previous)


def _sigterm_as_interrupt():
    """SIGTERM ends a command like Ctrl-C: the same cleanup (temp files removed, outputs
    finalised) runs; only in the main thread, where signal handlers can be installed."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):  # noqa: ANN001 - signal handler signature
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, handler)
