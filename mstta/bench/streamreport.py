"""The outputs of `mstta-bench streams` (docs/streams.md): results.json (settings, records, curves,
summary), results.csv (a row per stream x seed x method x arm), report.md (the summary tables) and
plots/ (the seed-mean windowed accuracy around each cut), every file written atomically."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import atomic_open
from .plots import save_png
from .store import slug
from .streamsummary import GOALS, mean_curve

CSV_FIELDS = ("kind", "stream", "seed", "method", "arm", "n", "accuracy", "segments", "regret", "stale", "delays")


def _f(x: Any, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if isinstance(x, float):
        text = f"{x:.{digits}f}"
        return text[1:] if text.startswith("-") and float(text) == 0 else text
    return str(x)


def _pct(x: float | None, digits: int) -> str:
    return "—" if x is None else _f(x, digits) + "%"


def write_json(path: Path, data: Any) -> None:
    with atomic_open(path) as fh:
        json.dump(data, fh, indent=1, allow_nan=False, default=lambda o: None)


def write_records_csv(path: Path, records: list[dict]) -> None:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(CSV_FIELDS)
    for r in records:
        w.writerow([json.dumps(r[k]) if isinstance(r[k], list) else r[k] for k in CSV_FIELDS])
    with atomic_open(path) as fh:
        fh.write(buf.getvalue())


def scene_table(rows: list[dict]) -> list[str]:
    out = [
        "| method | arm | acc. per segment | after the cut | Δ CLIP | Δ never | oracle gain kept | regret | "
        "recovery (steps) | stale share |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        rec = _f(r["recovery"], 0) + (f" ({r['not_recovered']} never)" if r["not_recovered"] else "")
        kept = _pct(r["gain_recovered"], 0)
        out.append(
            f"| {r['method']} | {r['arm']} | {' / '.join(_f(x) for x in r['segments'])} | {_f(r['after'])} | "
            f"{_f(r['gain_over_clip'])} | {_f(r['vs_never'])} | {kept} | {_f(r['regret'])} | "
            f"{rec} | {_pct(None if r['stale'] is None else 100 * r['stale'], 1)} |"
        )
    return out


def order_table(rows: list[dict]) -> list[str]:
    kinds = sorted({k for r in rows for k in r["accuracy"]}, key=lambda k: (k != "iid", k))
    out = [
        "| method | arm | " + " | ".join(kinds) + " | i.i.d. cost | false cuts /10k |",
        "| --- | --- | " + " | ".join("---:" for _ in kinds) + " | ---: | ---: |",
    ]
    for r in rows:
        accs = " | ".join(_f(r["accuracy"].get(k)) for k in kinds)
        out.append(f"| {r['method']} | {r['arm']} | {accs} | {_f(r['iid_cost'])} | {_f(r['false_per_10k'], 1)} |")
    return out


def detector_table(rows: list[dict]) -> list[str]:
    if not rows:
        return ["No arm detected a cut."]
    out = [
        "| method | arm | cuts found | mean delay (steps) | false /10k: scene streams | i.i.d. | label-correlated |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        out.append(
            f"| {r['method']} | {r['arm']} | {r['found']}/{r['cuts']} | {_f(r['delay'], 1)} | "
            f"{_f(r['false_per_10k_scenes'], 1)} | {_f(r['false_per_10k_iid'], 1)} | "
            f"{_f(r['false_per_10k_correlated'], 1)} |"
        )
    return out


def report_md(settings: dict[str, Any], summary: dict[str, Any], plots: list[Path], out: Path) -> str:
    lines = [
        "# Streams: adaptation across scene cuts",
        "",
        f"Domains: {' → '.join(settings['domains'])} ({settings['classes']} shared classes); seeds "
        f"{settings['seeds']}; first segment {settings['lead']} samples, later ones up to {settings['segment']}; "
        f"window {settings['window']} steps; regret over {settings['regret_steps']} steps after each cut. "
        "Accuracies in %, means over seeds and streams; definitions in docs/streams.md. "
        f"Goals (issue 29): ≥ {GOALS['gain_recovered']:.0f}% of the oracle's gain kept after the cut, "
        f"≤ {GOALS['iid_cost']} points i.i.d. cost, no worse than never on the return to A, "
        f"detector delay ≤ {GOALS['delay']} steps and ≤ {GOALS['false_per_10k']:.0f} false cut per 10,000 steps.",
        "",
    ]
    for kind, rows in summary["scenes"].items():
        lines += [f"## Scene streams: {kind}", "", *scene_table(rows), ""]
    lines += ["## Streams without a cut (i.i.d., label-correlated)", "", *order_table(summary["orders"]), ""]
    lines += ["## The cut detector", "", *detector_table(summary["detector"]), ""]
    if plots:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.relative_to(out).as_posix()})" for p in plots] + [""]
    return "\n".join(lines)


def curve_plots(out: Path, curves: dict[str, dict], window: int, methods: list[str]) -> list[Path]:
    """One figure per scene stream x cut for each of `methods`: every arm's seed-mean windowed
    accuracy, the cut at step 0."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    groups: dict[tuple, list[str]] = {}
    for key in curves:
        kind, stream, method, arm, cut = key.split("|")
        if method not in methods:
            continue
        groups.setdefault((kind, stream, method, cut), []).append(arm)
    written = []
    for (kind, stream, method, cut), arms in sorted(groups.items()):
        fig = Figure(figsize=(7, 4))
        ax = fig.add_subplot()
        colours = colormaps["tab20"]
        for i, arm in enumerate(arms):
            got = mean_curve(curves, "|".join((kind, stream, method, arm, cut)))
            if got is not None:
                y, pre = got
                bold = arm in ("never", "oracle")  # the two references drawn thicker, in black and grey
                colour = {"never": "black", "oracle": "0.55"}.get(arm, colours(i % 20))
                ax.plot(np.arange(len(y)) - pre, y, label=arm, lw=1.8 if bold else 1.0, color=colour)
        ax.axvline(0, color="k", lw=0.8, ls="--")
        ax.set_xlabel("steps from the cut")
        ax.set_ylabel(f"accuracy over the last {window} steps (%)")
        ax.set_title(f"{method} · {kind} {stream} · cut {int(cut) + 1}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
        written.append(save_png(fig, out / "plots" / f"{slug(f'{kind}-{stream}-{method}-cut{int(cut) + 1}')}.png"))
    return written


def write_reports(out: Path, settings: dict, result: dict, summary: dict, plots: bool = True) -> Path:
    """Every output of a run into `out` (created); returns report.md's path."""
    out.mkdir(parents=True, exist_ok=True)
    written = curve_plots(out, result["curves"], settings["window"], settings["all_arms_for"]) if plots else []
    write_json(out / "results.json", {"settings": settings, **result, "summary": summary})
    write_records_csv(out / "results.csv", result["records"])
    path = out / "report.md"
    with atomic_open(path) as fh:
        fh.write(report_md(settings, summary, written, out))
    return path
