"""User-facing errors and the one-line CLI error convention (exit code 2, no traceback)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Callable, Sequence


class OneLineParser(argparse.ArgumentParser):
    """argparse with its own errors as one `UserError` line (exit 2, no usage block): the parser of
    `mstta-bench` and `mstta-demo`."""

    def error(self, message: str) -> None:
        raise UserError(f"{message} (see {self.prog} --help)")


log = logging.getLogger(__name__)

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


class UserError(ValueError):
    """Bad input a user can fix: the message names the file/flag/value and the fix, in one line."""


def one_line(message: object) -> str:
    """Collapse a message onto one line (error output is always a single line)."""
    return " ".join(str(message).split())


def run_cli(
    prog: str, main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None, resume: str = ""
) -> int:
    """Run a CLI body; user errors print `prog: error: ...` on one stderr line and return 2.

    SIGTERM ends the command like Ctrl-C (KeyboardInterrupt), so the same cleanup runs (temp
    files removed, outputs finalised); it prints `prog: interrupted` (+ `resume`: how to go on) and
    returns 130. An OSError (disk full, permission denied, ...) and a MemoryError are one line as well."""
    previous = _sigterm_as_interrupt()
    try:
        return int(main(argv) or 0)
    except (UserError, OSError) as exc:
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except MemoryError as exc:
        detail = f" ({one_line(exc)})" if str(exc) else ""
        print(f"{prog}: error: out of memory{detail}; lower the sizes this run allocates", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print(f"{prog}: interrupted{resume}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _sigterm_as_interrupt():
    """Install SIGTERM -> KeyboardInterrupt and return the previous handler; only in the main
    thread, where signal handlers can be installed (None elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _raise_interrupt)
