"""The cache family's switches are its own (issue 30): each row carries them as `Method.settings`
(`families.cache.Switches`), its runner takes the family's `Params` once, and no other code reads
the switches: callers ask the row (`Method.stateful`, `keeps_cache`, `boosting_views`)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import torch

from mstta import Engine, EngineConfig, UserError, get_method, list_methods, replay
from mstta.engine import functional as Fn
from mstta.engine.families import cache
from mstta.engine.families.base import Method, RowSettings

ROOT = Path(__file__).resolve().parent.parent
SWITCHES = {f for f in cache.Switches.__dataclass_fields__}
# The switches' readers: the family (its rows and `Switches`), its runner and its vectorised replay.
READERS = {"mstta/engine/families/cache.py", "mstta/engine/cache_runner.py", "mstta/engine/replay.py"}


def test_every_cache_row_carries_its_switches_and_answers_through_them():
    for row in cache.METHODS:
        sw = row.settings
        assert isinstance(sw, cache.Switches) and cache.switches(row) is sw
        assert (row.stateful, row.keeps_cache, row.boosting_views) == (sw.cache, sw.cache, sw.boost)
    others = [get_method(n) for n in list_methods() if get_method(n).family != cache.NAME]
    assert others and all(type(m.settings) is RowSettings for m in others)
    assert all(m.stateful == (not m.episodic) and not m.keeps_cache and not m.boosting_views for m in others)


def test_no_code_but_the_family_reads_the_switches():
    """An attribute named like a switch (`m.boost`, `sw.cache`) is read by the family's own files only."""
    found = []
    for folder in ("app", "mstta", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in READERS:
                continue
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if isinstance(node, ast.Attribute) and node.attr in SWITCHES:
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert SWITCHES == {"cache", "negative", "boost", "neg_policy"}
    assert not found, "ask the row (Method.stateful, keeps_cache, boosting_views) instead:\n" + "\n".join(found)


def test_a_cache_row_without_switches_is_refused_and_all_off_is_zero_shot():
    torch.manual_seed(0)
    text, feats = Fn.normalize(torch.randn(5, 16)), Fn.normalize(torch.randn(40, 16))
    bare = Method(name="bare", title="Bare", summary="a cache-family row with no switches")
    for run in (lambda: Engine(text, bare), lambda: replay(feats, text, bare)):
        with pytest.raises(UserError, match=r"method 'bare' of the cache family has no switches: give it settings="):
            run()
    off = dataclasses.replace(bare, settings=cache.Switches())
    assert not off.stateful and not off.keeps_cache and not off.boosting_views
    engine = Engine(text, off)
    steps = [engine.step(f) for f in feats]
    assert all(torch.equal(s.logits, s.clip_logits) for s in steps) and engine.pos is None
    assert (replay(feats, text, off).predictions == replay(feats, text, "zero-shot").predictions).all()


def test_a_switch_value_is_checked():
    with pytest.raises(UserError, match=r"bad value for 'neg_policy': 'lifo'; expected one of entropy, fifo"):
        cache.Switches(cache=True, negative=True, neg_policy="lifo")


def test_the_runner_takes_the_family_params_once_from_the_top_level_keys():
    text = Fn.normalize(torch.randn(4, 8))
    cfg = EngineConfig(capacity=5, neg_capacity=1, lam=2.5)
    engine = Engine(text, "tda", cfg)
    p = engine.runner.p
    assert isinstance(p, cache.Params) and p == cfg.family_params("cache")
    assert (p.capacity, p.neg_capacity, p.lam) == (5, 1, 2.5)
    assert engine.pos.ent.shape[-1] == 5 and engine.neg.ent.shape[-1] == 1  # the caches sized from them
    engine.step(Fn.normalize(torch.randn(8)))
    assert engine.runner.p is p  # read once, at construction: no Params built per step
