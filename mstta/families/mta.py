"""PLACEHOLDER: replaced by the mta family's implementation."""
from __future__ import annotations

from dataclasses import dataclass

NAME = "mta"
METHODS = ()


@dataclass
class Params:
    pass
