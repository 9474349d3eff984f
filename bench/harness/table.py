"""The benchmarks' fixed-width text tables: nccl-tests' columns (size, count, type, redop,
time, algbw, busbw, #wrong) and the others', each cell right-aligned in its width (or left),
'-' where a value is missing, '|' between groups."""
from __future__ import annotations

import re
from typing import Any, Callable, Optional, Sequence, Union


def cell(value, spec: str, scale: float = 1.0) -> str:
    """format(value * scale, spec), or '-' in the same width when value is None."""
    if value is None:
        align, width = re.match(r"([<>^]?)[-+ ]?(\d*)", spec).groups()
        return format("-", align + width)
    return format(value * scale if scale != 1.0 else value, spec)


class Column:
    """A column: its title, width, the value of a row (a key, or a function of the row),
    the format of the value ('.2f', 'd', '.1%', '' for str) and a scale applied first."""

    def __init__(self, title: str, width: int, get: Union[str, Callable[[dict], Any]],
                 spec: str = "", scale: float = 1.0, align: str = ">"):
        self.title, self.width, self.spec, self.scale, self.align = title, width, spec, scale, align
        self.get = (lambda r: r.get(get)) if isinstance(get, str) else get

    def head(self) -> str:
        return format(self.title, f"{self.align}{self.width}")

    def show(self, row) -> str:
        sign = self.spec[:1] if self.spec[:1] in "+- " and self.spec else ""
        spec = f"{self.align}{sign}{self.width}{self.spec[len(sign):]}"
        return cell(self.get(row), spec, self.scale)


class Table:
    """Columns, with None for a '|' between groups; cells joined by `sep`."""

    def __init__(self, columns: Sequence[Optional[Column]], sep: str = " "):
        self.columns, self.sep = list(columns), sep

    def _join(self, cells) -> str:
        return self.sep.join(cells)

    def header(self) -> str:
        return self._join("|" if c is None else c.head() for c in self.columns)

    def row(self, r, upto: Optional[int] = None, note: Optional[str] = None) -> str:
        """One row; with `upto`, only the first columns (separators count), then the note."""
        cols = self.columns if upto is None else self.columns[:upto]
        line = self._join("|" if c is None else c.show(r) for c in cols)
        return line + (f"  {note}" if note else "")
