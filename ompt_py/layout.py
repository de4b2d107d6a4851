"""Text that fits a width: the terminal forms of ``Trace.summary()`` and ``ompt-py
report``, laid out once here and printed plain or in colour (``rich``).

A ``Document`` is headings, prose (wrapped at words, a hanging indent),
numbered items, tables and footnotes.  A table fits the width by, in order:
shortening its name columns in the middle (``units.shorten``) down to
SOFT_NAME characters, leaving out its least important columns (the highest
``drop`` rank first; rank 0 is never left out), shortening names down to
HARD_NAME; headers wrap at their words.  ``terminal_width`` is the width of
the terminal (``COLUMNS`` first, as ``shutil.get_terminal_size`` reads it).
Colour only on a terminal, and never with ``NO_COLOR`` set (rich's rule).
Paths under the working directory are shown from it, in prose and tables
(``near``).
"""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO

import pandas as pd

from .units import shorten

#: The width used when there is no terminal and no COLUMNS.
DEFAULT_WIDTH = 100
#: The narrowest width laid out for: below it lines may be longer.
MIN_WIDTH = 30
#: Name columns are shortened to this many characters before columns are left out,
#: and to HARD_NAME after.
SOFT_NAME, HARD_NAME = 24, 6
_GAP = 2  # spaces between columns
#: rich's style of each kind of text.
STYLES = {"heading": "bold", "name": "cyan", "warning": "bold red", "note": "dim",
          "marker": "bold yellow", "header": "bold"}

Segment = tuple[str, str]  # (text, style: a key of STYLES or "")
#: A number and its unit (units' formats), kept on one line by prose().
_UNIT = re.compile(r"[\d.,<>-]+ (?:%|ns|us|ms|s|B|KiB|MiB|GiB)(?![A-Za-z])")
_NBSP = "\u00a0"


def here() -> str:
    """What ``near`` takes off: the working directory and a separator ("" in /)."""
    cwd = os.getcwd()
    return cwd + os.sep if cwd != os.sep else ""


def near(text: str, prefix: str | None = None) -> str:
    """``text`` with the working directory (``prefix``: ``here()``, asked once for
    many texts) taken off the paths under it (``examples/demo.c:34`` for
    ``/home/me/proj/examples/demo.c:34`` run in ``/home/me/proj``), as compilers
    print them: in a name column the part of a path that tells most is then what
    is kept."""
    prefix = here() if prefix is None else prefix
    return text.replace(prefix, "") if prefix else text


def terminal_width(default: int = DEFAULT_WIDTH) -> int:
    """The terminal's width in columns: ``COLUMNS`` when set, else the terminal of
    standard output, else ``default``."""
    return max(shutil.get_terminal_size((default, 24)).columns, MIN_WIDTH)


@dataclass
class Column:
    """A table column of display strings: ``name`` shortens in the middle; ``drop``
    0 is never left out, the highest rank goes first."""

    header: str
    values: list[str]
    left: bool = False
    name: bool = False
    drop: int = 0

    @property
    def natural(self) -> int:
        return max([len(v) for v in self.values] + [self.least])

    @property
    def least(self) -> int:
        """The width of the header's longest word (headers wrap at words)."""
        return max(len(w) for w in self.header.split()) if self.header.strip() else 1


def _widths(kept: list[Column], width: int, floor: int | None) -> list[int] | None:
    """Widths of ``kept`` within ``width``: every column at its natural width but
    the names, which get at least ``floor`` (None: no shortening) and share the
    room left up to their natural widths; None when they cannot."""
    widths = [c.natural for c in kept]
    names = [i for i, c in enumerate(kept) if c.name]
    room = width - _GAP * (len(kept) - 1) - sum(w for i, w in enumerate(widths)
                                                if i not in names)
    if sum(widths[i] for i in names) <= room:
        return widths
    least = {i: min(kept[i].natural, max(kept[i].least, floor)) for i in names} \
        if floor is not None else {i: kept[i].natural for i in names}
    if sum(least.values()) > room:
        return None
    extra = room - sum(least.values())
    order = sorted(names, key=lambda i: kept[i].natural - least[i])
    for k, i in enumerate(order):  # the room left shared, the least needy served first
        give = min(kept[i].natural - least[i], extra // (len(order) - k))
        widths[i] = least[i] + give
        extra -= give
    return widths


def fit(columns: list[Column], width: int) -> tuple[list[Column], list[int]]:
    """The columns kept and their widths, within ``width``: the least important
    columns of rank 4 and up left out first (highest rank first), then names
    shortened down to SOFT_NAME, then columns of rank 1 to 3 left out, then names
    shortened down to HARD_NAME.  Names shortened share the room left."""
    kept = list(columns)

    def drop_one(least_rank: int) -> bool:
        ranks = [c.drop for c in kept]
        if max(ranks, default=0) < least_rank:
            return False
        del kept[max(range(len(kept)), key=lambda j: (ranks[j], j))]
        return True

    for floor, least_rank in ((None, 4), (SOFT_NAME, 1), (HARD_NAME, 1)):
        while True:
            widths = _widths(kept, width, floor)
            if widths is not None:
                return kept, widths
            if not drop_one(least_rank):
                break
    return kept, [min(c.natural, HARD_NAME) if c.name else c.natural for c in kept]


def _cell(text: str, width: int, column: Column) -> str:
    text = shorten(text, width) if column.name else text[:width]
    return text.ljust(width) if column.left else text.rjust(width)


@dataclass
class Document:
    """Lines for one width; ``text()`` plain, ``print()`` plain or in colour."""

    width: int
    lines: list[list[Segment]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def blank(self) -> None:
        if self.lines and self.lines[-1]:
            self.lines.append([])

    def heading(self, text: str) -> None:
        self.blank()
        for line in textwrap.wrap(text, self.width) or [""]:
            self.lines.append([(line, "heading")])

    def prose(self, text: str, indent: int = 2, style: str = "", marker: str = "",
              hang: int | None = None) -> None:
        """``text`` wrapped at words to the width, after ``marker`` (a style of its own)
        at ``indent``; the next lines start under the text (or at ``hang``)."""
        first = " " * indent + marker
        rest = " " * (hang if hang is not None else len(first))
        room = max(self.width - len(rest), 10)
        kept = _UNIT.sub(lambda m: m[0].replace(" ", _NBSP), near(text))  # "89 %" stays whole
        wrapped = textwrap.wrap(kept, max(self.width - len(first), 10),
                                break_on_hyphens=False) or [""]
        if len(wrapped) > 1:  # the rest wrapped again to its own width
            wrapped = wrapped[:1] + textwrap.wrap(" ".join(wrapped[1:]), room,
                                                  break_on_hyphens=False)
        wrapped = [line.replace(_NBSP, " ") for line in wrapped]
        for i, line in enumerate(wrapped):
            if i == 0:
                self.lines.append([(" " * indent, ""), (marker, "marker"), (line, style)])
            else:
                self.lines.append([(rest, ""), (line, style)])

    def footnote(self, text: str) -> str:
        """A note for the end of the document; its marker (``[n]``) to put in the text."""
        self.notes.append(text)
        return f"[{len(self.notes)}]"

    def table(self, frame: pd.DataFrame, drop: Mapping[str, int] | None = None,
              names: Iterable[str] = (), left: Iterable[str] = (), indent: int = 2,
              group: str | None = None) -> None:
        """``frame`` (display strings: units' formats) as a table that fits the width
        (see fit); ``drop``: columns' ranks (see Column); ``names``: columns shortened
        in the middle; ``left``: left-aligned (names are too); ``group``: a column
        whose value heads its rows on a line of its own instead (in order of first
        appearance)."""
        if frame.empty:
            self.lines.append([(" " * indent + "(none)", "note")])
            return
        drop, names, left = dict(drop or {}), set(names), set(left)
        body = frame.drop(columns=group) if group else frame
        inner = indent + (2 if group else 0)
        prefix = here()

        def shown(c: object, v: object) -> str:
            if pd.isna(v):
                return ""
            return near(str(v), prefix) if c in names else str(v)

        columns = [Column(str(c), [shown(c, v) for v in body[c]],
                          left=c in left or c in names, name=c in names,
                          drop=drop.get(str(c), 0)) for c in body.columns]
        kept, widths = fit(columns, self.width - inner)
        header = [textwrap.wrap(c.header, w) or [""] for c, w in zip(kept, widths)]
        for row in range(max(len(h) for h in header)):
            cells = []
            for c, w, h in zip(kept, widths, header):
                line = h[row] if row < len(h) else ""
                cells.append(line.ljust(w) if c.left else line.rjust(w))
            self.lines.append([(" " * inner + (" " * _GAP).join(cells).rstrip(), "header")])
        previous = None
        for i in range(len(body)):
            if group is not None:
                value = frame[group].iat[i]
                if i == 0 or value != previous:
                    self.lines.append([(" " * indent, ""),
                                       (shorten(near(str(value), prefix), self.width - indent),
                                        "name")])
                previous = value
            segments: list[Segment] = [(" " * inner, "")]
            for j, (c, w) in enumerate(zip(kept, widths)):
                if j:
                    segments.append((" " * _GAP, ""))
                segments.append((_cell(c.values[i], w, c), "name" if c.name else ""))
            text = "".join(s for s, _ in segments).rstrip()
            self.lines.append(segments if len(text) == sum(len(s) for s, _ in segments)
                              else _trimmed(segments, len(text)))

    def with_notes(self) -> list[list[Segment]]:
        """The lines, and the footnotes under a heading of their own."""
        if not self.notes:
            return self.lines
        end = Document(self.width, [[]] if self.lines and self.lines[-1] else [])
        end.heading("Notes")
        for i, note in enumerate(self.notes, 1):
            end.prose(note, marker=f"[{i}] ", style="note")
        return [*self.lines, *end.lines]

    def text(self) -> str:
        """Plain text, each line at most the width (from MIN_WIDTH up)."""
        return "".join("".join(s for s, _ in line).rstrip() + "\n"
                       for line in self.with_notes())

    def print(self, file: IO[str], colour: bool | None = None) -> None:
        """To ``file``: in colour when it is a terminal (``colour`` None) or when
        ``colour``, never with NO_COLOR set (rich's Console decides)."""
        from rich.console import Console
        from rich.text import Text

        console = Console(file=file, width=self.width, force_terminal=colour,
                          no_color=True if colour is False else None, highlight=False,
                          markup=False, emoji=False, soft_wrap=True)
        for line in self.with_notes():
            text = Text()
            for segment, style in line:
                text.append(segment, STYLES.get(style, ""))
            text.rstrip()
            console.print(text)


def _trimmed(segments: list[Segment], length: int) -> list[Segment]:
    """``segments`` cut at ``length`` characters (their trailing spaces)."""
    out: list[Segment] = []
    for text, style in segments:
        room = length - sum(len(t) for t, _ in out)
        if room <= 0:
            break
        out.append((text[:room], style))
    return out
