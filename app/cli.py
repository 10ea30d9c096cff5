"""`mstta-demo` (placeholder until the streaming pipeline lands)."""
from __future__ import annotations

import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    print("mstta-demo: error: the demo is not yet available in this version; "
          "use `mstta-bench replay` meanwhile", file=sys.stderr)
    return 2
