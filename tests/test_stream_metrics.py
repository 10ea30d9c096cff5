"""The streams benchmark's metrics (mstta/benchmark/streammetrics.py) on hand-checked cases."""

from __future__ import annotations

import numpy as np
import pytest

from mstta.bench import streammetrics as SM


def test_segment_accuracy():
    correct = np.array([1, 1, 0, 0, 1, 0, 1, 1], bool)
    assert SM.segment_accuracy(correct, (0, 2, 6)) == [100.0, 25.0, 100.0]


def test_windowed_restarts_at_its_start():
    correct = np.array([1, 1, 1, 0, 0, 1], bool)
    # from step 3 on: [0], [0, 0], [0, 0, 1] with window 2 -> 0, 0, 50
    assert SM.windowed(correct, 3, 6, 2).tolist() == [0.0, 0.0, 50.0]
    assert SM.windowed(correct, 0, 3, 10).tolist() == [100.0, 100.0, 100.0]


def test_curve_before_and_after_a_cut():
    correct = np.array([1, 1, 1, 1, 0, 0, 1, 1], bool)
    c = SM.curve(correct, cut=4, before=2, after=4, window=2)
    assert c.tolist() == [100.0, 100.0, 0.0, 0.0, 50.0, 100.0]
    assert SM.curve(correct, 4, 10, 1, 2, since=3).tolist() == [100.0, 0.0]  # the previous segment starts at 3


def test_recovery_needs_the_arm_to_stay_within_tolerance():
    oracle = np.array([80, 80, 80, 80, 80, 80.0])
    arm = np.array([50, 79.5, 60, 79.2, 80, 81.0])
    assert SM.recovery(arm, oracle, 1.0, hold=1) == 1
    assert SM.recovery(arm, oracle, 1.0, hold=3) == 3
    assert SM.recovery(arm - 5, oracle, 1.0) is SM.NOT_RECOVERED
    assert SM.recovery(oracle, oracle) == 0


def test_regret_over_the_steps_after_a_cut():
    oracle = np.array([1, 1, 1, 1, 1, 1], bool)
    arm = np.array([0, 0, 0, 1, 0, 1], bool)
    assert SM.regret(arm, oracle, cut=2, steps=2) == pytest.approx(50.0)  # steps 2, 3
    assert SM.regret(arm, oracle, cut=2, steps=100, end=5) == pytest.approx(100 * (1 - 1 / 3))


def test_gain_recovered():
    assert SM.gain_recovered(arm=71.0, never=70.0, oracle=72.0) == pytest.approx(50.0)
    assert SM.gain_recovered(72.0, 70.0, 72.0) == pytest.approx(100.0)
    assert SM.gain_recovered(70.0, 70.0, 70.0) is None


def test_stale_share_weighs_slots_by_insertion_time():
    weights = np.array([1.0, 3.0, 2.0, 5.0])
    times = np.array([3, 10, -1, 12])  # slot 2 is empty: no weight whatever the kernel says
    assert SM.stale_share(weights, times, last_cut=10) == pytest.approx(1 / 9)
    assert SM.stale_share(weights, times, last_cut=0) == 0.0
    assert SM.stale_share(np.zeros(4), times, 10) == 0.0


def test_detections_delay_and_false_cuts():
    got = SM.detections(np.array([5, 104, 150, 320]), cuts=(100, 300), n=1000, within=30)
    assert got["delays"] == [4, 20]
    assert got["false"] == 2 and got["false_per_10k"] == pytest.approx(20.0)
    late = SM.detections(np.array([140]), cuts=(100,), n=200, within=30)
    assert late["delays"] == [None] and late["false"] == 1
    # a detection inside the window but past the next true cut belongs to that cut
    near = SM.detections(np.array([110]), cuts=(100, 105), n=200, within=30)
    assert near["delays"] == [None, 5] and near["false"] == 0
