"""Class names for the demo: a labels file (or the text of one) and the prompt templates.

Format: one class name per line; surrounding spaces are stripped; blank lines and lines whose
first non-space character is `#` are ignored; UTF-8 with or without a BOM; LF or CRLF endings.
A file without names, with a single name, with a name listed twice (case and spacing ignored;
both line numbers are reported), with control characters (a NUL byte, an escape) or with bytes that
are not UTF-8 is a one-line `UserError`; so is a path that is not a regular file of at most
`MAX_LABELS_BYTES` (`/dev/zero`, a FIFO).
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

from mstta.errors import UserError

from .inputs import read_small_file

MIN_CLASSES = 2
MAX_LABELS_BYTES = 1 << 20  # 1 MiB: some 50,000 class names; a labels file is small text
LABELS_EXPECTED = "a text file with one class name per line"


def _check_characters(name: str, number: int, where: str) -> None:
    bad = next((c for c in name if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise UserError(
            f"{where}: line {number} holds a control character (U+{ord(bad):04X}); "
            "class names are plain text, one per line"
        )


def parse_labels(text: str | bytes, where: str = "labels") -> list[str]:
    """Class names from the text of a labels file; `where` names it in error messages."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise UserError(
                f"{where}: not UTF-8 text (byte 0x{text[exc.start]:02x} at offset {exc.start}); save the file as UTF-8"
            ) from None
    text = text.removeprefix("\ufeff")
    names: list[str] = []
    first_line: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        name = " ".join(raw.split())
        if not name or name.startswith("#"):
            continue
        _check_characters(name, number, where)
        key = name.casefold()
        if key in first_line:
            raise UserError(
                f"{where}: duplicate class name '{name}' on lines {first_line[key]} and {number}; list each class once"
            )
        first_line[key] = number
        names.append(name)
    if not names:
        raise UserError(f"{where}: no class names found; write one class name per line")
    if len(names) < MIN_CLASSES:
        raise UserError(f"{where}: only one class name ('{names[0]}'); list at least {MIN_CLASSES} classes")
    return names


def read_labels(path: str | Path) -> list[str]:
    """Class names from a labels file (see the module doc for the format and the errors)."""
    data = read_small_file(path, "--labels", MAX_LABELS_BYTES, LABELS_EXPECTED)
    return parse_labels(data, where=f"--labels {Path(path)}")


def prompt_templates(template: str | None) -> list[str]:
    """`[template]` when one is given (it needs exactly one `{}`), else the default prompt ensemble."""
    from mstta.data.templates import DEFAULT_TEMPLATES, check_templates

    if template is not None:
        return check_templates([template], "--template")
    return list(DEFAULT_TEMPLATES)
