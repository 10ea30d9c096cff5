"""Device selection: cuda when available, the CPU otherwise."""

from __future__ import annotations

import torch

from ..errors import UserError


def resolve_device(name: str | None = "auto") -> torch.device:
    """'auto' -> cuda if available else cpu; an unavailable device is a one-line UserError."""
    if name in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise UserError(f"--device {name!r}: not a device name; use auto, cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda"):  # meta holds no data; mps, xpu, ... are not supported
        raise UserError(
            f"--device {name}: {'holds no data' if dev.type == 'meta' else 'is not supported'}; "
            "use auto, cpu, cuda or cuda:N"
        )
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {name}: CUDA is not available on this machine; use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise UserError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) present")
    return dev
