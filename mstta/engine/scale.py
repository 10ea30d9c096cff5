"""The CLIP logit scale a run uses (Eq. 1): the checkpoint's own, as extraction records it in a
feature file's meta (`logit_scale`), unless `--set logit_scale=` gives one. A file written before
the scale was recorded gets the paper's 100, said once. The scale changes no zero-shot argmax, but
every softmax: calibration (ECE, NLL), the entropies the caches admit by and the fused logits.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, Mapping

from ..checks import MAX_WEIGHT
from .config import MIN_LOGIT_SCALE, EngineConfig

log = logging.getLogger(__name__)

PAPER_SCALE = 100.0  # OpenAI's CLIP (exp(4.6052)); what the paper and its peers hard-code
CHECKPOINT = "checkpoint"  # the scale recorded in the feature file by extraction
FILE_DEFAULT = "default 100 (the file records no scale)"
SET = "--set"

_said: set[str] = set()


def file_scale(meta: Mapping[str, Any], where: str = "the feature file") -> tuple[float, str]:
    """(scale, source) of a feature file: its meta's `logit_scale` (the checkpoint's), else 100,
    said once per file."""
    value = meta.get("logit_scale")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        if MIN_LOGIT_SCALE <= value <= MAX_WEIGHT:
            return float(value), CHECKPOINT
    if where not in _said:
        _said.add(where)
        log.warning(
            "%s records no logit scale (extracted before it was recorded): using %g, the paper's; "
            "re-extract it, or pass --set logit_scale=VALUE",
            where,
            PAPER_SCALE,
        )
    return PAPER_SCALE, FILE_DEFAULT


def scale_set(settings: Mapping[str, Any]) -> bool:
    """Whether `--set` (parsed, `parse_overrides`) chooses the scale."""
    return "logit_scale" in settings


def with_file_scale(
    cfg: EngineConfig, meta: Mapping[str, Any], chosen: bool, where: str = "the feature file"
) -> tuple[EngineConfig, str]:
    """(config, source): `cfg` with the file's scale unless the user `chosen` one (`--set`)."""
    if chosen:
        return cfg, SET
    scale, source = file_scale(meta, where)
    return dataclasses.replace(cfg, logit_scale=scale), source
