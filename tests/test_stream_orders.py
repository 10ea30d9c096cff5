"""The stream orders of `mstta-bench streams` (mstta/benchmark/streamorders.py) against the
semantics of StatA's online sampler (MaxZanella/StatA sampler.py:109-134) and of the scene streams."""

from __future__ import annotations

import numpy as np
import pytest

from mstta.bench import streamorders as SO
from mstta.errors import UserError


def label_changes(labels: np.ndarray) -> int:
    return int((np.diff(labels) != 0).sum())


def test_iid_is_a_seeded_permutation():
    a, b, c = SO.iid(50, 1), SO.iid(50, 1), SO.iid(50, 2)
    assert sorted(a.tolist()) == list(range(50))
    assert (a == b).all() and not (a == c).all()


def test_dirichlet_one_slot_is_a_shuffle_of_everything():
    labels = np.repeat(np.arange(4), 10)
    slots = SO.dirichlet_slots(labels, 0.1, np.random.default_rng(0), slots=1)
    assert len(slots) == 1 and sorted(slots[0].tolist()) == list(range(40))


def test_dirichlet_splits_each_class_in_stored_order_across_slots():
    """Each class's samples go to the slots as consecutive runs of its stored order (np.split), the
    first run to slot 0: read back slot by slot, a class's indices ascend."""
    labels = np.tile(np.arange(3), 20)  # class c at c, c+3, c+6, ...
    slots = SO.dirichlet_slots(labels, 0.5, np.random.default_rng(3))
    assert len(slots) == 3  # one slot per class (batch size 1)
    assert sorted(np.concatenate(slots).tolist()) == list(range(60))
    for c in range(3):
        runs = [np.sort(s[labels[s] == c]) for s in slots]
        joined = np.concatenate(runs)
        assert (joined == np.flatnonzero(labels == c)).all()


def test_dirichlet_huge_gamma_spreads_every_class_evenly():
    labels = np.repeat(np.arange(4), 100)
    slots = SO.dirichlet_slots(labels, 1e6, np.random.default_rng(0))
    for s in slots:
        counts = np.bincount(labels[s], minlength=4)
        assert np.all(np.abs(counts - 25) <= 1)


def test_lower_gamma_correlates_labels_more():
    labels = np.repeat(np.arange(10), 60)
    changes = {g: np.mean([label_changes(labels[SO.dirichlet(labels, g, s)]) for s in range(3)]) for g in SO.GAMMAS}
    iid = np.mean([label_changes(labels[SO.iid(600, s)]) for s in range(3)])
    assert iid > changes[0.1] > changes[0.001]


def test_tiny_gamma_puts_each_class_in_one_slot():
    """Dirichlet(0.001) is nearly one-hot: most of every class lands in one slot (classes sharing a
    slot are interleaved by its permutation, as in StatA); with gamma 10 no slot holds most of a class."""
    labels = np.repeat(np.arange(6), 40)
    for gamma, low in ((0.001, True), (10.0, False)):
        slots = SO.dirichlet_slots(labels, gamma, np.random.default_rng(5))
        top = [max(int((labels[s] == c).sum()) for s in slots) for c in range(6)]
        assert all(t >= 36 for t in top) if low else all(t < 20 for t in top)


def test_separate_is_one_class_after_another():
    labels = np.repeat(np.arange(5), 7)
    order = SO.separate(labels, 4)
    assert sorted(order.tolist()) == list(range(35))
    assert label_changes(labels[order]) == 4


@pytest.mark.parametrize("kind, domains", [("cut", (0, 1)), ("return", (0, 1, 0)), ("chain", (0, 1, 2, 3))])
def test_scene_streams_segments(kind, domains):
    sizes = [30, 20, 25, 15]
    labels = [np.arange(n) % 3 for n in sizes]
    s = SO.build(kind, labels, 7, lead=10, segment=12)
    offsets = np.cumsum([0] + sizes[:-1])
    assert s.domains == domains and s.starts[0] == 0 and len(s.cuts) == len(domains) - 1
    assert len(set(s.order.tolist())) == len(s.order)  # a sample is never shown twice
    for (a, b), d in zip(s.segments(), domains):
        assert b - a == (10 if a == 0 else 12)
        assert ((s.order[a:b] >= offsets[d]) & (s.order[a:b] < offsets[d] + sizes[d])).all()


def test_scene_segment_capped_by_what_the_domain_has_left():
    s = SO.scene([12, 5], (0, 1, 0), lead=8, segment=100, seed=0, kind="return")
    assert [b - a for a, b in s.segments()] == [8, 5, 4]
    with pytest.raises(UserError, match="no samples left"):
        SO.scene([8, 5], (0, 1, 0), lead=8, segment=100, seed=0, kind="return")


def test_label_orders_stay_in_their_domain():
    labels = [np.arange(10) % 2, np.arange(6) % 2]
    s = SO.build("separate", labels, 0, 1, 1, domain=1)
    assert sorted(s.order.tolist()) == list(range(10, 16)) and s.cuts == ()
    with pytest.raises(UserError, match="unknown stream"):
        SO.build("sorted", labels, 0, 1, 1)
