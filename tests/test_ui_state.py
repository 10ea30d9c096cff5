"""The UI's shared state (app/ui/state.py): fair model slots, the session cap, controls as Settings."""
from __future__ import annotations

import threading
import time

import pytest

from app.ui.state import MAX_BANK_SIZE, ModelSlots, Sessions, UISession, read_settings
from mstta.config import EngineConfig
from mstta.errors import UserError


def test_model_slots_bound_concurrency_and_serve_in_arrival_order():
    slots = ModelSlots(1)
    order, inside, most = [], [0], [0]
    lock = threading.Lock()
    gate = threading.Event()

    def work(name):
        with slots():
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            order.append(name)
            if name == "first":
                gate.wait(5)
            time.sleep(0.01)
            with lock:
                inside[0] -= 1

    first = threading.Thread(target=work, args=("first",))
    first.start()
    while not order:
        time.sleep(0.001)
    waiters = []
    for i in range(5):   # queue up one by one, so arrival order is known
        t = threading.Thread(target=work, args=(f"w{i}",))
        t.start()
        waiters.append(t)
        deadline = time.monotonic() + 5
        while len(slots._queue) < i + 1 and time.monotonic() < deadline:
            time.sleep(0.001)
    gate.set()
    for t in [first, *waiters]:
        t.join(10)
    assert most[0] == 1
    assert order == ["first", "w0", "w1", "w2", "w3", "w4"]


def test_sessions_beyond_the_cap_drop_the_oldest_idle_one():
    sessions = Sessions(limit=2)
    a, b, c = UISession(), UISession(), UISession()
    a.stream = b.stream = c.stream = object()   # stand-ins for engines
    b.runs = 1                                 # b is streaming: never dropped while busy
    for key, ui in (("a", a), ("b", b), ("c", c)):
        sessions.touch(ui, key)
    assert len(sessions) == 2 and a.expired and a.stream is None and not b.expired and not c.expired
    sessions.touch(a, "a")                     # an expired session is not live again until Reset
    assert len(sessions) == 2 and a.expired
    sessions.forget("c")
    assert c.stream is None and c.closed and len(sessions) == 1


def test_settings_bound_the_bank_and_name_the_control():
    base = EngineConfig(bank_size=4096)
    ok = read_settings("cat\ndog", "", "ms-tta", 2, 0.5, 1.0, 3, MAX_BANK_SIZE, base)
    assert ok.labels == ("cat", "dog") and ok.config.bank_size == MAX_BANK_SIZE
    with pytest.raises(UserError, match=f"Bank size {MAX_BANK_SIZE + 1}: the UI keeps 1 to 16,384"):
        read_settings("cat\ndog", "", "ms-tta", 2, 0.5, 1.0, 3, MAX_BANK_SIZE + 1, base)
    with pytest.raises(UserError, match="k: 2.5 is not a whole number"):
        read_settings("cat\ndog", "", "ms-tta", 2.5, 0.5, 1.0, 3, 16, base)
    with pytest.raises(UserError, match="alpha: 'nan' is not a finite number"):
        read_settings("cat\ndog", "", "ms-tta", 2, "nan", 1.0, 3, 16, base)


def test_controls_that_do_nothing_for_a_method_say_why():
    from app.ui.handlers import method_info

    summary, unused = method_info("ms-tta")
    assert "mean shift" in summary and not any(unused.values())
    _, unused = method_info("tda")
    assert unused["k"] == unused["alpha"] == unused["bank"] == "Unused: TDA has no mean shift"
    assert unused["lam"] == unused["capacity"] == ""
    _, unused = method_info("zero-shot")
    assert unused["lam"] == unused["capacity"] == "Unused: CLIP (zero-shot) keeps no cache"
