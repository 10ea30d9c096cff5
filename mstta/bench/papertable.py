"""A paper-ready table of a results file (`--format md|latex`): a row per method [text set], a column
per dataset and metric (each metric its own column), every cell the mean ± sample std over seeds
(the mean alone for one seed), datasets labelled by the paper's name or an image folder's own name,
and a caption that states the logit scale, the view mode and the text set of the rows. No paper
rows: these are our numbers only (report.md holds them beside the published ones)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from ..atomic import atomic_open
from .context import row_order, row_title
from .paper import dataset_name

FORMATS = ("md", "latex")
RUN_METRICS = (("Acc", "accuracy"),)
FIELD_METRICS = (("Acc", "accuracy"), ("ECE", "ece"), ("AUROC", "auroc"))
_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{"}
_LATEX.update({"}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"})


def mean_std(values: Sequence[float | None]) -> tuple[float, float | None] | None:
    """(mean, sample std or None for one value) of the values that exist, None for none."""
    v = [float(x) for x in values if x is not None]
    if not v:
        return None
    return statistics.fmean(v), (statistics.stdev(v) if len(v) > 1 else None)


def _cell(s: tuple[float, float | None] | None, latex: bool) -> str:
    if s is None:
        return "--" if latex else "—"
    mean, std = s
    if std is None:
        return f"{mean:.2f}"
    return f"{mean:.2f} $\\pm$ {std:.2f}" if latex else f"{mean:.2f} ± {std:.2f}"


def _row_key(r: dict[str, Any]) -> tuple[str, str]:
    return r["method"], r.get("text") or "peer"


def rows_of(runs: list[dict[str, Any]], metrics: Sequence[tuple[str, str]], latex: bool) -> tuple[list, list]:
    """(header, body) of the table: the CLIP row (the original image) first, then every row."""
    datasets = list(dict.fromkeys(r["dataset"] for r in runs))
    by: dict = defaultdict(lambda: defaultdict(list))
    for r in runs:
        if "param" not in r and not r.get("label_tuned"):
            by[_row_key(r)][r["dataset"]].append(r)
    header = ["Method [text set]"] + [f"{dataset_name(d)} {label}" for d in datasets for label, _ in metrics]
    clip: dict = defaultdict(dict)
    for r in runs:
        clip[r["dataset"]].setdefault(r["seed"], r.get("zero_shot_accuracy"))
    body = [
        ["CLIP (zero-shot, original image)"]
        + [
            _cell(mean_std(list(clip[d].values())) if f == "accuracy" else None, latex)
            for d in datasets
            for _, f in metrics
        ]
    ]
    order = row_order(m for m, _ in by)
    for key in sorted(by, key=lambda k: (order.index(k[0]), k[1])):
        cells = [_cell(mean_std([r.get(f) for r in by[key][d]]), latex) for d in datasets for _, f in metrics]
        body.append([f"{row_title(key[0])} [{key[1]}]"] + cells)
    return header, body


def caption(runs: list[dict[str, Any]]) -> str:
    """What every number rests on: seeds, logit scale(s), view mode per dataset, text sets."""
    seeds = sorted({r["seed"] for r in runs})
    scales = sorted({f"{r['logit_scale']:g} ({r.get('logit_scale_from', '?')})" for r in runs if "logit_scale" in r})
    modes = sorted({f"{dataset_name(r['dataset'])}: {r.get('view_mode') or 'original'}" for r in runs})
    texts = sorted({r.get("text") or "peer" for r in runs})
    return (
        f"Mean ± sample std over {len(seeds)} seed(s) ({', '.join(map(str, seeds))}); logit scale "
        f"{', '.join(scales) or 'not recorded'}; view mode {'; '.join(modes)}; text set(s) {', '.join(texts)}."
    )


def latex_escape(text: str) -> str:
    """Text as LaTeX sets it literally (its special characters escaped; ± as math)."""
    return "".join(_LATEX.get(c, c) for c in text).replace("±", "$\\pm$").replace("—", "--")


def render(runs: list[dict[str, Any]], metrics: Sequence[tuple[str, str]], fmt: str) -> str:
    """The table as Markdown or a LaTeX `tabular` (booktabs) with its caption."""
    latex = fmt == "latex"
    header, body = rows_of(runs, metrics, latex)
    if not latex:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines + ["", caption(runs), ""])
    lines = [
        "\\begin{table}",
        "\\centering",
        f"\\caption{{{latex_escape(caption(runs))}}}",
        "\\begin{tabular}{l" + "r" * (len(header) - 1) + "}",
        "\\toprule",
        " & ".join(latex_escape(h) for h in header) + " \\\\",
        "\\midrule",
    ]
    lines += [" & ".join([latex_escape(row[0])] + row[1:]) + " \\\\" for row in body]
    return "\n".join(lines + ["\\bottomrule", "\\end{tabular}", "\\end{table}", ""])


def add_format_flag(p) -> None:
    """`--format md|latex` of `run` and `field`."""
    p.add_argument(
        "--format",
        choices=FORMATS,
        help="also write a paper-ready table, <out>/table.md or <out>/table.tex: a column per dataset and "
        "metric, mean ± std over seeds, the scale, view mode and text set in its caption",
    )


def write_table(out: Path, runs: list[dict[str, Any]], metrics: Sequence[tuple[str, str]], fmt: str) -> Path:
    """`<out>/table.md` or `<out>/table.tex` (atomic)."""
    path = Path(out) / ("table.tex" if fmt == "latex" else "table.md")
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write(render(runs, metrics, fmt))
    return path
