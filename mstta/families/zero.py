"""PLACEHOLDER: replaced by the zero family's implementation."""
from __future__ import annotations

from dataclasses import dataclass

NAME = "zero"
METHODS = ()


@dataclass
class Params:
    pass
