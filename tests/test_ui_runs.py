"""A video run as the handlers drive it (no server, no browser): Stop before an auto-started run
begins, a second run in the session replacing the first, the empty stride box, the demo clip per
model, a bad upload reported at upload. The random-weight `mstta-tiny`, generated videos."""

from __future__ import annotations

import json

import pytest
from helpers_ui import LABELS, SETTINGS
from helpers_video import tiny_clip, write_video

from mstta.engine.config import EngineConfig
from mstta.errors import UserError


def context(**kw):
    from app.ui.context import Context
    from app.ui.state import ModelSlots, Sessions

    return Context(
        clip=tiny_clip(),
        base=EngineConfig(bank_size=256),
        slots=ModelSlots(1),
        sessions=Sessions(4),
        update_interval=0,
        **kw,
    )


def form(video, **kw):
    method, k, alpha, lam, capacity, bank, race, model, views, forget = SETTINGS
    return (
        dict(
            video=str(video),
            truth=None,
            every=1,
            keep=False,
            realtime=False,
            labels="\n".join(LABELS),
            template="",
            method=method,
            k=k,
            alpha=alpha,
            lam=lam,
            capacity=capacity,
            bank=bank,
            race=race,
            model=model,
            views=views,
            forget=forget,
        )
        | kw
    )


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return write_video(tmp_path_factory.mktemp("runs") / "clip.avi", n=12, size=(64, 48))


def test_stop_before_the_auto_started_run_begins_stops_it(clip):
    """Stop pressed while the page still says "Processing the preloaded video…" (the run not begun):
    the run, once it begins, stops before its first frame instead of playing the clip."""
    from app.ui import handlers, video
    from app.ui.state import UISession

    ctx, ui = context(), UISession()
    assert handlers.stop(ui, autostart=True) == {"state": ui}, "taken, not 'Nothing to stop'"
    pages = list(video.process_video(ctx, ui, form(clip), autostart=True))
    assert pages[-1]["status"] == "Stopped before the first frame.", pages[-1]["status"]
    assert ui.history.processed == 0
    assert "Nothing to stop" in handlers.stop(ui, autostart=True)["status"], "the auto-started run is over"


def test_stop_while_the_run_opens_its_video_stops_it(clip):
    """Stop between Process and the first frame (the video opening, the classifier being built)."""
    from app.ui import handlers, video
    from app.ui.state import UISession

    ctx, ui = context(), UISession()
    run = video.process_video(ctx, ui, form(clip))
    assert ui.runs == 0
    first = next(run)  # the run has begun: it counts as going
    assert ui.runs == 1 and "Processing" in first["status"]
    assert handlers.stop(ui) == {"state": ui}
    last = list(run)[-1]
    assert last["status"].startswith("Stopped after 1 frame of "), last["status"]
    assert ui.runs == 0


def test_a_second_run_replaces_the_first_and_each_offers_its_own_files(clip, tmp_path):
    """A second video while the first runs (same session): the first ends at its next frame with its
    own files; each run's JSONL holds exactly the frames it processed, in order, never the other's."""
    from app.ui import video
    from app.ui.state import UISession

    other = write_video(tmp_path / "other.avi", n=8, size=(64, 48))
    ctx, ui = context(), UISession()
    first = video.process_video(ctx, ui, form(clip))
    next(first), next(first)  # two frames of the first video
    second = list(video.process_video(ctx, ui, form(other)))
    rest = list(first)
    assert rest[-1]["status"].startswith("Replaced by a newer run after 2 frames"), rest[-1]["status"]
    first_files = [f for f in rest[-1]["downloads"]["value"]]
    second_files = [f for f in second[-1]["downloads"]["value"]]
    assert set(first_files).isdisjoint(second_files)
    rows = [[json.loads(line)["frame"] for line in open(f[1], encoding="utf-8")] for f in (first_files, second_files)]
    assert rows == [[0, 1], list(range(8))]
    assert ui.history.processed == 8, "the newer run's history only"


def test_a_model_or_views_change_mid_run_says_why_the_run_stopped(clip):
    """Apply with other views while a video runs (a new engine): the run ends at its next frame
    saying the settings restarted the adaptation, not that a newer run replaced it."""
    from app.ui import handlers, video
    from app.ui.state import UISession

    ctx, ui = context(), UISession()
    first = video.process_video(ctx, ui, form(clip))
    next(first), next(first)
    handlers.apply(ctx, ui, form(clip, views=2))
    status = list(first)[-1]["status"]
    assert status.startswith("Stopped after 2 frames of ") and "views started the adaptation afresh" in status, status
    assert "Replaced" not in status


def test_an_empty_stride_box_is_an_error_not_zero(clip):
    from app.ui import video
    from app.ui.state import UISession

    for empty in (None, ""):
        with pytest.raises(UserError, match="Every N-th frame: the box is empty"):
            list(video.process_video(context(), UISession(), form(clip, every=empty)))


def test_the_demo_clip_is_the_models_own():
    """The digits model gets the digits clip and its ten labels; a CLIP model the photographs clip."""
    from app.bundled import CLIP_DEMO, DIGITS_DEMO
    from app.ui.handlers import ASSETS_DIR, demo_clip

    digits = demo_clip(DIGITS_DEMO.model)
    if not (ASSETS_DIR / DIGITS_DEMO.video).is_file():
        assert digits is None
    else:
        from app.labels import read_labels

        assert digits[0].endswith(DIGITS_DEMO.video)
        assert digits[1].split("\n") == read_labels(ASSETS_DIR / DIGITS_DEMO.labels)
    photos = demo_clip("ViT-B-16")
    assert photos is None or photos[0].endswith(CLIP_DEMO.video)


def test_a_bad_upload_is_reported_on_upload(tmp_path):
    from app.ui import handlers
    from app.ui.state import UISession

    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"not a video at all" * 100)
    with pytest.raises(UserError, match="broken.mp4"):
        handlers.video_changed(UISession(), str(bad), None)
    good = write_video(tmp_path / "good.avi", n=3, size=(32, 24))
    assert "loaded" in handlers.video_changed(UISession(), str(good), None)["status"]
