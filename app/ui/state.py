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
from typing import Any, Callable, Iterator, Mapping

from mstta.engine.config import EngineConfig
from mstta.errors import UserError
from mstta.features.views import MAX_VIEWS

from ..forgetting import parse_racer, with_forget
from ..labels import parse_labels
from ..session import MAX_METHODS, FrameResult, StreamSession, check_methods
from ..summary import FpsMeter, Tally
from .recording import Downloads

log = logging.getLogger(__name__)

SESSION_BANK_LIMIT = 16384  # the UI's bound on a session's bank: [rows, d] floats (32 MB at d = 512)
DEFAULT_CONCURRENCY = 2  # model calls running at once, all users together (one GPU)
DEFAULT_MAX_SESSIONS = 16  # live sessions with an engine; beyond, the oldest idle one is dropped
SESSION_TTL_S = 900  # a session's state is freed this long after its last event (or at page close)
MAX_CLASSES = 1000  # classes in the labels box (ImageNet fits)
HISTORY_POINTS = 600  # plotted frames kept per stream (the counters cover every frame)
DISAGREEMENTS_KEPT = 8  # the newest disagreement frames kept per stream, for the strip
# The numeric controls: name -> (label, whole number, low, high). The page says each range.
CONTROLS = {
    "k": ("k (mean-shift neighbours)", True, 1, 16),
    "alpha": ("α (mean-shift weight)", False, 0.0, 1.0),
    "lam": ("λ (cache weight)", False, 0.0, 10.0),
    "capacity": ("Q (cache size per class)", True, 1, 16),
    "bank": ("Bank size (features)", True, 1, SESSION_BANK_LIMIT),
}
# the settings form, by name ("forget" last: API clients that send the earlier ones by position still fit)
FORM = ("labels", "template", "method", *CONTROLS, "race", "model", "views", "forget")
FORGET_LABEL = "Forget old scenes"
VIEWS_LABEL = f"Views per frame (1 to {MAX_VIEWS})"


class ModelSlots:
    """A fair (first come, first served) counting semaphore: `with slots(): ...` holds one slot."""

    def __init__(self, count: int):
        if count < 1:
            raise ValueError("need at least one model slot")
        self.count = count
        self._free = count
        self._queue: collections.deque[object] = collections.deque()
        self._cond = threading.Condition()

    @property
    def waiting(self) -> int:
        """Callers queued for a slot now."""
        with self._cond:
            return len(self._queue)

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


@dataclasses.dataclass(frozen=True)
class Point:
    """One processed frame as plotted; `x` is its number among processed frames (1-based)."""

    x: int
    clip_conf: float
    tta_conf: float
    agreement: float  # running %, all frames so far
    switches_clip: int  # running counts
    switches_tta: int
    accuracy_clip: float | None  # running %, labelled frames so far; None before the first
    accuracy_tta: float | None
    accuracy_methods: tuple[float | None, ...] = ()  # every raced method's running %, in race order
    gain: float | None = None  # accuracy_tta - accuracy_clip, in points


@dataclasses.dataclass(frozen=True)
class Disagreement:
    """A frame where CLIP and the (first) adapted method disagree, as the strip shows it."""

    x: int  # its number among processed frames
    clip: str
    tta: str
    truth: str | None
    thumbnail: Any = None  # a small RGB uint8 picture of the frame (None: not kept)


class History:
    """One stream's running counts (an `app.summary.Tally`, as the headless summary keeps) plus its
    last `limit` points for the plots."""

    def __init__(self, limit: int = HISTORY_POINTS):
        self.limit = limit
        self.clear()

    def clear(self) -> None:
        """Start over (a new video, new labels, new settings, Reset)."""
        self.points: collections.deque[Point] = collections.deque(maxlen=self.limit)
        self.tally = Tally()
        self.last: FrameResult | None = None
        self.disagreements: collections.deque[Disagreement] = collections.deque(maxlen=DISAGREEMENTS_KEPT)
        self.per_class: dict[str, list[int]] = {}  # true class -> [labelled, CLIP right, first method right]

    def update(
        self, result: FrameResult, truth: str | None = None, thumbnail: Any = None, frame: int | None = None
    ) -> None:
        """Add one processed frame (its result, its true class name when a truth file has one, a
        small picture of it kept while it is among the newest disagreements, its source index)."""
        t = self.tally
        t.add(result, truth, frame)
        clip_acc, tta_acc = t.accuracy("clip"), t.accuracy("tta")
        raced = tuple(100.0 * t.racers[m.method].correct / t.labelled if t.labelled else None for m in result.methods)
        self.points.append(
            Point(
                t.processed,
                float(result.clip_topk[0].prob),
                float(result.tta_topk[0].prob),
                self.agreement,
                t.switches["clip"],
                t.switches["tta"],
                clip_acc,
                tta_acc,
                raced,
                tta_acc - clip_acc if t.labelled else None,
            )
        )
        self.last = result
        if truth is not None:
            counts = self.per_class.setdefault(truth, [0, 0, 0])
            counts[0] += 1
            counts[1] += result.clip_label == truth
            counts[2] += result.tta_label == truth
        if result.disagree:  # newest first
            self.disagreements.appendleft(
                Disagreement(t.processed, result.clip_label, result.tta_label, truth, thumbnail)
            )

    @property
    def processed(self) -> int:
        return self.tally.processed

    @property
    def labelled(self) -> int:
        return self.tally.labelled

    @property
    def agreement(self) -> float:
        """% of processed frames where CLIP and the adapted method agree (0 before any frame)."""
        return self.tally.agreement or 0.0


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
        self.source: str | None = None  # what the history shows: "video:<name>" or "webcam"
        self.webcam_frames = 0
        self.webcam_started = 0.0  # monotonic time of the webcam run's first frame
        self.webcam_last = 0.0  # ... and of its latest one (the run ends when they stop coming)
        self.webcam_recording = None  # the webcam run's downloads being written
        self.last_plots = 0.0  # when the webcam last redrew the plots over time
        self.runs = 0  # videos being processed (or asked for) now (normally 0 or 1)
        self.run_id = 0  # the newest video run asked for (an older one gives way to it)
        self.created = time.monotonic()  # the page's load (an auto-started run counts from here)
        self.autostarted = False  # the page's auto-started run has begun
        self.stop_at = 0.0  # when Stop was last pressed (monotonic clock)
        self.webcam_stopped = 0.0  # when the webcam's Stop was pressed (frames in flight are dropped)
        self.expired = False  # dropped by the session cap: the user must press Reset
        self.closed = False  # the page closed or the state's time to live ran out
        self.session_hash: str | None = None
        self.truth_state = "none"  # the ground truth of the run shown: "none", "loaded" or "off"
        self.downloads = Downloads()  # the last run's annotated MP4 and JSONL log
        self.active = 0  # events of this session being handled now
        self._active_lock = threading.Lock()
        self.webcam_ended: dict | None = None  # a webcam run the server ended (its page, for the page's timer)

    def __deepcopy__(self, memo: dict) -> "UISession":
        return UISession()

    @property
    def busy(self) -> bool:
        """A video run going, or an event (a webcam frame, Apply, ...) being handled right now: such a
        session is not dropped by the cap. A webcam between two frames is idle (the cap holds in bursts)."""
        return self.runs > 0 or self.active > 0

    @contextlib.contextmanager
    def handling(self) -> Iterator[None]:
        """`with ui.handling(): ...` around one event of this session (it is busy meanwhile)."""
        with self._active_lock:
            self.active += 1
        try:
            yield
        finally:
            with self._active_lock:
                self.active -= 1

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
            self.webcam_recording = None  # closed and deleted with the session's folder below
            self.webcam_ended = None
            self.source = None
            self.downloads.close()
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
        ui.closed = False
        if ui.expired:  # dropped: not live again until its user presses Reset
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

    def live(self) -> list[UISession]:
        """The live sessions now (a copy)."""
        with self._lock:
            return list(self._live.values())

    def forget(self, key: str | None, ui: UISession | None = None) -> None:
        """The page closed or the state's time to live ran out: free the session, stop counting it."""
        with self._lock:
            found = self._live.pop(key, None) if key else None
        for one in {id(x): x for x in (found, ui) if isinstance(x, UISession)}.values():
            one.close()
            log.info("session %s freed", key)


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the settings form asks for, validated."""

    labels: tuple[str, ...]
    template: str | None
    method: str
    config: EngineConfig
    methods: tuple[str, ...] = ()  # every raced method, `method` first
    model: tuple[str, str] | None = None  # (model, pretrained); None: the server's own
    views: int | None = None  # images per frame fed to the encoder; None: the server's default

    def __post_init__(self) -> None:
        if not self.methods:
            object.__setattr__(self, "methods", (self.method,))

    @classmethod
    def from_controls(
        cls, form: Mapping[str, Any], base: EngineConfig, model: tuple[str, str] | None = None, views: int = 1
    ) -> "Settings":
        """Validate the form (values by name, `FORM`) into Settings; a one-line UserError names the
        control and its range otherwise (nothing is clamped). `model` and `views` stand for an empty
        Model box and an absent Views value (API clients that send none)."""
        from mstta.data.templates import check_templates

        from .models import parse_value

        labels = parse_labels(text_control(form.get("labels"), "Labels"), where="Labels")
        if len(labels) > MAX_CLASSES:
            raise UserError(f"Labels: {len(labels)} class names; the UI takes at most {MAX_CLASSES}")
        template = text_control(form.get("template"), "Prompt template").strip() or None
        if template is not None:
            check_templates([template], "Prompt template")
        method = parse_racer(text_control(form.get("method"), "Method"), "Method").name
        methods = race_control(method, form.get("race"))
        k, alpha, lam, capacity, bank = (number_control(form.get(name), name) for name in CONTROLS)
        try:
            config = dataclasses.replace(base, k=k, alpha=alpha, lam=lam, capacity=capacity, bank_size=bank)
        except (TypeError, ValueError) as exc:  # the config's own bounds
            raise UserError(str(exc)) from None
        forget = form.get("forget")  # None (an API client that sends none): the server's own
        config = with_forget(config, None if forget is None else text_control(forget, FORGET_LABEL), FORGET_LABEL)
        chosen = parse_value(form.get("model"), model) if model else None
        count = views if form.get("views") is None else int_control(form.get("views"), VIEWS_LABEL)
        if not 1 <= count <= MAX_VIEWS:
            raise UserError(f"{VIEWS_LABEL}: {count} is out of range; enter a whole number from 1 to {MAX_VIEWS}")
        return cls(tuple(labels), template, method, config, methods, chosen, count)


RACE_LABEL = f"Race against (up to {MAX_METHODS - 1} more methods, same frames)"


def race_control(method: str, race: Any) -> tuple[str, ...]:
    """The raced methods: `method` first, then the race box's picks (the method itself left out)."""
    if race is None or race == "":
        picks: list[str] = []
    elif isinstance(race, str):
        picks = [race]
    elif isinstance(race, (list, tuple)) and all(isinstance(x, str) for x in race):
        picks = list(race)
    else:
        raise UserError(f"{RACE_LABEL}: expected a list of method names")
    picks = [p for p in picks if p != method]
    if len(picks) >= MAX_METHODS:
        raise UserError(f"{RACE_LABEL}: {len(picks)} picked; at most {MAX_METHODS - 1} race beside the method")
    return tuple(check_methods([method, *picks], RACE_LABEL))


def text_control(value: Any, label: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise UserError(f"{label}: expected text, got {type(value).__name__}")
    return value


def _number(value: Any, label: str) -> float:
    if value is None or value == "":
        raise UserError(f"{label}: enter a number")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UserError(f"{label}: expected a number, got {type(value).__name__}")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"{label}: {str(value)[:40]!r} is not a number") from None
    if not math.isfinite(number):
        raise UserError(f"{label}: {str(value)[:40]!r} is not a finite number")
    return number


def int_control(value: Any, label: str) -> int:
    """A whole number from a control (a one-line UserError naming `label` otherwise)."""
    number = _number(value, label)
    if number != int(number):
        raise UserError(f"{label}: {value!r} is not a whole number")
    return int(number)


def number_control(value: Any, name: str) -> int | float:
    """The numeric control `name` (see `CONTROLS`), checked against its range (never clamped)."""
    label, whole, low, high = CONTROLS[name]
    number = int_control(value, label) if whole else _number(value, label)
    if not low <= number <= high:
        raise UserError(
            f"{label}: {number:g} is out of range; enter {'a whole number' if whole else 'a number'} "
            f"from {low:,g} to {high:,g}"
        )
    return number


def plural_views(views: int) -> str:
    return "1 view per frame" if views == 1 else f"{views} views per frame"


def apply_settings(
    ui: UISession, settings: Settings, new_stream: Callable[[Settings], StreamSession], restart: bool = False
) -> str | None:
    """Bring the session in line with `settings`; returns a note when the engine restarted.

    `restart` (the Apply button) restarts the engine even when nothing changed. The new classifier
    is built before anything is replaced, so a failure leaves the session as it was.
    `new_stream(settings)` makes the first StreamSession of a session.
    """
    if ui.stream is None:
        ui.stream = new_stream(settings)
        ui.restart_history(ui.source)
        return None
    stream, changed = ui.stream, []
    key = getattr(stream, "model_key", None)
    if (settings.model is not None and settings.model != key) or settings.views not in (None, stream.encoder.views):
        ui.stream = new_stream(settings)  # made before replacing: a failure leaves the session as it was
        ui.restart_history(ui.source)
        views = plural_views(ui.stream.encoder.views)
        if ui.stream.clip is stream.clip:
            return f"Now {views}: the adaptation started afresh."
        return f"New model {ui.stream.clip.name} ({ui.stream.clip.pretrained}), {views}: the adaptation started afresh."
    if list(settings.labels) != stream.labels or settings.template != stream.template:
        stream.set_labels(settings.labels, settings.template)
        changed.append(f"{len(settings.labels)} classes")
    if list(settings.methods) != stream.method_names or settings.config != stream.config:
        stream.configure(config=settings.config, methods=settings.methods)
        changed.append(" vs ".join(m.title for m in stream.methods) + " settings")
    if not changed and not restart:
        return None
    if not changed:
        stream.reset()
    ui.restart_history(ui.source)
    if not changed:
        return "Same labels and settings: the adaptation started afresh (empty cache and bank)."
    return "New " + " and ".join(changed) + ": the adaptation started afresh."
