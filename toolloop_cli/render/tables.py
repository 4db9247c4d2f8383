"""Table layout for a person at a terminal: every table fits the console's width (80 columns
included) and every line is one record.

Cells never wrap. Each column is one of three kinds: *whole* (run ids, seq, status: never cut),
*key* (ids a person scans: cut with an ellipsis only when the line cannot fit otherwise) and
*text* (results, descriptions, paths: cut first). When even that cannot fit, the least useful
column is left out, and so on (a column's ``rank``; whole columns are never left out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: a run larger than this is shown as counts per status and the receipts that are not ok
BIG_RUN = 50

_GAP = 2  # between two columns: a blank divider and one space of padding
_MIN_TEXT = 12
_MIN_KEY = 8
_KEY_CAP = 32
_TEXT_CAP = 80

WHOLE_KEYS = frozenset({"run_id", "seq", "status", "calls", "mode", "kind", "allowed"})
TEXT_KEYS = frozenset({"description", "args", "plan", "counts", "approval", "result", "error", "message",
                       "args_sha256", "mcp_name", "args_withheld"})
TIME_KEYS = frozenset({"started_at", "finished_at", "requested_at"})
#: keys for machines, left out of tables (the JSON formats keep them)
HIDDEN_KEYS = frozenset({"args_sha256", "args_withheld"})
#: text kept longest when the line is short (a request's arguments are what a person decides on)
KEPT_TEXT = frozenset({"args", "description", "result"})
PATH_KEYS = frozenset({"plan"})


@dataclass
class Col:
    header: str
    cells: list[str]
    kind: str  # whole | key | text
    right: bool = False
    style: list[str] | None = None  # per-row style of the cells (status colours)
    rank: int = 0  # when the line cannot fit, the column with the lowest rank is left out first
    least: int | None = None  # a text column kept at least this wide while spare columns can go
    spare: bool = False  # left out before a column with ``least`` narrows below it

    @property
    def natural(self) -> int:
        return max([len(self.header)] + [len(c) for c in self.cells])

    @property
    def floor(self) -> int:
        """The narrowest this column may get before it is left out."""
        if self.kind == "whole":
            return self.natural
        return min(self.natural, max(len(self.header), _MIN_TEXT if self.kind == "text" else _MIN_KEY))

    def kept(self, width: int) -> int:
        """How narrow the first pass may make this column (``least`` for a text column that
        matters more than the keys beside it; the second pass goes down to the floor)."""
        if self.least is None:
            return self.floor
        return max(self.floor, min(self.natural, self.least, width))


def fit(cols: list[Col], width: int) -> list[tuple[Col, int]]:
    """Columns with their widths so that the line fits ``width``: text columns narrow first (a
    text column with ``least`` only down to it); what still does not fit leaves out the spare
    columns (lowest rank first), then key columns narrow, then text columns down to their
    floor, and then the column of lowest rank is left out, and so on. Within a pass the column of
    lowest rank narrows first."""
    cols = list(cols)
    while True:
        widths = [min(c.natural, _TEXT_CAP if c.kind == "text" else _KEY_CAP if c.kind == "key" else c.natural)
                  for c in cols]
        excess = sum(widths) + _GAP * (len(cols) - 1) - width

        def narrow(kind: str, floor: Any) -> None:
            nonlocal excess
            # one character at a time, down to its floor: the column of lowest rank first (the
            # widest of those), so what matters most keeps its width longest
            while excess > 0:
                shrinkable = [i for i, c in enumerate(cols) if c.kind == kind and widths[i] > floor(c)]
                if not shrinkable:
                    return
                i = min(shrinkable, key=lambda j: (cols[j].rank, -widths[j]))
                widths[i] -= 1
                excess -= 1

        narrow("text", lambda c: c.kept(width))
        droppable = [i for i, c in enumerate(cols) if c.kind != "whole"]
        spare = [i for i in droppable if cols[i].spare]
        if excess > 0 and spare:
            del cols[min(spare, key=lambda i: cols[i].rank)]
            continue
        narrow("key", lambda c: c.floor)
        narrow("text", lambda c: c.floor)
        if excess <= 0 or not droppable:
            return list(zip(cols, widths))
        del cols[min(droppable, key=lambda i: cols[i].rank)]


def render(console: Any, cols: list[Col], title: str | None = None) -> None:
    from rich import box
    from rich.table import Table

    width = console.width
    laid = fit(cols, width)
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0, 0, 1),
                  title_justify="left")
    for col, w in laid:
        table.add_column(col.header, width=w, no_wrap=True, overflow="ellipsis",
                         justify="right" if col.right else "left")
    rows = len(laid[0][0].cells) if laid else 0
    for r in range(rows):
        cells = []
        for col, _w in laid:
            text = col.cells[r]
            style = col.style[r] if col.style else None
            cells.append(_styled(text, style))
        table.add_row(*cells)
    console.print(table)


def _styled(text: str, style: str | None) -> Any:
    from rich.text import Text

    return Text(text, style=style or "")


STATUS_STYLES = {"ok": "green", "skipped": "dim", "cancelled": "yellow", "interrupted": "yellow"}


def receipt_columns(rows: list[list[str]], statuses: list[str]) -> list[Col]:
    """The receipt table: seq, lane, call, tool, status, tries, cache, ms, result or error. A
    lane column with no lane in it (a sequential run) is left out."""
    def column(i: int) -> list[str]:
        return [row[i] for row in rows]

    cols = [
        Col("seq", column(0), "whole", right=True),
        Col("item_key", column(1), "key", rank=6),
        Col("call_key", column(2), "key", rank=7),
        Col("tool", column(3), "key", rank=8),
        Col("status", column(4), "whole", style=[STATUS_STYLES.get(s, "red") for s in statuses]),
        Col("tries", column(5), "key", right=True, rank=2, spare=True),
        Col("cache", column(6), "key", rank=1, spare=True),
        Col("ms", column(7), "key", right=True, rank=3, spare=True),
        Col("result / error", column(8), "text", rank=5, least=24),
    ]
    if not any(column(1)):
        del cols[1]
    return cols


def short_time(value: Any) -> Any:
    """An RFC 3339 time as a person reads it in a table: to the minute, in UTC, without T and Z."""
    if isinstance(value, str) and len(value) >= 19 and value[10:11] == "T" and value.endswith("Z"):
        return value[:10] + " " + value[11:16]
    return value


def record_columns(records: list[dict], cell: Any) -> list[Col]:
    """A table of other records (runs, tools, approval requests): one column per key that holds
    something, the key's kind deciding how it may be cut."""
    cols = []
    for i, k in enumerate(_shown_keys(records)):
        values = [rec.get(k) for rec in records]
        if k == "args":  # as JSON (not as counts, which a mapping of numbers would look like)
            values = _args_cells(records, values)
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values if v is not None)
        shown = [cell(_short(k, v)) for v in values]
        kind = "whole" if k in WHOLE_KEYS else "text" if k in TEXT_KEYS else "key"
        # the rightmost text column goes first, then the rightmost key column
        rank = (300 if k in KEPT_TEXT else 100 if kind == "text" else 200) - i
        cols.append(Col(k, shown, kind, right=numeric, rank=rank))
    return cols


def _shown_keys(records: list[dict]) -> list[str]:
    """The records' keys in first-seen order, less those hidden or holding nothing in any record."""
    keys: list[str] = []
    for rec in records:
        keys.extend(k for k in rec if k not in keys and k != "type")
    return [k for k in keys if k not in HIDDEN_KEYS
            and any(rec.get(k) not in (None, "", {}, [], False) or (k == "args" and rec.get("args_withheld"))
                    for rec in records)]


def _args_cells(records: list[dict], values: list) -> list:
    from .._json import dumps

    return ["(withheld)" if rec.get("args_withheld") else None if v is None else dumps(v).decode()
            for rec, v in zip(records, values)]


def _short(key: str, value: Any) -> Any:
    return short_time(value) if key in TIME_KEYS else short_path(value) if key in PATH_KEYS else value


def short_path(value: Any) -> Any:
    """A path below the current folder, relative to it (as a person typed it)."""
    if isinstance(value, str) and value.startswith("/"):
        import os

        here = os.getcwd().rstrip("/") + "/"
        if value.startswith(here):
            return value[len(here):]
    return value
