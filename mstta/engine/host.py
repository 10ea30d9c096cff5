"""numpy views of a CPU record's state tensors for the step's host reads (`Streams.host_reads`).

After the step's large GEMMs every small op runs from cold caches, and `Tensor.numpy()` then costs
about what a small op does (docs/engine.md, "Cost, as measured"): a view is made once per tensor and
kept on its record, outside the record's dataclass fields (a state dict holds the fields only); a
replaced tensor, or a deep copy's (its view's own data), gets a new view.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def host_view(record: Any, name: str) -> np.ndarray:
    """The numpy view (no copy) of the CPU tensor `record.<name>`, made once per tensor."""
    t: torch.Tensor = getattr(record, name)
    views = record.__dict__.setdefault("_host_views", {})
    hit = views.get(name)
    if hit is None or hit[0] is not t or hit[1].base is None:  # a deep copy's view owns its data
        hit = views[name] = (t, t.numpy())
    return hit[1]
