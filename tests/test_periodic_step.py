"""RDumb's periodic reset on an eager cache-family step (`forget.rule=periodic`): the host knows when it
comes (the device clock is the host's count of samples seen), so the step runs the reset's ops at the
reset steps only, and equals the float64 reference there and between them."""

from __future__ import annotations

import numpy as np
import reference_forget
import torch
from helpers_reference import reference_config
from test_forget import cut_stream

from mstta import Engine, get_method
from mstta.engine import cache
from mstta.engine.forget import ForgetConfig


def test_an_eager_periodic_step_resets_only_at_its_resets(monkeypatch):
    f, t = cut_stream()
    cfg = reference_config({"forget": ForgetConfig("periodic", every=45), "bank_size": 30})
    calls, now = [], [0]  # the steps at which a reset op ran; the step running
    for record in (cache.Cache, cache.Bank):
        real = record.forget
        monkeypatch.setattr(record, "forget", lambda self, *a, _r=real, **k: calls.append(now[0]) or _r(self, *a, **k))
    engine = Engine(t, "tda+ms", cfg)
    results = []
    for i, x in enumerate(f):
        now[0] = i
        results.append(engine.step(x))
    assert sorted(set(calls)) == [45, 90, 135] and len(calls) == 9  # the bank and both caches, three times
    assert [r.cut for r in results] == [s > 0 and s % 45 == 0 for s in range(len(f))]
    ref, _ = reference_forget.run(f.numpy(), t.numpy(), get_method("tda+ms"), cfg)
    online = torch.stack([r.logits for r in results]).numpy()
    assert np.array_equal(online.argmax(1), ref.argmax(1))
    np.testing.assert_allclose(online, ref, rtol=1e-4, atol=1e-3)
