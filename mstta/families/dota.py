"""PLACEHOLDER: replaced by the dota family's implementation."""
from __future__ import annotations

from dataclasses import dataclass

NAME = "dota"
METHODS = ()


@dataclass
class Params:
    pass
