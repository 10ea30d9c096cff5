"""The UI's state: one `UISession` per browser session, the registry that bounds how many live at
once, the model slots every encoder call shares, and the controls validated into `Settings`.

    slots = ModelSlots(2)                  # --concurrency: encoder calls running at once, all users
    with slots():                          # FIFO: a stream releases its slot between frames,
        session.process(image)             # so other sessions' calls interleave with it
    sessions = Sessions(limit=16)          # --max-sessions: the oldest idle one is dropped beyond
    sessions.touch(ui)                     # on every event of `ui` (registers it, marks it used)

Light actions (Apply, Reset, Stop, label edits) touch only their own `UISession`, under its lock;
only the model calls inside take a slot.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import math
import threading
import time
from typing import Any, Callable, Iterator

from mstta.config import EngineConfig
from mstta.errors import UserError
from mstta.methods import get_method

from ..labels import parse_labels
from ..session import StreamSession
from ..summary import FpsMeter
from .plots import History, method_title

log = logging.getLogger(__name__)

MAX_BANK_SIZE = 16384            # a bank is [bank_size, d] floats per session (32 MB at d = 512): bounded in the UI
MAX_CLASSES = 1000               # classes in the labels box (ImageNet fits)


class ModelSlots:
    """A fair (first come, first served) counting semaphore: `with slots(): ...` holds one slot."""

    def __init__(self, count: int):
        if count < 1:
            raise ValueError("need at least one model slot")
        self.count = count
        self._free = count
        self._queue: collections.deque[object] = collections.deque()
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
            while self._queue[0] is not ticket or self._free == 0:
                self._cond.wait()
            self._queue.popleft()
            self._free -= 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._free += 1
                self._cond.notify_all()


class UISession:
    """One browser session: its StreamSession (made once labels are known), plot history, lock.

    Gradio deep-copies a State's initial value; a copy of a UISession is a fresh, empty one (the
    CLIP model inside a StreamSession is shared, never copied).
    """

    def __init__(self) -> None:
        self.stream: StreamSession | None = None
        self.history = History()
        self.lock = threading.RLock()
        self.meter = FpsMeter()
        self.source: str | None = None       # what the history shows: "video:<name>" or "webcam"
        self.webcam_frames = 0
        self.webcam_started = 0.0            # monotonic time of the webcam run's first frame
        self.webcam_last = 0.0               # ... and of its latest one (the run ends when they stop coming)
        self.last_error: str | None = None   # the webcam's last error, shown once as a toast
        self.last_plots = 0.0                # when the webcam last redrew the plots over time
        self.runs = 0                        # videos being processed now (normally 0 or 1)
        self.stop_at = 0.0                   # when Stop was last pressed (monotonic clock)
        self.last_used = time.monotonic()
        self.expired = False                 # dropped by the session cap: the user must press Reset
        self.closed = False                  # the page closed or the state's time to live ran out
        self.session_hash: str | None = None

    def __deepcopy__(self, memo: dict) -> "UISession":
        return UISession()

    @property
    def busy(self) -> bool:
        return self.runs > 0 or time.monotonic() - self.webcam_last < 10.0

    def restart_history(self, source: str | None = None) -> None:
        """Plots start over (new video, new settings, Reset); the engine is not touched."""
        self.history.clear()
        self.meter = FpsMeter()
        self.webcam_frames = 0
        self.source = source

    def close(self, expired: bool = False) -> None:
        """Free the engine, classifier and history (page closed, time to live over, or dropped by the cap)."""
        with self.lock:
            self.stream = None
            self.history.clear()
            self.expired = expired
            self.closed = not expired


class Sessions:
    """The live sessions by session hash, oldest use first; beyond `limit` the oldest idle one is
    dropped (its engine freed, its user told to press Reset)."""

    def __init__(self, limit: int):
        self.limit = limit
        self._live: collections.OrderedDict[str, UISession] = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._live)

    def touch(self, ui: UISession, key: str) -> None:
        """`ui` (session `key`) is in use now: (re)register it, drop the oldest idle ones beyond the limit."""
        ui.last_used = time.monotonic()
        ui.closed = False
        if ui.expired:   # dropped: not live again until its user presses Reset
            return
        with self._lock:
            self._live[key] = ui
            self._live.move_to_end(key)
            victims = []
            for other_key, other in list(self._live.items()):
                if len(self._live) <= self.limit:
                    break
                if other is not ui and not other.busy:
                    victims.append(self._live.pop(other_key))
        for other in victims:
            other.close(expired=True)
            log.info("session dropped: more than %d live sessions (the oldest idle one goes)", self.limit)

    def forget(self, key: str | None, ui: UISession | None = None) -> None:
        """The page closed or the state's time to live ran out: free the session, stop counting it."""
        with self._lock:
            found = self._live.pop(key, None) if key else None
        for one in {id(x): x for x in (found, ui) if isinstance(x, UISession)}.values():
            one.close()
            log.info("session %s freed", key)


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the controls ask for, validated."""

    labels: tuple[str, ...]
    template: str | None
    method: str
    config: EngineConfig


def int_control(value: Any, name: str) -> int:
    if value is None or value == "":
        raise UserError(f"{name}: enter a whole number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{name}: {value!r} is not a number") from None
    if not math.isfinite(number) or number != int(number):
        raise UserError(f"{name}: {value!r} is not a whole number")
    return int(number)


def float_control(value: Any, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{name}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise UserError(f"{name}: {value!r} is not a finite number")
    return number


def read_settings(labels_text: str | None, template: str | None, method: str, k: Any, alpha: Any, lam: Any,
                  capacity: Any, bank_size: Any, base: EngineConfig) -> Settings:
    """Validate the controls into Settings (one-line UserError naming the control otherwise)."""
    from mstta.templates import check_templates

    labels = parse_labels(labels_text or "", where="Labels")
    if len(labels) > MAX_CLASSES:
        raise UserError(f"Labels: {len(labels)} class names; the UI takes at most {MAX_CLASSES}")
    template = (template or "").strip() or None
    if template is not None:
        check_templates([template], "Template")
    method = get_method(str(method)).name
    bank = int_control(bank_size, "Bank size")
    if not 1 <= bank <= MAX_BANK_SIZE:
        raise UserError(f"Bank size {bank}: the UI keeps 1 to {MAX_BANK_SIZE:,} features per session")
    try:
        config = dataclasses.replace(
            base, k=int_control(k, "k"), alpha=float_control(alpha, "alpha"), lam=float_control(lam, "lambda"),
            capacity=int_control(capacity, "Q (cache size per class)"), bank_size=bank)
    except (TypeError, ValueError) as exc:   # the config's own bounds
        raise UserError(str(exc)) from None
    return Settings(tuple(labels), template, method, config)


def apply_settings(ui: UISession, settings: Settings, new_stream: Callable[[Settings], StreamSession]) -> str | None:
    """Bring the session in line with `settings`; returns a note when the engine restarted.

    The new classifier is built before anything is replaced, so a failure leaves the session as
    it was. `new_stream(settings)` makes the first StreamSession of a session.
    """
    if ui.stream is None:
        ui.stream = new_stream(settings)
        ui.restart_history(ui.source)
        return None
    stream, changed = ui.stream, []
    if list(settings.labels) != stream.labels or settings.template != stream.template:
        stream.set_labels(settings.labels, settings.template)
        changed.append(f"{len(settings.labels)} classes")
    if settings.method != stream.method or settings.config != stream.config:
        stream.configure(settings.method, settings.config)
        changed.append(f"{method_title(settings.method)} settings")
    if not changed:
        return None
    ui.restart_history(ui.source)
    return "New " + " and ".join(changed) + ": the adaptation started afresh."
