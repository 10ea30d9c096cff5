"""Paper lookups, report tables (ours / paper / Δ, mean ± std, averages) and the results store."""

from __future__ import annotations

import json

import pytest

from mstta.bench import paper
from mstta.bench.report import render_report, write_reports
from mstta.bench.reportfmt import stats
from mstta.bench.results import ResultsStore
from mstta.bench.runner import parse_datasets, parse_methods, parse_seeds
from mstta.errors import UserError


@pytest.mark.parametrize(
    "backbone,method,column,bench,expected",
    [
        ("vit_b16", "ms-tta", "imagenet_a", None, 64.63),  # OOD table
        ("rn50", "zero-shot", "imagenet_r", None, 60.72),  # zero-shot = the paper's CLIP row
        ("vit_b16", "boostadapter", "eurosat", None, 61.22),  # cross-dataset table
        ("vit_b16", "ms-tta", "average", "cross", 69.48),  # the paper's own average
        ("rn50", "tda", "average", "ood", 46.63),
        ("vit_b16", "tda+ms", "oxford_flowers", None, 74.06),  # plug-in table
        ("vit_b16", "boostadapter+ms", "average", "cross", 69.43),
        ("rn50", "tda+ms", "oxford_flowers", None, None),  # plug-in is ViT-B/16 only
        ("vit_b16", "tda+ms", "imagenet_a", None, None),  # ... and cross-dataset only
        ("vit_b16", "baseline", "imagenet_sketch", None, 49.89),  # baseline-vs-MS-TTA ablation
        ("vit_b16", "baseline", "average", "cross", 68.56),
        (None, "ms-tta", "imagenet_a", None, None),  # a backbone the paper does not report
        ("vit_b16", "ms-tta", "imagenet", None, None),  # ImageNet is in no table
    ],
)
def test_paper_lookup(backbone, method, column, bench, expected):
    assert paper.main_value(backbone, method, column, bench) == expected


def test_paper_names():
    assert paper.backbone_key("ViT-B-16", "openai") == "vit_b16" and paper.backbone_key("RN50", "openai") == "rn50"
    assert paper.backbone_key("ViT-B-16", "laion2b_s34b_b79k") is None
    assert paper.dataset_label("imagenet_sketch") == "ImageNet-S"
    assert paper.ablation_value("alpha", 0.8, "dtd") == 45.86 and paper.ablation_value("k", 3, "dtd") is None
    assert paper.efficiency_row("ms-tta")["fps"] == 10.05


@pytest.mark.parametrize(
    "spec,expected",
    [
        ("ood", ["imagenet_a", "imagenet_r", "imagenet_sketch", "imagenet_v2"]),
        ("A,dtd,A", ["imagenet_a", "dtd"]),
        ("ood,imagenet_a,imagenet", list(paper.OOD) + ["imagenet"]),
    ],
)
def test_parse_datasets(spec, expected):
    assert parse_datasets(spec) == expected


def test_parse_groups_and_lists():
    assert len(parse_datasets("all")) == 14 and parse_datasets("cross") == list(paper.CROSS)
    assert parse_seeds("1,2,2,5") == [1, 2, 5]
    assert parse_methods("tda,ms-tta") == ["tda", "ms-tta"]
    for bad, fn in (("1.5", parse_seeds), ("", parse_seeds), ("nope", parse_methods), ("x", parse_datasets)):
        with pytest.raises(UserError):
            fn(bad)


def _run(dataset, method, acc, seed=1, backbone="ViT-B-16", pretrained="openai"):
    return {
        "dataset": dataset,
        "backbone": backbone,
        "pretrained": pretrained,
        "method": method,
        "seed": seed,
        "accuracy": acc,
        "zero_shot_accuracy": 50.0,
        "device": "cpu",
        "adapt_fps": 100.0,
    }


def _rows(md: str, title: str) -> list[str]:
    """Lines of the first table after a heading containing `title`."""
    part = md.split(title, 1)[1]
    return [ln for ln in part.split("\n\n", 2)[1].splitlines() if ln.startswith("|")]


def test_report_ours_paper_delta_and_averages():
    runs = [_run(d, "ms-tta", 60.0 + i) for i, d in enumerate(paper.OOD)]
    runs += [_run("imagenet_a", "tda", s, seed) for seed, s in ((1, 59.0), (2, 61.0), (3, 63.0))]
    runs += [_run("dtd", "baseline", 45.0), _run("dtd", "ms-tta", 46.0)]
    md = render_report({"runs": runs, "missing": [], "efficiency": []})
    ood = _rows(md, "OOD benchmark")
    i = ood.index("| MS-TTA | ours | 60.00 | 61.00 | 62.00 | 63.00 | 61.50 |")  # complete row -> our average
    assert ood[i + 1] == "|  | paper | 64.63 | 81.08 | 51.55 | 65.57 | 65.71 |"
    assert ood[i + 2] == "|  | Δ | -4.63 | -20.08 | +10.45 | -2.57 | -4.21 |"
    j = ood.index("| TDA | ours | 61.00 ± 2.00 | — | — | — | — |")  # 3 seeds, incomplete row
    assert ood[j + 1] == "|  | paper | 60.11 | 80.24 | 50.54 | 64.67 | 63.89 |"
    assert ood[j + 2].startswith("|  | Δ | +0.89 | — |")
    cross = _rows(md, "Cross-dataset benchmark")
    assert cross[0].startswith("| Method |  | Aircraft | Caltech101 | EuroSAT")
    b = cross.index(next(r for r in cross if r.startswith("| Baseline (cache) | ours")))
    assert cross[b + 1].split(" | ")[-3] == "45.30"  # DTD column of the ablation row
    gains = _rows(md, "Mean-shift gains (cross)")
    assert gains[2].startswith("| MS-TTA − Baseline (cache) | ours |") and "+1.00" in gains[2]
    assert "+0.56" in gains[3]  # the paper's DTD improvement


def test_report_other_backbone_has_dashes_and_seeds_table():
    runs = [
        _run("imagenet_a", m, a, s, "RN50", "openai")
        for m, a0 in (("ms-tta", 35.0), ("boostadapter", 34.0))
        for s, a in ((1, a0), (2, a0 + 0.2))
    ]
    runs += [_run("imagenet_a", "ms-tta", 40.0, 1, "ViT-B-32", "laion2b_s34b_b79k")]
    md = render_report({"runs": runs, "missing": [], "efficiency": []})
    assert "## ViT-B-32 (laion2b_s34b_b79k)" in md and "The paper reports no numbers for ViT-B-32" in md
    seeds = _rows(md, "Robustness over seeds")
    assert seeds[2] == (
        "| ImageNet-A | RN50 | MS-TTA | 2 | 34.10 ± 0.14 | 35.10 ± 0.14 | +1.00 | 35.12 | 35.63 ± 0.09 | +0.51 |"
    )


def test_stats():
    assert stats([]) is None and stats([2.0]) == (2.0, None, 1)
    mean, std, n = stats([1.0, 3.0])
    assert (mean, n) == (2.0, 2) and std == pytest.approx(2**0.5)


def test_results_store_replaces_cells_and_rejects_bad_files(tmp_path):
    path = tmp_path / "results.json"
    store = ResultsStore(path)
    store.record({**_run("dtd", "tda", 1.0), "fingerprint": "a"})
    store.record({**_run("dtd", "tda", 2.0), "fingerprint": "b"})
    again = ResultsStore(path)
    assert [r["accuracy"] for r in again.runs] == [2.0]
    assert again.is_done(_run("dtd", "tda", 0), "b") and not again.is_done(_run("dtd", "tda", 0), "a")
    write_reports(tmp_path, plots=False)
    assert (tmp_path / "report.md").is_file() and (tmp_path / "results.csv").read_text().count("\n") == 2
    path.write_text("{not json")
    with pytest.raises(UserError, match="not a readable results file"):
        ResultsStore(path)
    path.write_text(json.dumps({"format": 1}))
    with pytest.raises(UserError, match="no 'runs' list"):
        ResultsStore(path)
