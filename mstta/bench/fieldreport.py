"""The field table's outputs from its `results.json`: `results.csv` (one row per cell), `report.md`
(per backbone x dataset: every row's metrics, mean ± std over seeds, beside the published rows of
the MS-TTA, DPE and DOTA papers with their sources) and the plots (accuracy against ECE; accuracy
over the stream). docs/field.md defines every column."""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from ..atomic import atomic_open
from . import paper
from .context import row_order, row_title
from .papertable import FIELD_METRICS, caption, rows_of
from .reportfmt import DASH, table
from .results import FIELD_FILE, FIELD_KEY, ResultsStore

CSV_COLUMNS = (
    "dataset",
    "backbone",
    "pretrained",
    "method",
    "text",
    "seed",
    "label_tuned",
    "accuracy",
    "ece",
    "nll",
    "auroc",
    "fpr95",
    "known_accuracy",
    "mixed_auroc",
    "mixed_fpr95",
    "mixed_known_accuracy",
    "orders",
    "orders_mean",
    "orders_std",
    "worst10",
    "first_half",
    "second_half",
    "zero_shot_accuracy",
    "clip_view_accuracy",
    "gain_over_clip",
    "gain_over_clip_views",
    "samples_per_s",
    "state_bytes",
    "marks",
    "family",
    "text_requested",
    "protocol",
    "view_mode",
    "logit_scale",
    "logit_scale_from",
    "n",
    "classes",
    "views",
    "augment",
    "precision",
    "ece_bins",
    "mix_with",
    "device",
    "fingerprint",
)
# (report column, record field, signed)
REPORT_COLUMNS = (
    ("Acc", "accuracy", False),
    ("Δ CLIP", "gain_over_clip", True),
    ("Δ CLIP views", "gain_over_clip_views", True),
    ("ECE", "ece", False),
    ("NLL", "nll", False),
    ("AUROC", "auroc", False),
    ("FPR95", "fpr95", False),
    ("Known acc", "known_accuracy", False),
    ("AUROC mixed", "mixed_auroc", False),
    ("Known acc mixed", "mixed_known_accuracy", False),
    ("Orders mean ± std", "orders_mean", False),
    ("Worst 10%", "worst10", False),
    ("1st half", "first_half", False),
    ("2nd half", "second_half", False),
    ("Samples/s", "samples_per_s", False),
    ("State", "state_bytes", False),
)


def write_field_csv(path: Path, runs: Sequence[dict[str, Any]]) -> None:
    """The field table's results.csv: its CSV_COLUMNS, the marks joined."""
    with atomic_open(path, "w", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for r in runs:
            row = [("; ".join(r.get(c) or []) if c == "marks" else r.get(c)) for c in CSV_COLUMNS]
            w.writerow(["" if v is None else v for v in row])


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    v = [x for x in values if x is not None]
    if not v:
        return None, None
    return statistics.fmean(v), (statistics.stdev(v) if len(v) > 1 else None)


def _cell(values: list[float], signed: bool = False, field: str = "") -> str:
    mean, std = _mean_std(values)
    if mean is None:
        return DASH
    if field == "state_bytes":
        return _bytes(mean)
    if field == "samples_per_s":
        return f"{mean:,.0f}"
    text = f"{mean:+.2f}" if signed else f"{mean:.2f}"
    return text if std is None else f"{text} ± {std:.2f}"


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def row_label(r: dict[str, Any]) -> str:
    """A row's title, with its text set and every mark the method carries."""
    label = f"{row_title(r['method'])} [{r['text']}]"
    if r.get("label_tuned"):
        label += " †label-tuned"
    marks = r.get("marks") or []
    return label + (f" ({'; '.join(marks)})" if marks else "")


def dataset_tables(runs: list[dict[str, Any]]) -> list[str]:
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[(r["backbone"], r["pretrained"], r["dataset"])].append(r)
    lines: list[str] = []
    for (bb, pre, ds), rs in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        by_row: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
        for r in rs:
            by_row[(r["method"], r["text"], bool(r.get("label_tuned")))].append(r)
        order = row_order(r["method"] for r in rs)
        keys = sorted(by_row, key=lambda k: (order.index(k[0]), k[1], k[2]))
        clip = defaultdict(list)
        for r in rs:
            clip[r["text"]].append(r)
        seeds = sorted({r["seed"] for r in rs})
        n = rs[0].get("n")
        lines += [
            f"### {paper.dataset_name(ds)} · {bb} ({pre})",
            "",
            f"`{ds}`: " + f"{n} samples, {rs[0].get('classes')} classes; seeds {', '.join(map(str, seeds))}; "
            f"{rs[0].get('orders')} stream orders per seed; ECE with {rs[0].get('ece_bins')} bins; " + caption(rs),
            "",
        ]
        body = []
        for text, tr in sorted(clip.items()):  # the CLIP row of each text set: the original image, one value per seed
            per_seed = {r["seed"]: r["zero_shot_accuracy"] for r in tr}
            body.append(
                [f"CLIP zero-shot, original image [{text}]", _cell(list(per_seed.values()))]
                + [DASH] * (len(REPORT_COLUMNS) - 1)
            )
        for k in keys:
            cell_runs = by_row[k]
            row = [row_label(cell_runs[0])]
            for _, fld, signed in REPORT_COLUMNS:
                vals = [r.get(fld) for r in cell_runs]
                if fld == "orders_mean":
                    mean, _ = _mean_std(vals)
                    std, _ = _mean_std([r.get("orders_std") for r in cell_runs])
                    row.append(DASH if mean is None else f"{mean:.2f} ± {std or 0:.2f}")
                else:
                    row.append(_cell(vals, signed, fld))
            body.append(row)
        lines += table(["Method [text set]"] + [c for c, _, _ in REPORT_COLUMNS], body) + [""]
    return lines


def summary_table(runs: list[dict[str, Any]]) -> list[str]:
    """Per backbone: a row per method and text set, a column per dataset and metric (accuracy, ECE,
    AUROC with withheld classes: each its own column), mean ± std over seeds, and what the rows rest
    on (scale, view mode, text set: `papertable.caption`)."""
    lines: list[str] = []
    for bb, pre in sorted({(r["backbone"], r["pretrained"]) for r in runs}):
        rs = [r for r in runs if (r["backbone"], r["pretrained"]) == (bb, pre)]
        header, body = rows_of(rs, FIELD_METRICS, latex=False)
        marked = {row_title(r["method"]) + f" [{r['text']}]": row_label(r) for r in rs if not r.get("label_tuned")}
        body = [[marked.get(row[0], row[0])] + row[1:] for row in body]
        lines += [f"### {bb} ({pre})", ""] + table(header, body) + ["", caption(rs), ""]
    return lines


def published_rows(datasets: Sequence[str]) -> list[str]:
    """The published ViT-B/16 numbers of the run's datasets: the MS-TTA paper's rows and the DPE and
    DOTA papers' (resources/paper_results.yaml, field_papers), each with its source."""
    p = paper.paper()
    cols = [d for d in datasets if d in p["datasets"]]
    if not cols:
        srcs = ["the MS-TTA paper's OOD and cross-dataset tables"] + [s["source"] for s in p.get("field_papers", [])]
        return [
            "No published numbers exist for these datasets (published rows cover the 15 CLIP benchmarks: "
            + "; ".join(srcs)
            + ").",
            "",
        ]
    body = []
    for bench, key in (("ood_benchmark", "ood"), ("cross_dataset_benchmark", "cross")):
        for method, vals in p[bench].get("vit_b16", {}).items():
            if method not in p["methods"]:
                continue
            cells = [vals.get(c) for c in cols]
            if any(v is not None for v in cells):
                body.append((p["methods"][method]["label"], f"MS-TTA paper, {key} table", cells))
    for src in p.get("field_papers", []):
        for label, vals in src["rows"].items():
            cells = [vals.get(c) for c in cols]
            if any(v is not None for v in cells):
                marks = (" †label-tuned" if vals.get("label_tuned") else "") + (
                    " (not training-free)" if vals.get("training_free") is False else ""
                )
                body.append((label + marks, src["source"], cells))
    rows = [[lab, srcname] + [DASH if v is None else f"{v:.2f}" for v in cells] for lab, srcname, cells in body]
    return table(["Published (ViT-B/16)", "Source"] + [paper.dataset_label(c) for c in cols], rows) + [
        "",
        "†label-tuned: its authors chose hyperparameters on the test labels (YBZh/DMN issue #2). Sources: "
        "shared/reference/field-methods.md §4 (transcribed as printed).",
        "",
    ]


def render(data: dict[str, Any], plots: Sequence[Path] = (), out: Path | None = None) -> str:
    runs = data["runs"]
    lines = [
        "# Field table",
        "",
        "Every method row of the registry over the same stored features: accuracy, calibration (ECE, NLL),",
        "open-set detection with the maximum probability (AUROC/FPR95: half the classes withheld; "
        "'mixed': another dataset's samples in the stream), stability over stream orders (mean ± std, worst 10%)",
        "and over the stream (first/second half), speed and state. Definitions: docs/field.md.",
        "",
    ]
    if any(r.get("label_tuned") for r in runs):
        lines += ["**Rows marked †label-tuned used the test labels to choose a hyperparameter** (--label-tuned).", ""]
    lines += ["## Summary", ""] + summary_table(runs) + ["## Per dataset", ""] + dataset_tables(runs)
    lines += ["## Published rows", ""] + published_rows(sorted({r["dataset"] for r in runs}))
    missing = data.get("missing") or []
    if missing:
        lines += (
            ["## Missing datasets", ""]
            + table(
                ["Dataset", "Backbone", "Reason"],
                [[m["dataset"], m["backbone"], m["reason"].replace("|", "\\|")] for m in missing],
            )
            + [""]
        )
    if plots:
        lines += ["## Plots", ""] + [f"- [{p.name}]({p.relative_to(out) if out else p})" for p in plots] + [""]
    return "\n".join(lines)


def write_field_reports(out: Path, plots: bool = True) -> Path:
    """Rebuild results.csv, the plots and report.md from the field's results.json."""
    store = ResultsStore(out / FIELD_FILE, FIELD_KEY)
    runs = sorted(store.runs, key=lambda r: tuple(str(r.get(k)) for k in FIELD_KEY))
    write_field_csv(out / "results.csv", runs)
    pngs: list[Path] = []
    if plots and runs:
        from .fieldplots import field_plots

        pngs = field_plots(out, runs)
    path = out / "report.md"
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write(render(store.data, pngs, out))
    return path
