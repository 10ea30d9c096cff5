"""PLACEHOLDER: replaced by the dmn family's implementation."""
from __future__ import annotations

from dataclasses import dataclass

NAME = "dmn"
METHODS = ()


@dataclass
class Params:
    pass
