"""`tools/import_cycles.py` (run by `make lint`): a cycle closed by a deferred or a TYPE_CHECKING
import is found, and the project has none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "import_cycles.py"


def _run(cwd: Path, *folders: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *folders], cwd=cwd, capture_output=True, text=True)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_deferred_and_a_type_checking_import_close_a_cycle(tmp_path):
    root = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .high import Thing\n",
            "pkg/high.py": "def f():\n    from . import mid\n",
            "pkg/mid.py": "from pkg.low import *\n",
            "pkg/alone.py": "import os\nfrom . import low\n",
        },
    )
    out = _run(root, "pkg")
    assert out.returncode == 1
    assert "3 modules" in out.stdout and "pkg.high, pkg.low, pkg.mid" in out.stdout
    assert "pkg.alone" not in out.stdout


def test_layers_without_a_cycle_pass(tmp_path):
    root = _tree(
        tmp_path, {"pkg/__init__.py": "", "pkg/low.py": "", "pkg/high.py": "def f():\n    from .low import x\n"}
    )
    out = _run(root, "pkg")
    assert out.returncode == 0 and out.stdout == ""


def test_the_project_has_no_import_cycle():
    out = _run(ROOT)
    assert out.returncode == 0, out.stdout
