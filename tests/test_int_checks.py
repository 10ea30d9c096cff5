"""One integer-range check (`mstta.checks.int_in`) behind every integer flag and argument: each site
refuses a bool, a float, a string and a value outside its range with the same one-line wording,
"NAME VALUE: expected an integer >= LOW" or "... in [LOW, HIGH]"."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from app.encoder import check_views
from app.pipeline import demo_engine_config
from app.sampling import Sampler
from app.ui.serving import resolve_port
from mstta import Engine, MultiEngine
from mstta.bench.metrics import MAX_ECE_BINS, ece
from mstta.bench.streamrun import MAX_STEPS, StreamOptions
from mstta.checks import int_in, int_range, is_int_in
from mstta.errors import UserError
from mstta.features.views import MAX_VIEWS

WORDING = re.compile(r"^(?P<name>\S+) (?P<value>.+): expected an integer (>= [\d,]+|in \[[\d,]+, [\d,]+\])")


def _text() -> torch.Tensor:
    return torch.nn.functional.normalize(torch.randn(3, 8, generator=torch.Generator().manual_seed(0)), dim=-1)


# (name the message must carry, low, high or None, call with a value)
SITES = [
    ("--every", 1, None, lambda v: Sampler(v)),
    ("--views", 1, MAX_VIEWS, check_views),
    ("--bank-size", 1, None, lambda v: demo_engine_config(v, [])),
    ("--ece-bins", 1, MAX_ECE_BINS, lambda v: ece(np.full((2, 2), 0.5), np.zeros(2, dtype=int), v)),
    ("streams", 1, None, lambda v: MultiEngine(_text(), "ms-tta", streams=v)),
    ("stream_length", 1, None, lambda v: Engine(_text(), "zero", stream_length=v)),
    ("--port", 0, 65535, lambda v: resolve_port("127.0.0.1", v)),
    ("--lead", 1, MAX_STEPS, lambda v: StreamOptions(methods=["ms-tta"], lead=v)),
    ("--window", 1, 10_000, lambda v: StreamOptions(methods=["ms-tta"], window=v)),
]


KINDS = ["below", "above", "bool", "float", "string"]
CASES = [(*site, kind) for site in SITES for kind in KINDS if kind != "above" or site[2] is not None]


@pytest.mark.parametrize("name, low, high, call, kind", CASES, ids=[f"{c[0]}-{c[4]}" for c in CASES])
def test_every_site_refuses_in_one_wording(name, low, high, call, kind):
    bad = {"below": low - 1, "above": (high or 0) + 1, "bool": True, "float": float(low), "string": str(low)}[kind]
    with pytest.raises(UserError) as err:
        call(bad)
    message = str(err.value)
    m = WORDING.match(message)
    assert m and m["name"] == name, message
    assert int_range(low, high) in message
    assert "\n" not in message


@pytest.mark.parametrize("name, low, high, call", SITES, ids=[s[0] for s in SITES])
def test_every_site_takes_its_bounds(name, low, high, call):
    call(low)
    if high is not None and high <= 64:
        call(high)


def test_int_in_bounds_and_wording():
    assert int_in(5, "--n", 1, 5) == 5 and int_in(0, "--n", 0) == 0
    assert is_int_in(2**70, 0) and not is_int_in(2**70, 0, 2**63 - 1)
    assert not is_int_in(False, 0) and not is_int_in(1.0, 0) and not is_int_in(None, 0)
    with pytest.raises(UserError, match=r"^--n 0: expected an integer in \[1, 65,536\] \(hint\)$"):
        int_in(0, "--n", 1, 65536, " (hint)")
    with pytest.raises(UserError, match=r"^--n an integer of 20,001 bits: expected an integer in \[1, 9\]$"):
        int_in(2**20000, "--n", 1, 9)
    with pytest.raises(UserError, match=r"^--n 'xxxxx.*\.\.\..*: expected an integer >= 1$"):
        int_in("x" * 10_000, "--n", 1)
