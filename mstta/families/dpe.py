"""PLACEHOLDER: replaced by the dpe family's implementation."""
from __future__ import annotations

from dataclasses import dataclass

NAME = "dpe"
METHODS = ()


@dataclass
class Params:
    pass
