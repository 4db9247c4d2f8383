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
    on. With ``autoflush=False`` the caller flushes (e.g. once per batch of committed receipts).

    ``write(record, line)``: ``line``, when given, is the record's JSON as the journal stored it,
    ``_json.dumps(record)``, the very bytes this writer would make, so they are written as they
    are instead of encoding the record again (every writer here takes it; only the JSON ones use
    it)."""

    def __init__(self, out: IO[bytes], autoflush: bool = True):
        self.out = out
        self.autoflush = autoflush

    def write(self, record: dict, line: bytes | None = None) -> None:
        self.out.write((dumps(record) if line is None else line) + b"\n")
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

    def write(self, record: dict, line: bytes | None = None) -> None:
        self.out.write((b"[\n" if self.count == 0 else b",\n") + (dumps(record) if line is None else line))
        self.count += 1

    def flush(self) -> None:
        self.out.flush()

    def close(self) -> None:
        self.out.write(b"[]\n" if self.count == 0 else b"\n]\n")
        self.out.flush()


def _plain(value: Any) -> str:
    """A cell for a person: counts as 'ok 3, error 1', booleans as yes/no, nothing as blank."""
    from .views import cell

    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict) and all(isinstance(v, (int, float)) for v in value.values()):
        return escape(", ".join(f"{k} {v}" for k, v in value.items()))
    return cell(value, 60)


class TableWriter:
    """Collects records and prints Rich tables at the end (``views.py``): a routed run as one
    timeline, a batch run as its receipts, a dry run as its calls and worst case; then the
    summary."""

    def __init__(self, console: Any):
        self.console = console
        self.records: list[dict] = []
        self.summary: dict | None = None

    def write(self, record: dict, line: bytes | None = None) -> None:
        if record.get("type") == "summary":
            self.summary = record
        else:
            self.records.append(record)

    def flush(self) -> None:
        pass  # the table is printed whole at the end

    def close(self) -> None:
        from . import views

        records, summary = self.records, self.summary
        routed = (summary or {}).get("mode") == "routed" or any(r.get("type") in views.TIMELINE_TYPES
                                                                 for r in records)
        if routed:
            views.show_timeline(self.console, records)
        else:
            views.show_receipts(self.console, [r for r in records if r.get("type") == "receipt"])
            planned = [r for r in records if r.get("type") == "planned"]
            total = next((r for r in records if r.get("type") == "dry_run"), None)
            if planned or total is not None:
                views.show_dry_run(self.console, planned, total)
            views.show_records(self.console, [r for r in records if r.get("type") not in
                                              ("receipt", "planned", "dry_run")], _plain)
        if summary is not None:
            self._summary(summary, routed)

    def _summary(self, s: dict, routed: bool) -> None:
        from rich.text import Text

        from .views import loop_text, routed_ending

        counts_text = ", ".join(f"{k} {v}" for k, v in (s.get("counts") or {}).items() if v) or "no calls"
        style = "green" if s["status"] == "ok" else "red"
        self.console.print(Text.assemble(
            (escape(str(s["status"])), f"bold {style}"),
            escape(f" run {s['run_id']} ({s['mode']}): {counts_text} in {s['duration_ms'] / 1000:.2f}s"),
        ))
        if routed:
            loop = loop_text(s)
            if loop:
                self.console.print(Text(f"used: {loop}"))
            routed_ending(self.console, s)
