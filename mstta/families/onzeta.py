"""PLACEHOLDER: replaced by the onzeta family's implementation."""
from __future__ import annotations

from dataclasses import dataclass

NAME = "onzeta"
METHODS = ()


@dataclass
class Params:
    pass
