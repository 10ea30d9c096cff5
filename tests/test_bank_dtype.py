"""`bank_dtype`: a float16/bfloat16 bank (half the bytes, similarities accumulated in float32)
predicts as the exact float32 bank on >= 99.9% of the reference streams' samples; online equals
replay for it too; float32 stays the exact path (tests/test_reference.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from helpers_family import feature_methods
from helpers_reference import CASES, reference_config, reference_stream

from mstta import Engine, EngineConfig, UserError, get_method, replay

MS_METHODS = [m for m in feature_methods() if get_method(m).mean_shift]


@pytest.mark.parametrize("bank_dtype", ["float16", "bfloat16"])
def test_agreement_with_float32_on_the_reference_streams(bank_dtype):
    agree = total = 0
    for views, overrides in CASES.values():
        for seed in (11,):
            f, t = reference_stream(views, seed=seed, n=200)
            cfg = reference_config(overrides)
            for method in MS_METHODS:
                exact = replay(f, t, method, cfg).predictions
                half = replay(f, t, method, dataclasses.replace(cfg, bank_dtype=bank_dtype)).predictions
                agree += int((exact == half).sum())
                total += len(exact)
    assert total == 6 * 200 * len(MS_METHODS)
    assert agree / total >= 0.999, f"{bank_dtype}: {agree}/{total}"


@pytest.mark.parametrize("bank_dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("method", ["ms-tta", "tda+ms", "boostadapter+ms"])
def test_reduced_bank_online_equals_replay(bank_dtype, method):
    views, overrides = CASES["views-two-steps-ring"]
    f, t = reference_stream(views, seed=5)
    cfg = reference_config({**overrides, "bank_dtype": bank_dtype})
    online = replay(f, t, method, cfg, online=True)
    fast = replay(f, t, method, cfg, chunk=16)
    assert np.array_equal(online.predictions, fast.predictions)
    np.testing.assert_allclose(online.confidence, fast.confidence, atol=1e-5)


def test_the_bank_is_stored_reduced_and_the_rest_in_float32():
    text = torch.nn.functional.normalize(torch.randn(4, 8), dim=-1)
    eng = Engine(text, "tda+ms", EngineConfig(bank_dtype="bfloat16", bank_size=16))
    r = eng.step(torch.randn(8))
    assert eng.bank.rows.dtype == torch.bfloat16 and eng.bank.norm.dtype == torch.float32
    assert eng.pos.keys.dtype == torch.float32 and r.logits.dtype == torch.float32


def test_bank_dtype_is_validated():
    with pytest.raises(UserError, match="bank_dtype"):
        EngineConfig(bank_dtype="int8")
