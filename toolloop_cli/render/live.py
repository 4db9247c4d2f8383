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
