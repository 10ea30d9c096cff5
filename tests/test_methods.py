"""The method registry: the paper's order, one title and summary each, clear errors."""

from __future__ import annotations

import pytest

from mstta import UserError, get_method, list_methods
from mstta.engine.families.cache import switches


def test_paper_order_with_the_boost_readings():
    assert list_methods()[:9] == [
        "zero-shot",
        "tda",
        "boostadapter",
        "ms-tta",
        "ms-tta+boost",
        "baseline",
        "baseline+boost",
        "tda+ms",
        "boostadapter+ms",
    ]


def test_titles_and_summaries_are_one_line_and_unique():
    titles = [get_method(m).title for m in list_methods()]
    assert len(set(titles)) == len(titles)
    for m in list_methods():
        meth = get_method(m)
        assert meth.name == m and meth.title.strip() and meth.summary.strip()
        assert "\n" not in meth.title + meth.summary


def test_switches_follow_the_names():
    for m in list_methods():
        meth = get_method(m)
        assert meth.mean_shift == (m.endswith("+ms") or m.startswith("ms-tta"))
        sw = switches(meth) if meth.family == "cache" else None
        assert meth.boosting_views == ("boost" in m) == (sw is not None and sw.boost)
        assert sw is None or sw.negative == m.startswith(("tda", "boostadapter"))
        assert meth.keeps_cache == (meth.family == "cache" and m != "zero-shot") == (sw is not None and sw.cache)
        assert sw is None or sw.neg_policy == ("fifo" if m.startswith("boostadapter") else "entropy")
        assert meth.stateful == (m != "zero-shot" and not meth.episodic)


def test_unknown_method_lists_the_choices():
    with pytest.raises(UserError, match=r"unknown method 'msta'; choose one of: zero-shot, tda, .*boostadapter\+ms"):
        get_method("msta")
