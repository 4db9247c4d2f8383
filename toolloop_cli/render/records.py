"""Writers for output records (receipts, summaries, rows): JSON Lines, one JSON array, or a
Rich table. Writers only write; choosing one is the CLI's job.

Tables are for a person: every cell is plain text (never Rich markup) with control characters
escaped, so an item key, a tool name or a result cannot style, move or clear the terminal."""

from __future__ import annotations

from typing import IO, Any

from .._json import dumps
from .._text import escape


class JsonlWriter:
    """One JSON object per line, flushed at once so readers see each record while the run goes
    on. With ``autoflush=False`` the caller flushes (e.g. once per batch of committed receipts)."""

    def __init__(self, out: IO[bytes], autoflush: bool = True):
        self.out = out
        self.autoflush = autoflush

    def write(self, record: dict) -> None:
        self.out.write(dumps(record) + b"\n")
        if self.autoflush:
            self.out.flush()

    def flush(self) -> None:
        self.out.flush()

    def close(self) -> None:
        self.out.flush()


class JsonArrayWriter:
    """One JSON array of the same records, streamed element by element."""

    def __init__(self, out: IO[bytes]):
        self.out = out
        self.count = 0

    def write(self, record: dict) -> None:
        self.out.write((b"[\n" if self.count == 0 else b",\n") + dumps(record))
        self.count += 1

    def flush(self) -> None:
        self.out.flush()

    def close(self) -> None:
        self.out.write(b"[]\n" if self.count == 0 else b"\n]\n")
        self.out.flush()


def _cell(value: Any, width: int = 60) -> str:
    try:
        text = escape(value if isinstance(value, str) else dumps(value).decode())
    except TypeError:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= width else text[: width - 1] + "…"


def _plain(value: Any) -> str:
    """A cell for a person: counts as 'ok 3, error 1', booleans as yes/no, nothing as blank."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict) and all(isinstance(v, (int, float)) for v in value.values()):
        return escape(", ".join(f"{k} {v}" for k, v in value.items()))
    return _cell(value)


RECEIPT_COLUMNS = ("seq", "item_key", "call_key", "tool", "status", "attempts", "cache", "duration_ms", "result / error")


def receipt_row(rec: dict) -> list[str]:
    detail = rec["result"] if rec["status"] == "ok" else (rec["error"] or {}).get("message", "")
    return [
        str(rec["seq"]),
        escape(rec["item_key"] or ""),
        escape(rec["call_key"] or ""),
        escape(rec["tool"]),
        rec["status"],
        str(rec["attempts"]),
        rec["cache"],
        f"{rec['duration_ms']:.1f}",
        _cell(detail),
    ]


class TableWriter:
    """Collects records and prints Rich tables at the end: receipts, then the summary."""

    def __init__(self, console: Any):
        self.console = console
        self.rows: list[dict] = []
        self.summary: dict | None = None
        self.other: list[dict] = []

    def write(self, record: dict) -> None:
        kind = record.get("type")
        if kind == "receipt":
            self.rows.append(record)
        elif kind == "summary":
            self.summary = record
        else:
            self.other.append(record)

    def flush(self) -> None:
        pass  # the table is printed whole at the end

    def close(self) -> None:
        from rich.table import Table
        from rich.text import Text

        styles = {"ok": "green", "skipped": "dim", "cancelled": "yellow", "interrupted": "yellow"}
        if self.rows:
            table = Table(title="receipts", show_lines=False)
            for col in RECEIPT_COLUMNS:
                table.add_column(col, justify="right" if col in ("seq", "attempts", "duration_ms") else "left",
                                 overflow="fold")
            for rec in self.rows:
                row: list[Any] = [Text(cell) for cell in receipt_row(rec)]
                row[4].stylize(styles.get(rec["status"], "red"))
                table.add_row(*row)
            self.console.print(table)
        if self.other:
            keys: list[str] = []
            for rec in self.other:
                keys.extend(k for k in rec if k not in keys and k != "type")
            # a column with nothing in it (e.g. mcp_name when no tool comes from MCP) is left out
            keys = [k for k in keys if any(rec.get(k) not in (None, "", {}, []) for rec in self.other)]
            table = Table()
            for k in keys:
                numeric = all(isinstance(rec.get(k), (int, float)) and not isinstance(rec.get(k), bool)
                              for rec in self.other if rec.get(k) is not None)
                table.add_column(Text(escape(k)), overflow="fold", justify="right" if numeric else "left")
            for rec in self.other:
                table.add_row(*[Text(_plain(rec.get(k))) for k in keys])
            self.console.print(table)
        if self.summary is not None:
            s = self.summary
            counts = ", ".join(f"{k} {v}" for k, v in s["counts"].items() if v) or "no calls"
            style = "green" if s["status"] == "ok" else "red"
            self.console.print(Text.assemble(
                (escape(str(s["status"])), f"bold {style}"),
                escape(f" run {s['run_id']} ({s['mode']}): {counts} in {s['duration_ms'] / 1000:.2f}s"),
            ))
