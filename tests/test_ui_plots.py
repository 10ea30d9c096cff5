"""The UI's server-drawn charts and page text (app/ui/plots.py): pure functions, no Gradio, no browser."""

from __future__ import annotations

import re

import pytest
from helpers_ui import bar_values, series_points

from app.session import FrameResult, Scored
from app.ui import plots
from app.ui.state import History

LABELS = ["cat", "dog", "bird"]


def result(clip: int, tta: int, prob: float = 0.6, fill=(0, 0, 0)) -> FrameResult:
    def top(i):
        return [Scored(LABELS[i], i, prob), Scored(LABELS[(i + 1) % 3], (i + 1) % 3, 1 - prob)]

    return FrameResult(
        clip_topk=top(clip),
        tta_topk=top(tta),
        entropy=0.5,
        cache_size=sum(fill),
        cache_capacity=9,
        bank_rows=1,
        latency_ms=1.0,
        method="ms-tta",
        cache_per_class=list(fill),
    )


def test_history_keeps_a_bounded_window_but_counts_everything():
    h = History(limit=5)
    for i in range(12):
        h.update(result(i % 3, 0))
    assert len(h.points) == 5 and h.processed == 12 and [p.x for p in h.points] == [8, 9, 10, 11, 12]


@pytest.mark.parametrize(
    "low, high, integer, expected",
    [
        (0, 1, False, [0, 0.25, 0.5, 0.75, 1]),
        (0, 100, False, [0, 25, 50, 75, 100]),
        (0, 3, True, [0, 1, 2, 3]),
        (0, 1, True, [0, 1]),
        (1, 30, True, [10, 20, 30]),
        (0, 7, True, [0, 2, 4, 6]),
    ],
)
def test_nice_ticks(low, high, integer, expected):
    assert plots.nice_ticks(low, high, 5, integer) == expected


def test_line_charts_carry_their_data_and_axis_titles():
    h = History()
    empty = plots.confidence_chart(h, "MS-TTA")
    assert series_points(empty) == {"CLIP zero-shot": 0, "MS-TTA": 0}, "an empty history draws axes only"
    assert "processed frames" in empty and "top-1 probability" in empty
    h.update(result(0, 0))
    one = plots.confidence_chart(h, "MS-TTA")
    assert series_points(one) == {"CLIP zero-shot": 1, "MS-TTA": 1} and one.count("<circle") == 2
    for i in range(9):
        h.update(result(i % 3, 0, fill=(1, 2, 0)))
    chart = plots.confidence_chart(h, "MS-TTA")
    assert series_points(chart) == {"CLIP zero-shot": 10, "MS-TTA": 10}
    points = re.search(r'data-series="MS-TTA" data-points="10" points="([^"]+)"', chart).group(1).split()
    assert len(points) == 10 and "NaN" not in chart
    assert "stroke-dasharray" in chart.split('data-series="CLIP zero-shot"')[1].split("/>")[0], "CLIP dashed"
    agreement = plots.agreement_chart(h, "MS-TTA")
    assert series_points(agreement) == {"agreement": 10} and plots.AGREEMENT_COLOR in agreement
    assert plots.ADAPTED_COLOR not in agreement, "agreement has a colour of its own"


def test_switch_and_cache_ticks_are_whole_numbers():
    h = History()
    for i in range(7):
        h.update(result(i % 3, 0))
    switches = plots.switches_chart(h, "MS-TTA")
    ticks = re.findall(r'class="tick y"[^>]*>([^<]+)<', switches)
    assert ticks and all(t.isdigit() for t in ticks), ticks
    assert int(ticks[-1]) >= max(h.tally.switches.values()), "the axis reaches the largest count"
    cache = plots.cache_chart(LABELS, [3, 1, 0], 3, "cache")
    assert bar_values(cache) == {"cat": 3.0, "dog": 1.0, "bird": 0.0}
    assert re.findall(r'class="tick"[^>]*>([^<]+)<', cache) == ["0", "1", "2", "3"]
    assert 'style="width:100.0%' in cache and 'style="width:0.0%' in cache


def test_cache_chart_shows_the_fullest_classes_when_there_are_many():
    names = [f"c{i}" for i in range(100)]
    chart = plots.cache_chart(names, [i % 4 for i in range(100)], 3, "cache", limit=10)
    values = bar_values(chart)
    assert len(values) == 10 and set(values.values()) == {3.0}


def test_page_text():
    assert "No frame processed yet" in plots.verdict_html(None)
    assert "DISAGREE" in plots.verdict_html(result(0, 1)) and "Agree" in plots.verdict_html(result(1, 1))
    h = History()
    h.update(result(0, 0), "cat")
    summary = plots.run_summary(h, 0.5, "MS-TTA")
    assert summary.startswith("1 frame processed in 0.5 s (1.0 ms per frame)") and "accuracy CLIP 100.0%" in summary
    assert plots.progress_bar(5, 10).endswith("50%") and plots.progress_bar(5, None) == ""
    assert "Random weights — predictions are meaningless" in plots.RANDOM_WEIGHTS_HTML
    assert "<u>" not in plots.verdict_html(result(0, 1)), "class names must not look like links"


def test_the_accuracy_plot_says_what_ground_truth_the_run_has():
    h = History()
    assert "no ground-truth CSV for this run" in plots.accuracy_chart(h, "MS-TTA", "none")
    assert "ground truth loaded, no labelled frame yet" in plots.accuracy_chart(h, "MS-TTA", "loaded")
    assert "names classes the labels lack" in plots.accuracy_chart(h, "MS-TTA", "off")
    assert "the webcam has no ground truth" in plots.accuracy_chart(h, "MS-TTA", "webcam")
    h.update(result(0, 0), "cat")
    assert "Running accuracy (labelled frames)" in plots.accuracy_chart(h, "MS-TTA", "loaded")


def test_stats_show_views_and_the_per_frame_cost():
    class Stream:
        method = __import__("mstta.engine.methods", fromlist=["get_method"]).get_method("ms-tta")
        config = __import__("mstta.engine.config", fromlist=["EngineConfig"]).EngineConfig(bank_size=16)

    h = History()
    h.update(result(0, 0))
    one = plots.stats_markdown(h, Stream(), 10.0)
    assert "1.0 ms per frame" in one and "views" not in one
    four = plots.stats_markdown(h, Stream(), 10.0, views=4, skipped=3)
    assert "1.0 ms per frame (4 views)" in four and "3 frames skipped to keep real time" in four


def test_one_speed_figure_defined_once():
    """The numbers line and the run's summary give the same speed: the model's mean ms per frame
    over the run (not the last frame's, and no fps beside it)."""
    import dataclasses

    class Stream:
        method = __import__("mstta.engine.methods", fromlist=["get_method"]).get_method("ms-tta")
        config = __import__("mstta.engine.config", fromlist=["EngineConfig"]).EngineConfig(bank_size=16)

    h = History()
    for _i, ms in enumerate((10.0, 30.0, 20.0)):
        h.update(dataclasses.replace(result(0, 0), latency_ms=ms))
    stats, summary = plots.stats_markdown(h, Stream(), 99.0), plots.run_summary(h, 2.0, "MS-TTA")
    assert "20.0 ms per frame" in stats and "20.0 ms per frame" in summary
    assert "fps" not in stats and "fps" not in summary
