"""Several methods racing on one stream (issue 24, item 3): one encoder pass per frame, one engine
step per method, each method's predictions equal to running it alone; the headless `--methods`
log and leaderboard; every registered method (and one added later, with its marks)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from helpers_family import feature_methods, register_method
from helpers_video import LABELS, scene, write_labels, write_video

from app.cli import main
from app.pipeline import DemoConfig, run_pipeline
from app.session import MAX_METHODS, StreamSession, check_methods
from app.summary import format_summary
from mstta.engine.methods import get_method
from mstta.errors import UserError


def _frames(n: int = 10) -> list[np.ndarray]:
    return [scene(i, label=LABELS[(i // 3) % len(LABELS)]) for i in range(n)]


def _groups(names: list[str], size: int = MAX_METHODS) -> list[list[str]]:
    return [names[i : i + size] for i in range(0, len(names), size)]


@pytest.mark.parametrize("group", _groups(feature_methods()), ids=lambda g: ",".join(g))
def test_every_registered_method_races_as_it_runs_alone(tiny_clip, group):
    frames = _frames()
    race = StreamSession(tiny_clip, LABELS, methods=group)
    raced = [race.process(f) for f in frames]
    for i, name in enumerate(group):
        alone = StreamSession(tiny_clip, LABELS, method=name)
        for result, frame in zip(raced, frames):
            solo = alone.process(frame)
            mine = result.methods[i]
            assert mine.method == name
            assert [s.index for s in mine.topk] == [s.index for s in solo.tta_topk]
            assert np.allclose([s.prob for s in mine.topk], [s.prob for s in solo.tta_topk], atol=1e-5)
            assert [s.index for s in result.clip_topk] == [s.index for s in solo.clip_topk]
    assert all(r.tta_topk == r.methods[0].topk and r.method == group[0] for r in raced)


def test_one_encoder_pass_per_frame_whatever_the_number_of_methods(tiny_clip):
    race = StreamSession(tiny_clip, LABELS, methods=["ms-tta", "tda", "zero-shot", "tda+ms"])
    calls = []
    encode = race.encoder.encode_one
    race.encoder.encode_one = lambda image: calls.append(1) or encode(image)
    steps = {i: 0 for i in range(4)}
    for i, engine in enumerate(race.engines):
        step = engine.step
        engine.step = lambda x, _i=i, _step=step: steps.__setitem__(_i, steps[_i] + 1) or _step(x)
    for frame in _frames(5):
        race.process(frame)
    assert len(calls) == 5 and steps == {0: 5, 1: 5, 2: 5, 3: 5}


@pytest.mark.parametrize(
    "spec, why",
    [
        ("ms-tta,tda,zero-shot,tda+ms,baseline", "at most 4"),
        ("ms-tta,ms-tta", "named twice"),
        ("ms-tta,nope", "unknown method 'nope'"),
        (" , ", "name at least one"),
    ],
)
def test_bad_method_lists_are_one_line(spec, why):
    with pytest.raises(UserError, match=why) as info:
        check_methods(spec)
    assert "\n" not in str(info.value) and "--methods" in str(info.value)


def test_cli_refuses_a_bad_method_list_with_exit_2(tmp_path, capsys):
    labels = write_labels(tmp_path / "l.txt")
    video = write_video(tmp_path / "v.avi", n=6)
    code = main(
        [
            "--headless",
            "--video",
            str(video),
            "--labels",
            str(labels),
            "--model",
            "mstta-tiny",
            "--pretrained",
            "none",
            "--methods",
            "ms-tta,tda,ms-tta",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "named twice" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.fixture
def media(tmp_path):
    labels = write_labels(tmp_path / "labels.txt")
    video = write_video(tmp_path / "clip.avi", n=40, fps=10)
    truth = tmp_path / "truth.csv"
    truth.write_text("0,9,red circle\n10,19,green square\n20,39,blue triangle\n", encoding="utf-8")
    return {"labels": str(labels), "video": str(video), "truth": str(truth), "dir": tmp_path}


def test_headless_race_logs_every_method_and_prints_the_leaderboard(tiny_clip, media, capsys):
    names = ["ms-tta", "tda", "zero-shot"]
    log = media["dir"] / "p.jsonl"
    cfg = DemoConfig(
        video=media["video"],
        labels=media["labels"],
        truth=media["truth"],
        log=str(log),
        every=1,
        model="mstta-tiny",
        pretrained="none",
        method=names[0],
        methods=names,
    )
    s = run_pipeline(cfg, clip=tiny_clip)
    rows = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == s["frames_processed"] == 40 and s["methods"] == names
    for row in rows:
        assert [m["method"] for m in row["methods"]] == names
        assert all(len(m["topk"]) == 3 and m["ms"] >= 0 for m in row["methods"])
        assert row["methods"][0]["topk"] == row["tta"]
    board = {r["method"]: r for r in s["leaderboard"]}
    assert set(board) == {"clip", *names}
    clip_right = [r["clip"][0]["label"] == r["truth"] for r in rows]
    for i, name in enumerate(names):
        right = [r["methods"][i]["topk"][0]["label"] == r["truth"] for r in rows]
        agree = [r["methods"][i]["topk"][0]["label"] == r["clip"][0]["label"] for r in rows]
        assert board[name]["accuracy"] == pytest.approx(100 * np.mean(right), abs=0.01)
        assert board[name]["agreement"] == pytest.approx(100 * np.mean(agree), abs=0.01)
        assert board[name]["fixed"] == sum(r and not c for r, c in zip(right, clip_right))
        assert board[name]["broke"] == sum(c and not r for r, c in zip(right, clip_right))
        assert board[name]["ms_per_frame"] > 0
    accuracies = [r["accuracy"] for r in s["leaderboard"]]
    assert accuracies == sorted(accuracies, reverse=True)  # best first
    line = format_summary(s)
    assert "leaderboard: " in line and all(get_method(n).title in line for n in names)


def test_a_method_added_later_races_with_its_marks(tiny_clip, media, monkeypatch):
    late = dataclasses.replace(get_method("zero-shot"), name="late-arrival", title="Late arrival", training_free=False)
    register_method(monkeypatch, late)
    cfg = DemoConfig(
        video=media["video"],
        labels=media["labels"],
        truth=media["truth"],
        every=4,
        model="mstta-tiny",
        pretrained="none",
        method="ms-tta",
        methods=["ms-tta", "late-arrival"],
    )
    s = run_pipeline(cfg, clip=tiny_clip)
    board = {r["method"]: r for r in s["leaderboard"]}
    assert board["late-arrival"]["marks"] == ["not training-free"]
    assert "Late arrival [not training-free]" in format_summary(s)


def test_a_single_method_run_keeps_the_one_method_summary(tiny_clip, media):
    cfg = DemoConfig(video=media["video"], labels=media["labels"], every=8, model="mstta-tiny", pretrained="none")
    s = run_pipeline(cfg, clip=tiny_clip)
    assert s["methods"] == ["ms-tta"] and "leaderboard" not in format_summary(s)


@pytest.mark.parametrize("spec", ["ms-tta,,tda", "ms-tta,tda,", ",ms-tta"])
def test_an_empty_method_name_is_refused_not_dropped(spec):
    """Issue 32.4: `--methods ms-tta,,tda` quietly raced two; now one line says what was refused."""
    with pytest.raises(UserError, match="an empty method name") as info:
        check_methods(spec)
    assert "\n" not in str(info.value) and spec in str(info.value)


@pytest.mark.parametrize(
    "method, race, why",
    [
        ("tda", ["tda", "ms-tta"], "TDA is the Method already"),
        ("ms-tta", ["tda", "zero-shot", "baseline", "tda+ms"], "4 picked; at most 3"),
    ],
)
def test_the_race_box_refuses_a_pick_too_many_and_the_method_itself(method, race, why):
    from app.ui.state import race_control

    with pytest.raises(UserError, match=why):
        race_control(method, race)


def test_prompt_tuning_races_on_views_and_refuses_one(tiny_clip):
    """TPT in the demo: its engine gets the model's text tower and steps on the frame's views; with
    one view per frame it is refused in one line naming --views."""
    frames = _frames(3)
    race = StreamSession(tiny_clip, LABELS, methods=["tpt", "tda"], views=8)
    alone = StreamSession(tiny_clip, LABELS, method="tpt", views=8)
    for f in frames:
        a, b = race.process(f).methods[0], alone.process(f)
        assert [s.index for s in a.topk] == [s.index for s in b.tta_topk]
    with pytest.raises(UserError, match="--views 1"):
        StreamSession(tiny_clip, LABELS, method="c-tpt")
