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
        from .tables import BIG_RUN, receipt_columns, record_columns, render

        rows = self.rows
        if len(rows) > BIG_RUN:
            # a big run: the counts per status, then only the receipts that are not ok
            counts: dict[str, int] = {}
            for rec in rows:
                counts[rec["status"]] = counts.get(rec["status"], 0) + 1
            not_ok = [rec for rec in rows if rec["status"] != "ok"]
            self.console.print(f"{len(rows)} receipts: " + ", ".join(f"{k} {v}" for k, v in counts.items())
                               + (f"; the {len(not_ok)} not ok:" if not_ok else "")
                               + " (every receipt: --format jsonl)", highlight=False, markup=False)
            rows = not_ok
        if rows:
            render(self.console, receipt_columns([receipt_row(rec) for rec in rows], [rec["status"] for rec in rows]),
                   title="receipts" if rows is self.rows else None)
        if self.other:
            render(self.console, record_columns(self.other, _plain))
        if self.summary is not None:
            s = self.summary
            counts_text = ", ".join(f"{k} {v}" for k, v in s["counts"].items() if v) or "no calls"
            style = "green" if s["status"] == "ok" else "red"
            from rich.text import Text

            self.console.print(Text.assemble(
                (escape(str(s["status"])), f"bold {style}"),
                escape(f" run {s['run_id']} ({s['mode']}): {counts_text} in {s['duration_ms'] / 1000:.2f}s"),
            ))
