"""CONTRIBUTING's "Simple" rules, checked from the sources: no function over 60 lines in app/, mstta/
or benchmarks/, no file over 450 lines in app/ or mstta/, and each shared name defined once."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FUNCTION, MAX_FILE = 60, 450
ONCE = ("MAX_WEIGHT", "accuracy", "write_csv", "select_views", "DEFAULT_PRETRAINED")  # once defined twice


def _long_functions(root: Path, folder: str) -> list[str]:
    out = []
    for path in sorted((root / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION:
                    out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return out


def _module_names(root: Path, folders: tuple[str, ...]) -> Counter:
    """How many modules define each top-level function, class or assigned name."""
    seen: Counter = Counter()
    for folder in folders:
        for path in (root / folder).rglob("*.py"):
            names = set()
            for node in ast.parse(path.read_text(), str(path)).body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    names.update(t.id for t in targets if isinstance(t, ast.Name))
            seen.update(names)
    return seen


def test_no_function_over_60_lines():
    assert [f for folder in ("app", "mstta", "benchmarks") for f in _long_functions(ROOT, folder)] == []


def test_no_file_over_450_lines():
    long = [
        f"{p.relative_to(ROOT)} ({n} lines)"
        for folder in ("app", "mstta")
        for p in sorted((ROOT / folder).rglob("*.py"))
        if (n := p.read_text().count("\n")) > MAX_FILE
    ]
    assert long == []


def test_shared_names_are_defined_once():
    seen = _module_names(ROOT, ("app", "mstta"))
    assert {name: seen[name] for name in ONCE} == dict.fromkeys(ONCE, 1)


def test_the_checks_see_a_long_function_and_a_second_definition(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("def f():\n" + "    x = 1\n" * 61 + "MAX_WEIGHT = 1\n")
    (tmp_path / "pkg" / "b.py").write_text("MAX_WEIGHT = 2\n")
    assert _long_functions(tmp_path, "pkg") == ["pkg/a.py:1 f (62 lines)"]
    assert _module_names(tmp_path, ("pkg",))["MAX_WEIGHT"] == 2
