"""`mstta-bench streams` end to end on a tiny generated store, and its refusals (one line, exit 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers_cli import run_bench

from mstta.features.format import save_features

CLASSES = ["cat", "dog", "owl"]


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Three domains of one class space (shared prototypes and text; each domain its own offset);
    the last one lists its classes in another order and has one more class, to test the matching."""
    root = tmp_path_factory.mktemp("streams")
    g = np.random.default_rng(0)
    protos = _unit(g.standard_normal((3, 16)))
    text = _unit(protos + 0.8 * _unit(g.standard_normal((3, 16))))
    paths = []
    for j in range(3):
        shift = 0.0 if j == 0 else 1.2 * _unit(g.standard_normal(16))
        labels = np.arange(45) % 3
        feats = _unit(2.0 * protos[labels] + shift + 0.9 * _unit(g.standard_normal((45, 16))))
        names, t = list(CLASSES), text
        if j == 2:  # classes reordered, one extra: labels refer to its own order
            names = ["owl", "cat", "dog", "fox"]
            t = np.concatenate([text[[2, 0, 1]], _unit(g.standard_normal((1, 16)))])
            labels = np.array([{0: 1, 1: 2, 2: 0}[y] for y in labels])
            labels[:3] = 3  # three foxes, dropped
        paths.append(save_features(root / f"d{j}.npz", feats, t, labels, names, dtype=np.float32))
    return paths


def _args(store, out, *extra):
    files = ",".join(str(p) for p in store)
    return (
        "streams",
        "--features",
        files,
        "--out",
        out,
        "--methods",
        "ms-tta,tda,onzeta,zero",
        "--seeds",
        "1,2",
        "--lead",
        "10",
        "--segment",
        "12",
        "--window",
        "4",
        "--regret-steps",
        "8",
        "--no-plots",
        *extra,
    )


def test_streams_end_to_end(store, tmp_path, capsys):
    out = tmp_path / "out"
    rule_arms = ("--arms", "forget.rule=timeliness forget.horizon=5; forget.detect=true forget.detect_warmup=5")
    short = "forget.rule=timeliness;forget.rule=idle"
    more = ("--short-arms", short, "--short-streams", "cut,iid", "--correlated-on", "d1")
    code, stdout, err = run_bench(capsys, *_args(store, out, "--streams", "iid,cut,chain,separate", *rule_arms, *more))
    assert code == 0, err
    assert (out / "report.md").is_file() and (out / "results.csv").is_file()
    data = json.loads((out / "results.json").read_text())
    recs = data["records"]
    assert data["settings"]["classes"] == 3 and data["settings"]["sizes"] == [45, 45, 42]
    arms = {(r["method"], r["arm"]) for r in recs}
    assert {
        ("ms-tta", "never"),
        ("ms-tta", "oracle"),
        ("tda", "oracle"),
        ("onzeta", "never"),
        ("zero-shot", "zero-shot"),
    } <= arms
    assert {r["kind"] for r in recs if r["method"] == "zero"} == {"iid"}  # episodic: the i.i.d. line only
    assert {r["kind"] for r in recs if r["method"] == "onzeta"} == {"iid", "cut"}  # --short-streams
    # OnZeta's family defines timeliness but no idle rule: its short arms lose the idle one
    assert {r["arm"] for r in recs if r["method"] == "onzeta"} == {"never", "oracle", "forget.rule=timeliness"}
    assert {r["arm"] for r in recs if r["method"] == "tda"} == {"never", "oracle", *rule_arms[1].split("; ")}
    assert {r["stream"] for r in recs if r["kind"] == "separate"} == {"d1"}  # --correlated-on
    chain = [r for r in recs if r["kind"] == "chain" and r["arm"] == "never" and r["method"] == "ms-tta"]
    assert len(chain) == 2 and chain[0]["starts"] == [0, 10, 22]  # three domains: A -> B -> C
    for r in recs:  # every record's accuracy is its segments' weighted mean
        sizes = np.diff(r["starts"] + [r["n"]])
        assert r["accuracy"] == pytest.approx(np.dot(r["segments"], sizes) / r["n"])
    never = [r for r in recs if r["kind"] == "cut" and r["method"] == "ms-tta" and r["arm"] == "never"]
    # read online on the first seed's cut streams for the cache family's --all-arms-for methods
    assert [r["seed"] for r in never if r["stale"] != [None]] == [1, 1]
    assert all(0 <= r["stale"][0] <= 1 for r in never if r["seed"] == 1)
    oracle = [r for r in recs if r["kind"] == "cut" and r["method"] == "ms-tta" and r["arm"] == "oracle"]
    assert all(r["stale"] == [0.0] and r["regret"] == [0.0] for r in oracle)
    assert "## Scene streams: cut" in (out / "report.md").read_text()


def test_streams_dry_run_writes_nothing(store, tmp_path, capsys):
    out = tmp_path / "plan"
    code, stdout, _ = run_bench(capsys, *_args(store, out, "--dry-run"))
    assert code == 0 and "ms-tta: never; oracle" in stdout and not out.exists()


@pytest.mark.parametrize(
    "extra, needle",
    [
        (("--lead", "0"), "--lead 0: expected an integer in [1, 1,000,000]"),
        (("--window", "10001"), "--window 10001: expected an integer in [1, 10,000]"),
        (("--streams", "sorted"), "--streams: unknown stream 'sorted'"),
        (("--methods", "nope"), "unknown method 'nope'"),
        (("--seeds", "x"), "--seeds 'x'"),
        (("--arms", "forgetfulness=3"), "--arms 'forgetfulness=3'"),
        (("--set", "k=0"), "k"),
        (("--names", "a,b"), "--names: 2 names for 3 feature files"),
        (("--correlated-on", "d9"), "--correlated-on: unknown domain 'd9'"),
        (("--short-streams", "x"), "--streams: unknown stream 'x'"),
        (("--arms", "forget.horizon=0"), "forget.horizon"),
        (("--digits",), "give either --digits or --features"),
        (("--jobs", "0"), "--jobs 0: expected an integer in [1, 64]"),
        (("--jobs", "65"), "--jobs 65: expected an integer in [1, 64]"),
    ],
)
def test_streams_bad_flags(store, tmp_path, capsys, extra, needle):
    out = tmp_path / "bad"
    code, _, err = run_bench(capsys, *_args(store, out, *extra))
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_streams_refuses_domains_without_shared_classes(tmp_path, capsys):
    a = save_features(tmp_path / "a.npz", np.eye(4, 8)[[0, 1, 2, 3]], np.eye(2, 8), [0, 1, 0, 1], ["x", "y"])
    b = save_features(tmp_path / "b.npz", np.eye(4, 8)[[0, 1, 2, 3]], np.eye(2, 8), [0, 1, 0, 1], ["x", "z"])
    code, _, err = run_bench(capsys, "streams", "--features", f"{a},{b}", "--out", tmp_path / "o")
    assert code == 2 and "share 1 class name(s)" in err
    missing = tmp_path / "missing.npz"
    code, _, err = run_bench(capsys, "streams", "--features", f"{a},{missing}", "--out", tmp_path / "o")
    assert code == 2 and "file not found" in err


def test_shared_classes_match_names_and_repeated_names_by_occurrence():
    """ImageNet's CLIP names repeat ('missile' twice): two files named from one wnid-sorted list pair
    their repeats in order; a subset holding one of two repeats cannot say which one: left out."""
    from mstta.bench.streamrun import shared_classes

    imagenet = ["cat", "missile", "dog", "missile", "owl"]
    assert shared_classes([imagenet, list(imagenet)]) == [
        ("cat", 0),
        ("missile", 0),
        ("dog", 0),
        ("missile", 1),
        ("owl", 0),
    ]
    subset = ["owl", "missile", "cat"]
    assert shared_classes([imagenet, subset]) == [("cat", 0), ("owl", 0)]


def test_the_help_states_each_steps_flags_true_bound():
    """--window and --within are refused above 10,000 (the curves hold windows per cut): the help says
    so (it said 1..1000000 for all five), and --regret-steps keeps the streams' 1,000,000."""
    from mstta.commands import flagdocs

    rows = {
        line.split("`")[1].split()[0]: line for line in flagdocs.flag_table("streams").splitlines() if "`--" in line
    }
    assert "1..10000)" in rows["--window"] and "1..10000)" in rows["--within"]
    assert "1..1000000)" in rows["--regret-steps"] and "1..1000000)" in rows["--lead"]
