"""Every backticked name in docs/architecture.md and CONTRIBUTING.md exists: a file (`x/y.py`), a
dotted name (`mstta.engine.replay`, `Streams._step`, `functional.form_queries`) or a class or
constant (`UISession`, `FAMILY_SECTIONS`) of the code. Read from the sources (no imports), so a doc
that names a moved or renamed thing fails here."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("docs/architecture.md", "CONTRIBUTING.md")
CODE = ("mstta", "app", "tests", "benchmarks", "tools")
FILE = re.compile(r"^([\w.<>-]+\.py|[\w.<>-]*/[\w./<>-]+\.(md|json|yaml|txt))$")  # outputs (`report.md`) are not files
OUTSIDE = {"TYPE_CHECKING"}
OUTPUT = re.compile(
    r"^[\w-]+\.(json|md|csv|npz|npy|jsonl|mp4|png)$"
)  # an output's name (`results.json`)  # names of Python's own that the docs mention
DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
CLASS_OR_CONST = re.compile(r"^([A-Z][a-z]\w*|[A-Z][A-Z0-9_]{2,})$")


def _index() -> tuple[dict[str, set[str]], dict[str, set[str]], set[str]]:
    """(module basename -> its top-level names, class name -> its members, every defined name)."""
    modules: dict[str, set[str]] = defaultdict(set)
    classes: dict[str, set[str]] = defaultdict(set)
    names: set[str] = set()
    for folder in CODE:
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text(), str(path))
            stem = path.parent.name if path.stem == "__init__" else path.stem
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        for n in ast.walk(t):
                            names.update(
                                [n.id] if isinstance(n, ast.Name) else [n.attr] if isinstance(n, ast.Attribute) else []
                            )
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                    modules[stem].add(node.name)
                elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.ImportFrom)):
                    for n in ast.walk(node):
                        modules[stem].update([n.id] if isinstance(n, ast.Name) else [])
                        modules[stem].update([a.asname or a.name for a in getattr(n, "names", [])] if n is node else [])
                if isinstance(node, ast.ClassDef):
                    for n in ast.walk(node):
                        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            classes[node.name].add(n.name)
                        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
                            classes[node.name].add(n.attr)
                        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                            classes[node.name].add(n.target.id)
            modules[stem].update(p.stem for p in path.parent.glob("*.py")) if path.stem == "__init__" else None
    return modules, classes, names


def _exists(token: str, files: list[str], modules, classes, names) -> bool:
    if FILE.match(token):
        return "<" in token or any(f == token or f.endswith("/" + token) for f in files)
    if DOTTED.match(token):
        parts = token.split(".")
        if parts[0] in ("mstta", "app"):
            path = ROOT.joinpath(*parts)
            for i in range(len(parts), 0, -1):  # the longest module prefix, then names inside it
                mod = ROOT.joinpath(*parts[:i])
                if mod.with_suffix(".py").is_file() or (mod / "__init__.py").is_file():
                    rest = parts[i:]
                    stem = parts[i - 1]
                    return not rest or rest[0] in modules[stem] and (len(rest) == 1 or rest[1] in classes[rest[0]])
            return path.exists()
        head, attr = parts[0], parts[1]
        return attr in classes.get(head, set()) or attr in modules.get(head, set())
    return token in names or token in OUTSIDE


def test_every_backticked_name_in_the_contributor_docs_exists():
    files = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if ".git" not in p.parts and ".venv" not in p.parts]
    modules, classes, names = _index()
    missing = []
    for doc in DOCS:
        for token in re.findall(r"`([^`\n]+)`", (ROOT / doc).read_text()):
            token = token.strip().rstrip("()")
            if OUTPUT.match(token):
                continue
            if FILE.match(token) or DOTTED.match(token) or CLASS_OR_CONST.match(token):
                if not _exists(token, files, modules, classes, names):
                    missing.append(f"{doc}: `{token}`")
    assert missing == []


def test_a_stale_name_is_caught():
    modules, classes, names = _index()
    assert not _exists("Engine._step", [], modules, classes, names)
    assert not _exists("UiState", [], modules, classes, names)
    assert not _exists("mstta.families.runner", [], modules, classes, names)
    assert _exists("Streams._step", [], modules, classes, names)
    assert _exists("mstta.engine.replay", [], modules, classes, names)
