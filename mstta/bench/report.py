"""`report.md`: our numbers beside the paper's, in the paper's table layouts.

Every table cell block has three rows per method: `ours` (mean ± sample std over seeds when
several ran), `paper` (as printed; — where the paper has no number, e.g. other backbones) and
`Δ` (ours − paper). Averages are ours only when every dataset of the table ran for that method
(the paper's average covers all of them). Tables: OOD (A, R, S, V2, Avg), cross-dataset
(10 datasets + Average), each with two CLIP rows (the original image; the protocol's views with
no cache) and each method's gain over both, the mean-shift gains (baseline → MS-TTA for both
readings, TDA → TDA+MS, BoostAdapter → BoostAdapter+MS), the test samples read against the paper's
dataset statistics, seeds, efficiency (`efficiencyreport`), other datasets, missing datasets.
The cells (numbers, Markdown tables, row labels) come from `reportfmt`; `sweep` and `fieldreport`
still import them from here.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..atomic import atomic_open
from ..engine.methods import get_method
from . import paper
from .context import Row, row_order, row_title
from .efficiencyreport import efficiency_table
from .paper import dataset_name
from .papertable import caption
from .reportfmt import DASH, backbone_label, diff, fmt, fmt_stats, method_label, stats, table
from .results import ResultsStore, write_csv

GAIN_PAIRS = (
    ("baseline+boost@original", "ms-tta+boost@original"),
    ("baseline+boost", "ms-tta+boost"),
    ("baseline", "ms-tta"),
    ("tda", "tda+ms"),
    ("boostadapter", "boostadapter+ms"),
)


# ---------------------------------------------------------------------- runs grouped
def grouped(runs: Iterable[dict[str, Any]]) -> dict[tuple[str, str], dict[str, dict[str, list[float]]]]:
    """(backbone, pretrained) -> dataset -> method -> accuracies over seeds (seed order)."""
    out: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in sorted(runs, key=lambda r: r["seed"]):
        out[(r["backbone"], r["pretrained"])][r["dataset"]][r["method"]].append(float(r["accuracy"]))
    return out


def clip_views(runs: Iterable[dict[str, Any]]) -> dict[tuple[str, str], dict[str, dict[str, list[float]]]]:
    """(backbone, pretrained) -> dataset -> protocol -> CLIP-on-views accuracies over seeds (one per
    seed: every method with the same protocol reads the same CLIP logits), protocols other than the
    original image only."""
    out: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(dict)))
    for r in runs:
        proto = r.get("clip_path", r.get("protocol"))  # records before issue 33: the protocol's words
        if proto and proto not in ("original image", "the original image") and "param" not in r:
            out[(r["backbone"], r["pretrained"])][r["dataset"]][proto].setdefault(r["seed"], r["clip_view_accuracy"])
    return {
        k: {d: {p: [v[s] for s in sorted(v)] for p, v in by_p.items()} for d, by_p in by_d.items()}
        for k, by_d in out.items()
    }


# ---------------------------------------------------------------------- tables
def _columns(bench: str) -> tuple[list[str], list[str]]:
    cols = list(paper.OOD if bench == "ood" else paper.CROSS)
    labels = [paper.SHORT_NAME.get(d, paper.dataset_label(d)) for d in cols]
    return cols, labels + ["Avg" if bench == "ood" else "Average"]


def benchmark_table(
    by_ds: dict[str, dict[str, list[float]]],
    methods: list[str],
    bench: str,
    pkey: str | None,
    views: dict[str, dict[str, list[float]]] | None = None,
) -> list[str]:
    """The paper's OOD or cross-dataset table with ours / paper / Δ rows per method; after the CLIP
    row, one `CLIP on <protocol>` row per view protocol that ran (ours only: the paper has none)."""
    cols, labels = _columns(bench)
    rows = []
    for m in methods:
        if bench == "ood" or "@" not in m:  # forced view modes belong to the OOD table
            ours = [stats(by_ds.get(d, {}).get(m, [])) for d in cols]
            if any(ours):
                avg = statistics.fmean(s[0] for s in ours) if all(ours) else None
                ref = [paper.main_value(pkey, m, d) for d in cols] + [paper.main_value(pkey, m, "average", bench)]
                means = [s[0] if s else None for s in ours] + [avg]
                rows.append([method_label(m, bench), "ours"] + [fmt_stats(s) for s in ours] + [fmt(avg)])
                rows.append(["", "paper"] + [fmt(v) for v in ref])
                rows.append(["", "Δ"] + [fmt(diff(a, b), signed=True) for a, b in zip(means, ref)])
        if m == "zero-shot" or (m == methods[0] and "zero-shot" not in methods):
            protos = sorted({p for d in cols for p in (views or {}).get(d, {})})
            for p in protos:
                ours = [stats((views or {}).get(d, {}).get(p, [])) for d in cols]
                avg = statistics.fmean(s[0] for s in ours) if all(ours) else None
                rows.append([f"CLIP on {p} (no cache)", "ours"] + [fmt_stats(s) for s in ours] + [fmt(avg)])
    return table(["Method", ""] + labels, rows)


def clip_gains_table(runs: list[dict[str, Any]], methods: list[str], bench: str) -> list[str]:
    """Each method's gain over the two CLIP rows per dataset, `+a / +b`: a = over CLIP on the
    original image (the paper's CLIP row), b = over CLIP on the method's own views and prediction
    path with no cache (its protocol's λ = 0). Means over seeds."""
    cols, labels = _columns(bench)
    cell: dict = defaultdict(lambda: defaultdict(lambda: ([], [])))
    for r in runs:
        if "gain_over_clip" in r and r["dataset"] in cols:
            a, b = cell[r["method"]][r["dataset"]]
            a.append(float(r["gain_over_clip"]))
            b.append(float(r["gain_over_clip_views"]))
    rows = []
    for m in methods:
        if m == "zero-shot" or m not in cell or (bench != "ood" and "@" in m):
            continue
        means = [
            (statistics.fmean(cell[m][d][0]), statistics.fmean(cell[m][d][1])) if cell[m][d][0] else None for d in cols
        ]
        done = [x for x in means if x is not None]
        avg = (
            (statistics.fmean(x[0] for x in done), statistics.fmean(x[1] for x in done))
            if len(done) == len(cols)
            else None
        )
        rows.append(
            [method_label(m, bench)] + [f"{fmt(x[0], True)} / {fmt(x[1], True)}" if x else DASH for x in means + [avg]]
        )
    return table(["Gain over CLIP (original / own views)"] + labels, rows) if rows else []


CLIP_NOTE = (
    "CLIP rows: `CLIP (zero-shot)` scores the original image (view 0), the paper's CLIP row; "
    "`CLIP on <views> (no cache)` is zero-shot CLIP on the protocol's views with no cache — the mean "
    "logits of the most confident views, i.e. that protocol's λ = 0. Protocols that predict from the "
    "original image have λ = 0 equal to the CLIP row. ‡ marks the row held against the paper's row: "
    "the `+boost` reading of MS-TTA (and its baseline) predicting from the original image. Why on OOD: "
    "the paper's own λ = 0 row (ImageNet-A 49.86) equals CLIP on the original image (49.89), as on "
    "Flowers102 (66.99 = 66.99), so its MS-TTA predicts from the original image there; on the "
    "cross-dataset sets every reading already does. The other readings (`+boost` on confident views, "
    "MS-TTA in TDA's protocol) are shown beside it against the same paper numbers."
)


def gains_table(by_ds: dict[str, dict[str, list[float]]], bench: str, pkey: str | None) -> list[str]:
    """Mean-shift gains (MS variant − its base) per dataset, ours vs the paper's improvement rows."""
    cols = list(paper.OOD if bench == "ood" else paper.CROSS)
    labels = [paper.SHORT_NAME.get(d, paper.dataset_label(d)) for d in cols]
    rows = []
    for base, ms in GAIN_PAIRS:
        ours = []
        for d in cols:
            a, b = stats(by_ds.get(d, {}).get(ms, [])), stats(by_ds.get(d, {}).get(base, []))
            ours.append(a[0] - b[0] if a and b else None)
        if all(v is None for v in ours):
            continue
        avg = statistics.fmean(ours) if all(v is not None for v in ours) else None
        ref = [paper_gain(pkey, base, ms, c, bench) for c in cols + ["average"]]
        name = f"{method_label(ms, bench)} − {row_title(base)}"
        rows.append([name, "ours"] + [fmt(v, True) for v in ours + [avg]])
        rows.append(["", "paper"] + [fmt(v, True) for v in ref])
    if not rows:
        return []
    return table(["Gain", ""] + labels + ["Avg" if bench == "ood" else "Average"], rows)


def paper_gain(pkey: str | None, base: str, ms: str, column: str, bench: str) -> float | None:
    """The paper's printed improvement row for a (base, MS) pair (ViT-B/16 only)."""
    p = paper.paper()
    if pkey is None:
        return None
    if Row.parse(ms).method in ("ms-tta", "ms-tta+boost"):
        t = p["ablation_baseline_vs_ms_tta"]["cross_dataset" if bench == "cross" else "ood"]
        return t["improvement"].get(column) if t["backbone"] == pkey else None
    if bench == "cross" and p["plug_in"]["backbone"] == pkey:
        return p["plug_in"][base]["improvement"].get(column)
    return None


def seeds_table(
    groups: dict,
) -> list[str]:
    """The paper's seed-robustness table: BoostAdapter vs MS-TTA (mean ± std over seeds)."""
    rows = []
    for (bb, pre), by_ds in groups.items():
        pkey = paper.backbone_key(bb, pre)
        for d, by_m in by_ds.items():
            for reading in ("ms-tta+boost@original", "ms-tta+boost", "ms-tta"):
                ms, ba = stats(by_m.get(reading, [])), stats(by_m.get("boostadapter", []))
                if not ms or ms[2] < 2:
                    continue
                ref = paper.seed_row(d)
                ref = ref if ref and ref["backbone"] == pkey else None
                rows.append(
                    [
                        dataset_name(d),
                        backbone_label(bb, pre),
                        method_label(reading, paper.benchmark_of(d)),
                        str(ms[2]),
                        fmt_stats(ba),
                        fmt_stats(ms),
                        fmt(diff(ms[0], ba[0] if ba else None), True),
                        fmt(ref["boostadapter"]) if ref else DASH,
                        f"{ref['ms_tta_mean']:.2f} ± {ref['ms_tta_std']:.2f}" if ref else DASH,
                        fmt(ref["improvement"], True) if ref else DASH,
                    ]
                )
    if not rows:
        return []
    if all(r[-1] == DASH for r in rows):  # no paper row for any of these (a custom set): no paper columns
        rows = [r[:-3] for r in rows]
    return table(
        [
            "Dataset",
            "Backbone",
            "Reading",
            "Seeds",
            "BoostAdapter",
            "MS-TTA (mean ± std)",
            "Improv.",
            "paper BoostAdapter",
            "paper MS-TTA",
            "paper Improv.",
        ][: len(rows[0])],
        rows,
    )


def other_table(by_ds: dict[str, dict[str, list[float]]], methods: list[str]) -> list[str]:
    cols = [d for d in by_ds if paper.benchmark_of(d) is None]
    if not cols:
        return []
    rows = [[row_title(m)] + [fmt_stats(stats(by_ds[d].get(m, []))) for d in cols] for m in methods]
    return table(["Method"] + [dataset_name(d) for d in cols], rows)


def describe_protocol(r: dict[str, Any]) -> str:
    """What a cell read, predicted from and its text set, in words: the record's `protocol` (built from
    its family, `mstta.engine.protocol.describe`); a record from before issue 33: rebuilt from its views."""
    if str(r.get("protocol", "")).startswith("reads "):
        return r["protocol"]
    method = Row.parse(r["method"]).method
    views, augment, confident = r.get("views", 1), r.get("augment"), r.get("view_mode") == "confident"
    many = views > 1 and method != "zero-shot"
    reads = (
        f"{views - 1} {augment} views + original"
        if many and (get_method(method).boosting_views or confident)
        else "original image"
    )
    source = "the confident views' mean" if many and confident else "the original image"
    return f"{reads}; predicts from {source}"


def protocol_table(runs: list[dict[str, Any]]) -> list[str]:
    """Per row and benchmark: the views it read and what it predicted from (from the cells)."""
    seen: dict = defaultdict(dict)
    for r in runs:
        if "views" in r and "param" not in r:
            seen[r["method"]].setdefault(r.get("benchmark") or "other", describe_protocol(r))
    if not seen:
        return []
    benches = [b for b in ("ood", "cross", "other") if any(b in v for v in seen.values())]
    names = {"ood": "OOD", "cross": "Cross-dataset", "other": "Other datasets"}
    return table(
        ["Method"] + [names[b] for b in benches],
        [[row_title(m)] + [seen[m].get(b, DASH) for b in benches] for m in row_order(seen)],
    )


def samples_table(runs: list[dict[str, Any]]) -> list[str]:
    """Test samples read per dataset (and listing) beside the paper's dataset statistics; a
    difference is flagged (`--listing peer` reads the peers' lists, `--limit` cuts a stream)."""
    seen: dict = {}
    for r in runs:
        if "n" in r and "classes" in r:
            seen.setdefault((r["dataset"], r.get("listing", "full"), r.get("limit")), (r["n"], r["classes"]))
    if not seen:
        return []
    rows = []
    for (d, listing, limit), (n, classes) in sorted(seen.items(), key=lambda kv: tuple(map(str, kv[0]))):
        ref = paper.dataset_stats(d)
        pn, pc = (ref["test_samples"], ref["classes"]) if ref else (None, None)
        if ref is None:
            flag = DASH
        elif limit:
            flag = f"--limit {limit}"
        else:
            flag = "same" if (n, classes) == (pn, pc) else f"DIFFERS ({n - pn:+,} samples, {classes - pc:+} classes)"
        rows.append(
            [
                dataset_name(d),
                listing,
                f"{n:,}",
                str(classes),
                DASH if pn is None else f"{pn:,}",
                DASH if pc is None else str(pc),
                flag,
            ]
        )
    header = ["Dataset", "Listing", "Samples read", "Classes", "paper samples", "paper classes", "Check"]
    if all(paper.dataset_stats(d) is None for d, _, _ in seen):  # custom sets only: no paper columns
        header, rows = header[:4], [r[:4] for r in rows]
    return table(header, rows)


# ---------------------------------------------------------------------- the report
TITLES = {
    "ood": "OOD benchmark (paper Table: ImageNet variants)",
    "cross": "Cross-dataset benchmark (paper Table: 10 datasets)",
}


def titled(title: str, body: list[str]) -> list[str]:
    """A `## title` section around `body`, or nothing when the body is empty."""
    return [f"## {title}", ""] + body + [""] if body else []


def report_header(runs: list[dict[str, Any]]) -> list[str]:
    """The title, what the report was generated from, and how to read its cells."""
    vers = runs[-1].get("versions", {}) if runs else {}
    devices = sorted({r.get("device", "?") for r in runs})
    return [
        "# MS-TTA benchmark report",
        "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M')} from `results.json` ({len(runs)} runs; device "
        f"{', '.join(devices) or DASH}; " + ", ".join(f"{k} {v}" for k, v in vers.items()) + ").",
        "",
        caption(runs),
        "",
        "Top-1 accuracy (%). `ours`: this benchmark (mean ± sample std when several seeds ran); "
        "`paper`: as reported in the paper (`mstta/resources/paper_results.yaml`), — where it reports none; "
        "`Δ` = ours − paper. An average is ours only when every dataset of the table ran.",
        "",
    ]


def protocol_section(runs: list[dict[str, Any]]) -> list[str]:
    """The `Protocol of each row` section, or nothing when no cell says its views."""
    proto = protocol_table(runs)
    intro = (
        "The views each method read (its own code's kind: crops for "
        "the boosting methods, AugMix for TDA's protocol on OOD) and what it predicted from."
    )
    return titled("Protocol of each row", [intro, ""] + proto) if proto else []


def bench_section(
    by_ds: dict[str, dict[str, list[float]]],
    bb_runs: list[dict[str, Any]],
    methods: list[str],
    bench: str,
    pkey: str | None,
    views: dict[str, dict[str, list[float]]] | None,
) -> list[str]:
    """One benchmark's table of one backbone, its gains over the two CLIP rows and its mean-shift gains."""
    lines = [f"### {TITLES[bench]}", ""]
    lines += benchmark_table(by_ds, methods, bench, pkey, views) + ["", CLIP_NOTE, ""]
    over = clip_gains_table(bb_runs, methods, bench)
    if over:
        lines += (
            [f"#### Gains over the two CLIP rows ({bench})", ""]
            + over
            + [
                "",
                "`+a / +b`: the method minus CLIP on the original image / minus CLIP on its own views "
                "and prediction path with no cache (its λ = 0).",
                "",
            ]
        )
    gains = gains_table(by_ds, bench, pkey)
    if gains:
        lines += [f"#### Mean-shift gains ({bench})", ""] + gains + [""]
    return lines


def backbone_section(
    bb: str,
    pre: str,
    by_ds: dict[str, dict[str, list[float]]],
    runs: list[dict[str, Any]],
    views: dict[str, dict[str, list[float]]] | None,
) -> list[str]:
    """One backbone's section: its OOD and cross-dataset tables, then its other datasets."""
    pkey = paper.backbone_key(bb, pre)
    methods = row_order(m for d in by_ds.values() for m in d)
    bb_runs = [r for r in runs if (r["backbone"], r["pretrained"]) == (bb, pre)]
    lines = [f"## {backbone_label(bb, pre)}", ""]
    if pkey is None:
        lines += [f"The paper reports no numbers for {bb} with weights '{pre}': paper columns show {DASH}.", ""]
    for bench in ("ood", "cross"):
        if any(paper.benchmark_of(d) == bench for d in by_ds):
            lines += bench_section(by_ds, bb_runs, methods, bench, pkey, views)
    other = other_table(by_ds, methods)
    if other:
        lines += ["### Other datasets (not in the paper's tables)", ""] + other + [""]
    return lines


def missing_section(missing: list[dict[str, Any]]) -> list[str]:
    """The `Missing datasets` section: each dataset that could not run and why."""
    rows = [
        [m["dataset"], backbone_label(m["backbone"], m["pretrained"]), m["reason"].replace("|", "\\|")] for m in missing
    ]
    return titled("Missing datasets", table(["Dataset", "Backbone", "Reason"], rows)) if rows else []


def render_report(data: dict[str, Any], plots: Sequence[Path] = (), out: Path | None = None) -> str:
    """report.md's text from results.json's data; `plots` linked relative to `out`."""
    runs = data.get("runs", [])
    groups = grouped(runs)
    lines = report_header(runs) + protocol_section(runs)
    views = clip_views(runs)
    for (bb, pre), by_ds in groups.items():
        lines += backbone_section(bb, pre, by_ds, runs, views.get((bb, pre)))
    lines += titled("Test samples read (paper: dataset statistics table)", samples_table(runs))
    lines += titled("Robustness over seeds (stream order)", seeds_table(groups))
    lines += titled("Efficiency", efficiency_table(data, groups))
    lines += missing_section(data.get("missing", []))
    links = [f"- [{p.name}]({p.relative_to(out) if out else p})" for p in plots]
    lines += titled("Plots", links)
    return "\n".join(lines)


def write_reports(out: Path, plots: bool = True) -> Path:
    """Rebuild results.csv, the accuracy-over-stream plots and report.md from results.json."""
    store = ResultsStore(out / "results.json")
    write_csv(out / "results.csv", store.runs)
    pngs: list[Path] = []
    if plots:
        from .plots import accuracy_curves

        pngs = accuracy_curves(out, store.runs)
    path = out / "report.md"
    with atomic_open(path, "w") as fh:
        fh.write(render_report(store.data, pngs, out))
    return path
