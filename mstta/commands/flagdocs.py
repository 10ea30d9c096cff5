"""The docs' flag tables, generated from the argparse parsers so they cannot go stale: each table of
a `mstta-bench` command sits between `<!-- flags: COMMAND -->` and `<!-- /flags -->` in docs/*.md.
`python -m mstta.commands.flagdocs` rewrites them; tests/test_flag_docs.py fails when one differs."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent.parent / "docs"
BLOCK = re.compile(r"(<!-- flags: (\w+) -->\n)(.*?)(<!-- /flags -->)", re.S)


def _parsers() -> dict[str, argparse.ArgumentParser]:
    from ..cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _flag(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ", ".join(f"`{o}`" for o in action.option_strings)
    shown = action.metavar or ("|".join(map(str, action.choices)) if action.choices else action.dest.upper())
    return ", ".join(f"`{o} {shown}`" for o in action.option_strings).replace("|", "\\|")


def _meaning(action: argparse.Action) -> str:
    text = " ".join((action.help or "").split())
    if "%(" in text:
        text = text % {"default": action.default, "prog": "mstta-bench"}
    if action.required:
        text += " (required)"
    return text.replace("|", "\\|")


def flag_table(command: str) -> str:
    """The Markdown table of a command's flags, in its `--help` order."""
    parser = _parsers()[command]
    rows = [
        f"| {_flag(a)} | {_meaning(a)} |"
        for a in parser._actions
        if a.option_strings and a.help != argparse.SUPPRESS and "-h" not in a.option_strings
    ]
    return "\n".join(["| flag | meaning |", "| --- | --- |", *rows]) + "\n"


def render(text: str) -> str:
    """`text` with every flag block regenerated."""
    return BLOCK.sub(lambda m: m.group(1) + flag_table(m.group(2)) + m.group(4), text)


def stale(docs: Path = DOCS) -> list[str]:
    """The docs pages whose flag tables differ from the parsers."""
    return [p.name for p in sorted(docs.glob("*.md")) if render(p.read_text(encoding="utf-8")) != p.read_text("utf-8")]


def main() -> int:
    from ..atomic import atomic_open

    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        new = render(text)
        if new != text:
            with atomic_open(path, "w", encoding="utf-8") as fh:
                fh.write(new)
            print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
