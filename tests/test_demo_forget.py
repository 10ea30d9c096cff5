"""The demo's "Forget old scenes" (issue 29, point 4): `--forget` and `NAME@CHOICE` reach each raced
engine's `EngineConfig.forget`, bad values are one line and exit 2, a detected scene cut reaches the
JSONL and the summary, the gain plot marks it, the Settings control sets it, the bundled race."""

from __future__ import annotations

import argparse
import json

import cv2
import numpy as np
import pytest
from helpers_video import LABELS, scene, write_labels

from app.bundled import apply_bundled
from app.cli import main, parse_args
from app.forgetting import BUNDLED_RACE, DETECT_MARK, RECOMMENDED_RULE, parse_racer, run_marks, with_forget
from app.pipeline import config_from_args, prepare
from app.session import FrameResult, MethodResult, Scored, StreamSession, check_methods
from app.ui import plots
from app.ui.state import FORGET_LABEL, History, Settings
from mstta.engine.config import EngineConfig
from mstta.engine.forget import ForgetConfig
from mstta.errors import UserError


def _forget(argv: list[str]):
    return prepare(config_from_args(parse_args(["--headless", *argv]))).engine_cfg.forget


@pytest.mark.parametrize(
    "argv, rule, detect",
    [
        ([], "none", False),  # default: today's semantics
        (["--forget", "off"], "none", False),
        (["--forget", "recommended"], RECOMMENDED_RULE, False),
        (["--forget", "detect"], RECOMMENDED_RULE, True),
        (["--set", "forget.rule=periodic"], "periodic", False),  # --set alone still reaches the section
    ],
)
def test_the_forget_flag_reaches_the_engine_config(argv, rule, detect):
    forget = _forget(argv)
    assert (forget.rule, forget.detect, forget.horizon) == (rule, detect, None)  # horizon: the engine's own


def test_a_forget_key_of_set_stays_under_the_choice():
    forget = _forget(["--forget", "recommended", "--set", "forget.horizon=80"])
    assert (forget.rule, forget.horizon) == (RECOMMENDED_RULE, 80)


def test_each_raced_entry_runs_with_its_own_forgetting(tiny_clip):
    base = with_forget(EngineConfig(bank_size=64), "detect")
    session = StreamSession(tiny_clip, LABELS, methods=["ms-tta", "ms-tta@off", "tda@recommended"], config=base)
    rules = [(e.config.forget.rule, e.config.forget.detect) for e in session.engines]
    assert rules == [(RECOMMENDED_RULE, True), ("none", False), (RECOMMENDED_RULE, False)]
    assert session.method_names == ["ms-tta", "ms-tta@off", "tda@recommended"]
    assert [m.title for m in session.methods] == ["MS-TTA", "MS-TTA (no forgetting)", "TDA + forgetting"]
    assert DETECT_MARK in parse_racer("tda@detect").marks and DETECT_MARK not in parse_racer("tda@recommended").marks


def test_a_family_whose_fading_is_the_projects_adaptation_says_so_under_its_own_choice():
    """DOTA's statistics fade under the timeliness rule (the project's adaptation): its raced entry
    with its own choice carries that mark, as the replay command's output does; never without one."""
    fading = [m for m in parse_racer("dota@recommended").marks if "adapted by this project" in m]
    assert len(fading) == 1 and "DOTA" in fading[0]
    assert fading[0] in parse_racer("dota@detect").marks and DETECT_MARK in parse_racer("dota@detect").marks
    assert not [m for m in parse_racer("dota@off").marks + parse_racer("dota").marks if "adapted" in m]
    assert not [m for m in parse_racer("ms-tta@recommended").marks if "adapted" in m]  # RoTTA's own score


def test_a_runs_marks_name_each_raced_entrys_forgetting_once(tiny_clip):
    base = with_forget(EngineConfig(bank_size=64), "recommended")
    session = StreamSession(tiny_clip, LABELS, methods=["ms-tta", "dota", "dota@detect", "tda@off"], config=base)
    marks = run_marks(session.engines)
    assert marks == [parse_racer("dota@recommended").marks[0], *ForgetConfig(detect=True).marks], marks
    assert run_marks(StreamSession(tiny_clip, LABELS, methods=["ms-tta", "dota@off"]).engines) == []


def _cut_video(path, before: int, after: int) -> None:
    """A hard scene change: `before` frames of one scene (a red circle on a gradient, moving a little),
    then `after` of another (the same picture with its colours inverted, upside down)."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10.0, (96, 64))
    for i in range(before + after):
        rgb = scene(i, label=LABELS[0])
        rgb = rgb if i < before else np.ascontiguousarray(255 - rgb[::-1])
        writer.write(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    writer.release()


def test_a_detected_cut_reaches_the_jsonl_and_the_summary(tmp_path, capsys):
    video, log = tmp_path / "cut.avi", tmp_path / "p.jsonl"
    _cut_video(video, before=24, after=12)
    labels = write_labels(tmp_path / "labels.txt")
    argv = ["--headless", "--video", str(video), "--labels", str(labels), "--every", "1", "--log", str(log)]
    argv += ["--model", "mstta-tiny", "--pretrained", "none", "--methods", "ms-tta,ms-tta@detect", "--json", "-q"]
    argv += ["--set", "forget.detect_warmup=16"]  # the detector may fire once 16 frames of the first scene are in
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    found = {
        entry: [r["frame"] for r in rows if any(m["method"] == entry and m["cut"] for m in r["methods"])]
        for entry in ("ms-tta", "ms-tta@detect")
    }
    assert found["ms-tta"] == []  # never forgets: never reports a cut
    assert len(found["ms-tta@detect"]) >= 1 and 24 <= found["ms-tta@detect"][0] < 24 + 10  # found within 10 frames
    board = {row["method"]: row for row in summary["leaderboard"]}
    assert board["ms-tta@detect"]["cut_frames"] == found["ms-tta@detect"]
    assert board["ms-tta@detect"]["cuts"] == len(found["ms-tta@detect"]) and board["ms-tta"]["cuts"] == 0
    assert summary["forget_marks"] == ForgetConfig(detect=True).marks  # an entry's own choice is listed too


def _result(methods: list[tuple[str, int, bool]], truth: int = 0) -> FrameResult:
    """A frame's result: CLIP right, each raced (name, predicted index, cut) method."""
    top = [Scored(LABELS[0], 0, 0.9)]
    raced = [MethodResult(name, [Scored(LABELS[i], i, 0.8)], 1.0, cut=cut) for name, i, cut in methods]
    return FrameResult(top, raced[0].topk, 0.1, 0, 9, 1, 2.0, method=raced[0].method, methods=raced)


def test_the_gain_plot_marks_each_detected_cut():
    h = History()
    for x in range(1, 21):
        h.update(
            _result([("ms-tta", 0, False), ("ms-tta@detect", 0 if x % 3 else 1, x in (8, 15))]),
            LABELS[0],
            None,
            100 + x,
        )
    titles = ["MS-TTA", "MS-TTA + forgetting + cuts"]
    chart = plots.gain_chart(h, "MS-TTA", titles=titles)
    assert chart.count('class="cut"') == 2 and 'data-x="8"' in chart and 'data-x="15"' in chart
    assert "scene cut detected at source frame 108" in chart and "MS-TTA + forgetting + cuts − CLIP" in chart
    assert 'class="cut"' not in plots.gain_chart(History(), "MS-TTA", titles=titles)  # nothing detected: no mark
    assert "scene cuts detected: MS-TTA + forgetting + cuts 2 (frames 108, 115)" in plots.run_summary(h, 1.0, "MS-TTA")


def test_the_run_summary_names_every_raced_methods_accuracy():
    """The summary line above the page names each raced row's accuracy (the leaderboard's), not only
    the first method's beside CLIP's."""
    h = History()
    for x in range(10):
        h.update(
            _result([("ms-tta", 0 if x < 6 else 1, False), ("ms-tta@detect", 0 if x < 9 else 1, False)]), LABELS[0]
        )
    summary = plots.run_summary(h, 1.0, "MS-TTA")
    assert "accuracy CLIP 100.0%, MS-TTA + forgetting + cuts 90.0%, MS-TTA 60.0% (10 labelled)" in summary, summary


def _form(**changes):
    form = dict(labels="\n".join(LABELS), template="", method="ms-tta", race=[], k=3, alpha=0.2, lam=1.0)
    return form | dict(capacity=3, bank=100, views=1) | changes


@pytest.mark.parametrize("choice, rule, detect", [("off", "none", False), ("detect", RECOMMENDED_RULE, True)])
def test_the_settings_control_sets_the_forgetting(choice, rule, detect):
    base = with_forget(EngineConfig(), "recommended")
    settings = Settings.from_controls(_form(forget=choice), base)
    assert (settings.config.forget.rule, settings.config.forget.detect) == (rule, detect)
    assert Settings.from_controls(_form(), base).config.forget == base.forget  # none sent: the server's own
    with pytest.raises(UserError, match=f"^{FORGET_LABEL} 'sometimes': choose one of off, recommended, detect$"):
        Settings.from_controls(_form(forget="sometimes"), base)


def test_the_settings_tab_has_the_control():
    import gradio as gr

    from app.ui.settings_tab import forget_control

    with gr.Blocks():
        radio = forget_control(with_forget(EngineConfig(), "detect"))
    assert radio.elem_id == "mstta-forget" and radio.value == "detect" and radio.label == FORGET_LABEL
    assert [value for _, value in radio.choices] == ["off", "recommended", "detect"]


def test_the_bundled_demo_races_the_paper_against_forgetting(tmp_path):
    assert check_methods(BUNDLED_RACE) == ["ms-tta@off", "ms-tta@recommended"]
    assert [parse_racer(e).forget for e in check_methods(BUNDLED_RACE)] == ["off", "recommended"]
    args = argparse.Namespace(
        model="mstta-tiny", pretrained="none", video="v.mp4", camera=None, method=None, methods=None
    )
    apply_bundled(args)
    assert args.methods == BUNDLED_RACE
    mine = argparse.Namespace(
        model="mstta-tiny", pretrained="none", video="v.mp4", camera=None, method="tda", methods=None
    )
    apply_bundled(mine)
    assert mine.methods is None and mine.method == "tda"  # the user's own choice stays
