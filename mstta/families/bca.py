"""PLACEHOLDER: replaced by the bca family's implementation."""
from __future__ import annotations

from dataclasses import dataclass

NAME = "bca"
METHODS = ()


@dataclass
class Params:
    pass
