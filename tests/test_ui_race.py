"""Racing methods in the browser UI's server (gradio_client, loopback, `mstta-tiny`): the race box,
the live leaderboard, every method's running accuracy on one plot, the gain plot with its fixed ·
broke counts, per-class accuracy and the strip of disagreement frames."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from helpers_ui import SETTINGS, client, launched, named, series_points, video_args, write_truth
from helpers_video import LABELS, tiny_clip, write_video

from mstta.engine.methods import get_method

RACE = ["tda", "zero-shot", "tda+ms"]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from app.ui import build_app

    demo = build_app(tiny_clip(), labels=LABELS, update_interval=0, offer_demo_clip=False)
    folder = tmp_path_factory.mktemp("race")
    with launched(demo) as url:
        yield SimpleNamespace(
            demo=demo,
            url=url,
            video=write_video(folder / "clip.avi", n=24, size=(96, 64)),
            truth=write_truth(folder / "truth.csv", n=24),
        )


def _run(app, race, truth=True):
    c = client(app.url)
    settings = [*SETTINGS[:6], race, *SETTINGS[7:]]
    job = c.submit(
        *video_args(app.video, truth=app.truth if truth else None, every=2, settings=settings),
        api_name="/process_video",
    )
    job.result(timeout=180)
    return [named(o) for o in job.outputs()]


def _board(page: dict) -> list[str]:
    return re.findall(r'<tr data-method="([^"]+)"', page["leaderboard"])


def test_a_race_of_four_shows_every_method_live(app):
    outs = _run(app, RACE)
    last = outs[-1]
    names = ["ms-tta", *RACE]
    assert sorted(_board(last)) == sorted(["clip", *names])
    assert [m["method"] for m in last["result"]["methods"]] == names
    titles = [get_method(n).title for n in names]
    points = series_points(last["accuracy"])
    assert set(points) == {"CLIP zero-shot", *titles} and all(v == 12 for v in points.values())
    assert "fixed" in last["gain"] and series_points(last["gain"]) == {f"{t} − CLIP": 12 for t in titles}
    rows = re.findall(r"<td>([\d.]+)%</td>", last["leaderboard"])
    assert len(rows) >= 2 * len(names)  # accuracy and agreement for every method
    assert "Per-class accuracy" in last["per_class"] and 'data-class="red circle · CLIP' in last["per_class"]


def test_more_than_three_raced_beside_the_method_is_one_line(app):
    outs = _run(app, ["tda", "zero-shot", "tda+ms", "baseline"])
    assert "at most 3 race beside the method" in outs[-1]["status"]


def test_the_disagreement_strip_is_newest_first_with_the_truth(app):
    from app.session import FrameResult, MethodResult, Scored
    from app.ui import plots
    from app.ui.state import History

    h = History()

    def result(clip, tta):
        top = [Scored(clip, LABELS.index(clip), 0.9)]
        other = [Scored(tta, LABELS.index(tta), 0.9)]
        return FrameResult(top, other, 0.1, 0, 0, 0, 1.0, methods=[MethodResult("ms-tta", other, 0.5)])

    h.update(result(LABELS[0], LABELS[1]), LABELS[1], "data:image/jpeg;base64,AA==")  # fixed
    h.update(result(LABELS[0], LABELS[0]), LABELS[0])  # agree: not in the strip
    h.update(result(LABELS[0], LABELS[2]), LABELS[0], "data:image/jpeg;base64,AA==")  # broke
    strip = plots.disagreement_strip(h, "MS-TTA")
    assert re.findall(r'class="item ?(\w*)" data-frame="(\d+)"', strip) == [("broke", "3"), ("fixed", "1")]
    assert strip.count('tabindex="0"') == 2 and f"truth <b>{LABELS[1]}</b>" in strip
    assert h.tally.racers["ms-tta"].fixed == 1 and h.tally.racers["ms-tta"].broke == 1
    assert "fixed 1 · broke 1" in plots.gain_chart(h, "MS-TTA")
