"""The live progress view on standard error: done/total, failures, rate, ETA."""

from __future__ import annotations

from typing import Any


class LiveProgress:
    def __init__(self, console: Any, total: int, label: str):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("[red]{task.fields[failed]} failed"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self.task = self.progress.add_task(label, total=total, failed=0, rate="")
        self.failed = 0
        self.done = 0

    def __enter__(self) -> "LiveProgress":
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def advance(self, status: str) -> None:
        self.done += 1
        if status not in ("ok", "skipped"):
            self.failed += 1
        task = self.progress.tasks[0]
        speed = task.speed
        self.progress.update(self.task, advance=1, failed=self.failed,
                             rate=f"{speed:.0f}/s" if speed else "")


class RoutedProgress:
    """The live line of a routed run, which has no known total: the turn, the tool calls and the
    router's tokens against their budgets, and the time against the loop's timeout. It counts
    from the records as they are written (a resumed run's earlier records included)."""

    def __init__(self, console: Any, budget: Any, label: str = "routed"):
        from rich.progress import Progress, TextColumn, TimeElapsedColumn

        self.budget = budget
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            TextColumn("{task.fields[used]}"),
            TimeElapsedColumn(),
            TextColumn(f"of {_clock(budget.timeout_s)}"),
            console=console,
            transient=False,
        )
        self.turns = 0
        self.calls = 0
        self.tokens = 0
        self.task = self.progress.add_task(label, total=None, used=self.used())

    def used(self) -> str:
        b = self.budget
        return (f"turn {self.turns}/{b.max_iterations} · tool calls {self.calls}/{b.max_tool_calls}"
                f" · router tokens {self.tokens:,}/{b.max_tokens:,}")

    def __enter__(self) -> "RoutedProgress":
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def see(self, record: dict) -> None:
        kind = record.get("type")
        if kind == "decision":
            self.turns = max(self.turns, int(record.get("iteration") or 0))
            tokens = record.get("tokens") or {}
            self.tokens += sum(v for v in tokens.values() if isinstance(v, int))
        elif kind == "receipt" and record.get("parent_receipt_id") is None:
            self.calls += 1
        else:
            return
        self.progress.update(self.task, used=self.used())


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
