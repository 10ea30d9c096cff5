"""Ground truth for a video: a CSV of inclusive frame ranges, each mapped to a class name.

    start_frame,end_frame,label
    0,149,circle
    150,299,square

- Frame numbers are the source's 0-based frame indices (before `--every` sampling; for an image
  folder, the image's position in name order). Ranges are inclusive and must not overlap.
- The header line is optional; blank lines and lines starting with `#` are ignored; UTF-8 with
  or without a BOM. A label may be quoted ("a, b") and must be one of the labels file's names.
- Frames outside every range are unlabelled and do not count toward accuracy.
- The file is a regular file of at most `MAX_TRUTH_BYTES`; a field longer than the csv module's
  limit (131,072 characters) is a one-line `UserError` naming the line, as every other mistake.
"""

from __future__ import annotations

import bisect
import csv
import io
from pathlib import Path
from typing import Iterator, Sequence

from mstta.errors import UserError

from .inputs import read_small_file

HEADER = ("start_frame", "end_frame", "label")
MAX_TRUTH_BYTES = 16 << 20  # 16 MiB: some 500,000 ranges
MAX_FRAME = 2**53  # frame numbers beyond this are no video's (and lose precision as floats)
TRUTH_EXPECTED = "a CSV of start_frame,end_frame,label lines"


class Truth:
    """Sorted, non-overlapping (start, end, class index) ranges; `label_at(frame)` looks one up."""

    def __init__(self, ranges: Sequence[tuple[int, int, int]]):
        self.ranges = sorted(ranges)
        self._starts = [r[0] for r in self.ranges]

    def label_at(self, frame: int) -> int | None:
        """Class index of `frame`, or None when no range covers it."""
        i = bisect.bisect_right(self._starts, frame) - 1
        if i >= 0 and frame <= self.ranges[i][1]:
            return self.ranges[i][2]
        return None

    def __len__(self) -> int:
        return len(self.ranges)


def parse_truth(text: str, classnames: Sequence[str], where: str = "truth") -> Truth:
    """Parse the CSV text (see the module doc); errors name the line and the fix."""
    index = {name.casefold(): i for i, name in enumerate(classnames)}
    ranges: list[tuple[int, int, int, int]] = []  # start, end, class, line
    for number, row in _rows(text, where):
        cells = [c.strip() for c in row]
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        if tuple(c.lower() for c in cells) == HEADER:
            continue
        if len(cells) != 3:
            raise UserError(f"{where} line {number}: expected start_frame,end_frame,label, got {len(cells)} fields")
        try:
            start, end = int(cells[0]), int(cells[1])
        except ValueError:
            raise UserError(
                f"{where} line {number}: frame numbers must be integers, got {_show(cells[0])} and {_show(cells[1])}"
            ) from None
        if max(abs(start), abs(end)) > MAX_FRAME:
            raise UserError(
                f"{where} line {number}: frame numbers are at most {MAX_FRAME:,}; got {_show(cells[0])} "
                f"and {_show(cells[1])}"
            )
        if start < 0 or end < start:
            raise UserError(f"{where} line {number}: bad range {start}..{end}; need 0 <= start_frame <= end_frame")
        label = " ".join(cells[2].split())
        if label.casefold() not in index:
            raise UserError(f"{where} line {number}: label {_show(label)} is not in the labels file")
        ranges.append((start, end, index[label.casefold()], number))
    if not ranges:
        raise UserError(f"{where}: no frame ranges found; write lines like 0,149,{classnames[0]}")
    ranges.sort()
    for (_, e0, _, l0), (s1, _, _, l1) in zip(ranges, ranges[1:]):
        if s1 <= e0:
            raise UserError(f"{where}: ranges on lines {l0} and {l1} overlap (frame {s1}); make them disjoint")
    return Truth([(s, e, c) for s, e, c, _ in ranges])


def _show(cell: str, limit: int = 40) -> str:
    """A cell as an error message quotes it: control characters escaped, long ones cut."""
    shown = cell if len(cell) <= limit else f"{cell[:limit]}... ({len(cell):,} characters)"
    return repr(shown)


def _rows(text: str, where: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of each CSV record; the csv module's errors become one-line UserErrors."""
    reader = csv.reader(io.StringIO(text.removeprefix("\ufeff")))
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # a field over csv.field_size_limit(), a NUL byte, an open quote at the end
            raise UserError(
                f"{where} line {reader.line_num}: not valid CSV ({exc}); write lines like 0,149,label"
            ) from None
        yield reader.line_num, row


def read_truth(path: str | Path, classnames: Sequence[str]) -> Truth:
    """Read a truth CSV file; a missing, special, oversized or non-UTF-8 file is a one-line UserError."""
    p = Path(path)
    where = f"--truth {p}"
    try:
        text = read_small_file(p, "--truth", MAX_TRUTH_BYTES, TRUTH_EXPECTED).decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UserError(f"{where}: not UTF-8 text; save it as UTF-8") from None
    return parse_truth(text, classnames, where)
