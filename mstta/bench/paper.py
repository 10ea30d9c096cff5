"""The paper's reported numbers (`mstta/resources/paper_results.yaml`) and the name maps between
the paper's keys and ours: benchmarks (dataset groups), methods and backbones.

Nothing here is measured: every value is looked up as printed in the paper. A backbone the
paper does not report (anything but ViT-B-16 / RN50 with OpenAI weights) has no paper values.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

PAPER_FILE = Path(__file__).resolve().parent.parent / "resources" / "paper_results.yaml"

# Dataset groups, in the paper's column order.
OOD = ("imagenet_a", "imagenet_r", "imagenet_sketch", "imagenet_v2")
CROSS = (
    "fgvc_aircraft",
    "caltech101",
    "eurosat",
    "oxford_flowers",
    "oxford_pets",
    "sun397",
    "ucf101",
    "stanford_cars",
    "dtd",
    "food101",
)
GROUPS = {"ood": OOD, "cross": CROSS, "all": OOD + CROSS}

# Our method names -> the paper's row keys (main tables). Every reading of MS-TTA is shown against
# the paper's MS-TTA row (and every baseline against its baseline row); `context.HELD_AGAINST_PAPER`
# names the one the report holds against it per table (docs/benchmark.md, "Two readings").
PAPER_METHOD = {
    "zero-shot": "clip",
    "tda": "tda",
    "boostadapter": "boostadapter",
    "ms-tta": "ms_tta",
    "ms-tta+boost": "ms_tta",
    "ms-tta+boost@original": "ms_tta",
}
BASELINES = ("baseline", "baseline+boost", "baseline+boost@original")
# (architecture, pretrained) -> the paper's backbone key.
PAPER_BACKBONE = {("ViT-B-16", "openai"): "vit_b16", ("RN50", "openai"): "rn50"}
SHORT_NAME = {"imagenet_a": "A", "imagenet_r": "R", "imagenet_sketch": "S", "imagenet_v2": "V2"}
# Sweep parameter (EngineConfig field) -> (paper ablation table, the row key of the value).
ABLATION = {
    "k": ("ablation_k", "k"),
    "alpha": ("ablation_alpha", "alpha"),
    "lam": ("ablation_lambda", "lambda"),
    "ms_steps": ("ablation_mean_shift_steps", "steps"),
}


@lru_cache(maxsize=1)
def paper() -> dict[str, Any]:
    """The parsed paper results file (read once)."""
    return yaml.safe_load(PAPER_FILE.read_text(encoding="utf-8"))


def dataset_label(key: str) -> str:
    """The paper's column name of a dataset (`imagenet_a` -> ImageNet-A); other keys as given."""
    entry = paper()["datasets"].get(key)
    return entry["paper_name"] if entry else key


def dataset_name(key: str) -> str:
    """A dataset's display name: the paper's column name, or an image folder's own name."""
    if key.startswith("imagefolder:"):
        return Path(key[len("imagefolder:") :]).name or key
    return dataset_label(key)


def benchmark_of(key: str) -> str | None:
    """'ood', 'cross' or None (a dataset outside the paper's two tables)."""
    if key in OOD:
        return "ood"
    if key in CROSS:
        return "cross"
    return None


def backbone_key(backbone: str, pretrained: str) -> str | None:
    """The paper's key (`vit_b16`, `rn50`) of a model, or None when the paper does not report it."""
    return PAPER_BACKBONE.get((backbone, pretrained))


def main_value(backbone: str | None, method: str, column: str, benchmark: str | None = None) -> float | None:
    """The paper's accuracy of a method in a column (a dataset key, or `average` with
    `benchmark` 'ood'/'cross') of the main OOD / cross-dataset tables, the plug-in table
    (tda+ms, boostadapter+ms) or the baseline-vs-MS-TTA ablation (baseline); None where the
    paper reports none (or for a backbone key of None)."""
    bench = benchmark if column == "average" else benchmark_of(column)
    if backbone is None or bench is None:
        return None
    p = paper()
    if method in PAPER_METHOD:
        table = p["ood_benchmark" if bench == "ood" else "cross_dataset_benchmark"]
        return table.get(backbone, {}).get(PAPER_METHOD[method], {}).get(column)
    if method in ("tda+ms", "boostadapter+ms"):
        plug = p["plug_in"]
        if bench != "cross" or backbone != plug["backbone"]:
            return None
        return plug[method.split("+")[0]]["with_ms"].get(column)
    if method in BASELINES:
        abl = p["ablation_baseline_vs_ms_tta"]["cross_dataset" if bench == "cross" else "ood"]
        return abl["baseline"].get(column) if backbone == abl["backbone"] else None
    return None


def dataset_stats(key: str) -> dict[str, Any] | None:
    """The paper's dataset-statistics row of a dataset ({classes, test_samples, ...}), or None."""
    return paper()["datasets"].get(key)


def seed_row(dataset: str) -> dict[str, Any] | None:
    """The paper's 5-seed robustness row of a dataset (MS-TTA mean/std, BoostAdapter), if any."""
    return paper()["seed_robustness"]["rows"].get(dataset)


def efficiency_row(method: str) -> dict[str, Any] | None:
    """The paper's efficiency row (fps, memory_gb, ood_avg, cross_avg; RTX 3090, ViT-B/16)."""
    key = PAPER_METHOD.get(method)
    return paper()["efficiency"]["rows"].get(key) if key else None


def ablation(param: str) -> tuple[list[str], list[dict[str, Any]]] | None:
    """(datasets, rows) of the paper's ablation table for a sweep parameter, or None."""
    if param not in ABLATION:
        return None
    table = paper()[ABLATION[param][0]]
    return list(table["datasets"]), list(table["rows"])


def ablation_row(param: str, value: Any) -> dict[str, Any] | None:
    """The paper's ablation row at `param=value` (ViT-B/16; dataset keys, maybe average/fps), or None."""
    found = ablation(param)
    if found is None:
        return None
    key = ABLATION[param][1]
    for row in found[1]:
        try:
            if abs(float(row[key]) - float(value)) < 1e-9:
                return row
        except (TypeError, ValueError):
            return None
    return None


def ablation_value(param: str, value: Any, dataset: str) -> float | None:
    """The paper's accuracy at `param=value` on `dataset` in its ablation table, or None."""
    row = ablation_row(param, value)
    return row.get(dataset) if row else None
