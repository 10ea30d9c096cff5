"""Import cycles among the project's own modules, counting every import: deferred (inside a function)
and type-only (`if TYPE_CHECKING:`) ones too, since each closes a cycle Python never reports.

    python tools/import_cycles.py [FOLDER ...]     # default: app mstta benchmarks; exit 1 on a cycle

`make lint` runs it. A module is a .py file under the root; `from pkg import name` counts as an
import of `pkg.name` when that is a module, else of `pkg`.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

DEFAULT_FOLDERS = ("app", "mstta", "benchmarks")


def module_names(root: Path, folders: list[str]) -> dict[Path, str]:
    """Every .py file under the folders -> its dotted module name (a package is its __init__.py)."""
    files = sorted(p for f in folders for p in (root / f).rglob("*.py") if "__pycache__" not in p.parts)
    out = {}
    for p in files:
        parts = p.relative_to(root).with_suffix("").parts
        out[p] = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return out


def _targets(p: Path, name: str, node: ast.Import | ast.ImportFrom, known: set[str]) -> list[str]:
    """The project modules one import statement names (nothing outside the project)."""
    if isinstance(node, ast.Import):
        bases = [(a.name, None) for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            pkg = name.split(".") if p.name == "__init__.py" else name.split(".")[:-1]
            base = ".".join(pkg[: len(pkg) - node.level + 1] + ([node.module] if node.module else []))
        bases = [(base, a.name) for a in node.names]
    out = []
    for base, attr in bases:
        cand = f"{base}.{attr}" if attr and f"{base}.{attr}" in known else base
        while cand and cand not in known:
            cand = cand.rpartition(".")[0]
        if cand:
            out.append(cand)
    return out


def import_graph(root: Path, folders: list[str]) -> dict[str, set[str]]:
    """module -> the project modules it imports anywhere in its body."""
    names = module_names(root, folders)
    known = set(names.values())
    graph: dict[str, set[str]] = defaultdict(set)
    for p, name in names.items():
        graph[name]
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[name].update(t for t in _targets(p, name, node, known) if t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def main(argv: list[str] | None = None) -> int:
    folders = list(argv if argv else DEFAULT_FOLDERS)
    root = Path.cwd()
    found = cycles(import_graph(root, [f for f in folders if (root / f).is_dir()]))
    for comp in found:
        print(f"import cycle ({len(comp)} modules, deferred and TYPE_CHECKING imports counted): {', '.join(comp)}")
    if found:
        print("break it: move the shared name into a module below all of them (docs/architecture.md)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
