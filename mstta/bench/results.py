"""The results store: `results.json` (every finished cell, written atomically after each one),
`results.csv` (the same runs, flat) and per-cell predictions for the plots.

A *cell* is one (dataset, backbone, pretrained, method, seed) run; sweeps add (param, value).
A cell counts as finished when a run with the same key and the same `fingerprint` (resolved
hyperparameters, views, augmentation) is stored, so a rerun skips it; a cell whose settings
changed is run again and replaces the old entry. Because every write is a whole-file atomic
replace, an interruption at any point leaves the previous valid `results.json`.
"""

from __future__ import annotations

import csv
import hashlib
import json
import platform
import zipfile
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ..atomic import atomic_open
from ..errors import UserError
from .resultfields import check_results

FORMAT = 1
RUN_KEY = ("dataset", "backbone", "pretrained", "method", "seed")
SWEEP_KEY = RUN_KEY + ("param", "value")
FIELD_FILE = "results.json"  # `mstta-bench field`'s results file, keyed by FIELD_KEY
FIELD_KEY = RUN_KEY + ("text", "label_tuned")
CSV_COLUMNS = (
    "dataset",
    "backbone",
    "pretrained",
    "method",
    "seed",
    "accuracy",
    "zero_shot_accuracy",
    "clip_view_accuracy",
    "gain_over_clip",
    "gain_over_clip_views",
    "protocol",
    "n",
    "classes",
    "listing",
    "views",
    "augment",
    "view_mode",
    "fps",
    "adapt_fps",
    "seconds",
    "peak_memory_mb",
    "memory_kind",
    "device",
)


def fingerprint(payload: dict[str, Any]) -> str:
    """Short stable hash of the settings that decide a cell's result."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def versions() -> dict[str, str]:
    """Versions of everything that can change a number."""
    import open_clip
    import torch

    from .._version import __version__

    return {
        "mstta": __version__,
        "torch": torch.__version__,
        "open_clip": open_clip.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


class ResultsStore:
    """`results.json` in an output folder: runs, missing datasets, efficiency measurements.

    Every mutating call saves the whole file atomically, so what is on disk is always complete.
    """

    def __init__(self, path: str | Path, key: tuple[str, ...] = RUN_KEY):
        self.path = Path(path)
        self.key = key
        self.data: dict[str, Any] = {"format": FORMAT, "runs": [], "missing": [], "efficiency": []}
        if self.path.exists():
            self.data.update(self._read())

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UserError(
                f"{self.path}: not a readable results file ({' '.join(str(exc).split())[:100]}); "
                "move it away or pass another --out"
            ) from None
        except RecursionError:  # JSON nested deeper than Python's stack (issue 25): never a results file
            raise UserError(
                f"{self.path}: not a results file (JSON nested too deep to read); move it away or pass another --out"
            ) from None
        if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
            raise UserError(f"{self.path}: not a results file (no 'runs' list); move it away or pass another --out")
        if data.get("format", FORMAT) != FORMAT:
            raise UserError(f"{self.path}: results format {data.get('format')} is not {FORMAT}; pass another --out")
        check_results(self.path, data, self.key)
        return data

    # ------------------------------------------------------------------ runs
    @property
    def runs(self) -> list[dict[str, Any]]:
        return self.data["runs"]

    def cell_key(self, record: dict[str, Any]) -> tuple:
        return tuple(record.get(k) for k in self.key)

    def find(self, key: dict[str, Any]) -> dict[str, Any] | None:
        want = self.cell_key(key)
        return next((r for r in self.runs if self.cell_key(r) == want), None)

    def is_done(self, key: dict[str, Any], fp: str) -> bool:
        """Whether this cell already ran with these settings (so a rerun skips it)."""
        found = self.find(key)
        return found is not None and found.get("fingerprint") == fp

    def record(self, run: dict[str, Any]) -> None:
        """Add or replace a finished cell and save."""
        want = self.cell_key(run)
        self.data["runs"] = [r for r in self.runs if self.cell_key(r) != want] + [run]
        self.save()

    # ------------------------------------------------------------------ missing / efficiency
    def set_missing(self, dataset: str, backbone: str, pretrained: str, reason: str | None) -> None:
        """Record (reason) or clear (None) that a dataset could not run for a backbone; saves."""
        keep = [
            m
            for m in self.data["missing"]
            if (m["dataset"], m["backbone"], m["pretrained"]) != (dataset, backbone, pretrained)
        ]
        if reason is not None:
            keep.append({"dataset": dataset, "backbone": backbone, "pretrained": pretrained, "reason": reason})
        if keep != self.data["missing"]:
            self.data["missing"] = keep
            self.save()

    def efficiency(self, backbone: str, pretrained: str, method: str) -> dict[str, Any] | None:
        return next(
            (
                e
                for e in self.data["efficiency"]
                if (e["backbone"], e["pretrained"], e["method"]) == (backbone, pretrained, method)
            ),
            None,
        )

    def record_efficiency(self, row: dict[str, Any]) -> None:
        """Add or replace an efficiency measurement, copy its fps onto the matching runs; saves."""
        k = (row["backbone"], row["pretrained"], row["method"])
        self.data["efficiency"] = [
            e for e in self.data["efficiency"] if (e["backbone"], e["pretrained"], e["method"]) != k
        ] + [row]
        for r in self.runs:
            if (r["backbone"], r["pretrained"], r["method"]) == k:
                r["fps"] = row["fps"]
        self.save()

    def save(self) -> None:
        write_json(self.path, self.data)


def write_json(path: Path, data: Any) -> None:
    with atomic_open(path, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=False, default=_json_default, allow_nan=False)
        fh.write("\n")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_csv(path: Path, runs: Iterable[dict[str, Any]], extra: tuple[str, ...] = ()) -> None:
    """Runs as a flat CSV: fixed columns, then every hyperparameter as `hp_<name>`, then versions."""
    runs = list(runs)
    hp = sorted({k for r in runs for k in r.get("hyperparameters", {})})
    ver = sorted({k for r in runs for k in r.get("versions", {})})
    cols = list(extra) + list(CSV_COLUMNS) + [f"hp_{k}" for k in hp] + [f"version_{k}" for k in ver]
    with atomic_open(path, "w", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(cols)
        for r in runs:
            row = [r.get(c) for c in list(extra) + list(CSV_COLUMNS)]
            row += [r.get("hyperparameters", {}).get(k) for k in hp]
            row += [r.get("versions", {}).get(k) for k in ver]
            w.writerow(["" if v is None else v for v in row])


# ---------------------------------------------------------------------- predictions
def predictions_path(out: Path, run: dict[str, Any]) -> Path:
    """Where a cell's per-sample predictions live (for the accuracy-over-stream plots)."""
    from .store import slug

    name = f"{run['method']}.npz" if "param" not in run else f"{run['method']}-{run['param']}={run['value']}.npz"
    return (
        out
        / "predictions"
        / slug(f"{run['backbone']}-{run['pretrained']}")
        / slug(run["dataset"])
        / f"seed{run['seed']}"
        / name
    )


def save_predictions(path: Path, predictions: np.ndarray, clip_predictions: np.ndarray, labels: np.ndarray) -> None:
    with atomic_open(path, "wb") as fh:
        np.savez_compressed(
            fh,
            predictions=predictions.astype(np.int32),
            clip_predictions=clip_predictions.astype(np.int32),
            labels=labels.astype(np.int32),
        )


def load_predictions(path: Path) -> dict[str, np.ndarray] | None:
    """A cell's saved predictions, or None when absent/unreadable (plots then skip that curve)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return None
