"""Text sets (mstta.data.templates, mstta.bench.textsets) and the field command's bad input: one
line, exit 2, nothing written."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers_cli import run_bench
from helpers_field import CLASSES, DIM, feature_store, field_argv

from mstta.bench.textsets import choose, parse_text_sets
from mstta.data.templates import official_sets, read_cupl, read_user_text, set_templates
from mstta.engine.families import Method
from mstta.errors import UserError

NAMES = ["class_0", "class 1", "Class2"]


def test_template_sets():
    assert set_templates("photo", ["x {}."]) == ["a photo of a {}."]
    assert len(set_templates("tip7", [])) == 7 and set_templates("peer", ["x {}."]) == ["x {}."]


@pytest.mark.parametrize(
    "family, want", [("cache", ["peer"]), ("zero", ["photo"]), ("dmn", ["cupl", "tip7"]), ("no-such-family", ["peer"])]
)
def test_official_sets_are_data(family, want):
    assert official_sets("some-row", family) == want


def test_choose_falls_back_with_a_mark():
    m = Method(name="x", title="X", summary="s", family="dmn")
    got = choose(m, "official", {"peer", "photo", "tip7"})
    assert got.name == "tip7" and "cupl not supplied" in got.mark
    assert choose(m, "official", {"peer", "tip7", "cupl"}).mark is None
    assert choose(m, "photo", {"peer"}).name == "photo"  # one switch: every row on one set
    with pytest.raises(UserError, match="unknown text set 'nope'"):
        parse_text_sets("official,nope")


def _cupl(tmp_path, data):
    p = tmp_path / "cupl.json"
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


def test_read_cupl_matches_names_loosely(tmp_path):
    p = _cupl(tmp_path, {"CLASS 0": ["a"], "class_1": ["b", "c"], "class2": ["d"]})
    assert read_cupl(p, NAMES) == [["a"], ["b", "c"], ["d"]]


@pytest.mark.parametrize(
    "data, match",
    [
        ({"class 0": ["a"], "class 1": ["b"], "class2": ["d"], "zebra": ["z"]}, "does not have"),
        ({"class 0": ["a"], "class 1": ["b"]}, "no prompts for 1 of"),
        ({"class 0": [], "class 1": ["b"], "class2": ["d"]}, "non-empty prompt"),
        ({"class 0": "a", "class 1": ["b"], "class2": ["d"]}, "non-empty prompt"),
        (["a"], "expected a JSON object"),
        ("{not json", "not a readable JSON"),
        ("[" * 100_000 + "]" * 100_000, "not a readable JSON"),
    ],
)
def test_read_cupl_refuses(tmp_path, data, match):
    with pytest.raises(UserError, match=match):
        read_cupl(_cupl(tmp_path, data), NAMES)


@pytest.mark.parametrize(
    "arr, match",
    [
        (np.ones((3, 4)), "expected \\[2, 4\\]"),
        (np.ones((2, 5)), "expected \\[2, 4\\]"),
        (np.ones(8), "expected"),
        (np.array([[1.0, np.nan, 0, 0], [1, 0, 0, 0]]), "non-finite"),
        (np.array([[1.0, np.inf, 0, 0], [1, 0, 0, 0]]), "non-finite"),
        (np.array([[0.0, 0, 0, 0], [1, 0, 0, 0]]), "all zeros"),
        (np.ones((2, 4), dtype=np.int64), "dtype"),
    ],
)
def test_read_user_text_refuses(tmp_path, arr, match):
    p = tmp_path / "t.npy"
    np.save(p, arr)
    with pytest.raises(UserError, match=match):
        read_user_text(p, 2, 4)


def test_read_user_text_unit_rows(tmp_path):
    p = tmp_path / "t.npy"
    np.save(p, np.array([[3.0, 4.0], [0.0, 2.0]], dtype=np.float16))
    assert np.allclose(read_user_text(p, 2, 2).numpy(), [[0.6, 0.8], [0, 1]])


# ---------------------------------------------------------------------- the command's refusals
def _bad_user(tmp_path, arr):
    p = tmp_path / "user.npy"
    np.save(p, arr)
    return ["--text", "user", "--text-classifier", p]


def _refused(capsys, tmp_path, extra, match, classes=CLASSES):
    store, keys = feature_store(tmp_path, names=("a",), classes=classes)
    out = tmp_path / "out"
    code, stdout, err = run_bench(capsys, *field_argv(store, out, keys, "--methods", "tda", *extra))
    assert code == 2 and match in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--text", "cupl"], "--text cupl needs --cupl"),
        (["--text", "user"], "--text user needs --text-classifier"),
        (["--orders", "0"], "--orders 0"),
        (["--ece-bins", "0"], "--ece-bins 0"),
        (["--open", "withheld,sideways"], "unknown setting 'sideways'"),
        (["--mix-share", "0"], "--mix-share 0"),
        (["--cupl", "/no/such.json", "--text", "cupl"], "--cupl /no/such.json: file not found"),
    ],
)
def test_field_flags_refused(capsys, tmp_path, extra, match):
    _refused(capsys, tmp_path, extra, match)


def test_field_bad_text_files_refused(capsys, tmp_path):
    cupl = _cupl(tmp_path, {f"class{c}": ["p"] for c in range(CLASSES + 1)})
    _refused(capsys, tmp_path, ["--text", "cupl", "--cupl", cupl], "does not have")
    _refused(capsys, tmp_path / "b", _bad_user(tmp_path, np.ones((CLASSES, DIM + 1))), "expected [4, 64]")
    nan = np.ones((CLASSES, DIM))
    nan[1, 2] = np.nan
    _refused(capsys, tmp_path / "c", _bad_user(tmp_path, nan), "non-finite")


def test_field_withheld_needs_two_known_classes(capsys, tmp_path):
    _refused(capsys, tmp_path, ["--open", "withheld"], "at least two known classes", classes=2)


@pytest.mark.parametrize("command", ["run", "field"])
def test_report_only_on_deeply_nested_results(capsys, tmp_path, command):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("[" * 100_000 + "]" * 100_000)
    code, _, err = run_bench(capsys, command, "--report-only", "--out", out)
    assert code == 2 and "nested too deep" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]
