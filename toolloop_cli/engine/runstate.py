"""The state a runner shares with its session: counts, the halt policy, interruption, the cancel
scopes of work in flight, and the calls paused for approval."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..receipts import STATUSES, Receipt


@dataclass(frozen=True)
class HaltPolicy:
    """``--halt now,fail=N`` or ``--halt soon,fail=P%``: stop the batch after failures."""

    when: str  # now | soon
    fail_count: int | None = None
    fail_percent: float | None = None

    def tripped(self, failed: int, total: int) -> bool:
        if failed == 0:
            return False
        if self.fail_count is not None:
            return failed >= self.fail_count
        return total > 0 and failed * 100.0 >= (self.fail_percent or 0) * total

    def journal_form(self) -> dict:
        return {"when": self.when, "fail_count": self.fail_count, "fail_percent": self.fail_percent}

    @classmethod
    def parse(cls, text: str) -> "HaltPolicy":
        """Parse ``now,fail=3`` / ``soon,fail=10%``; raises ValueError with a usable message."""
        try:
            when, rest = text.split(",", 1)
            key, value = rest.split("=", 1)
        except ValueError:
            raise ValueError(f"--halt '{text}': expected now,fail=N or soon,fail=P%") from None
        when, key, value = when.strip(), key.strip(), value.strip()
        if when not in ("now", "soon") or key != "fail":
            raise ValueError(f"--halt '{text}': expected now,fail=N or soon,fail=P%")
        try:
            if value.endswith("%"):
                pct = float(value[:-1])
                if not 0 < pct <= 100:
                    raise ValueError
                return cls(when, fail_percent=pct)
            n = int(value)
            if n < 1:
                raise ValueError
            return cls(when, fail_count=n)
        except ValueError:
            raise ValueError(f"--halt '{text}': fail= takes a count of 1 or more, or a percentage like 10%") from None


@dataclass
class RunState:
    """What a run's runner and its session share while it runs."""

    total: int
    halt: HaltPolicy | None = None
    counts: dict[str, int] = field(default_factory=lambda: {s: 0 for s in STATUSES})
    failed: int = 0
    halted: bool = False
    interrupted: bool = False
    in_flight: set = field(default_factory=set)
    paused: list = field(default_factory=list)  # (item_key, call_key) of calls waiting for approval
    stopped_by: str | None = None  # why the run was stopped early (an operator's abort)
    rejected_lanes: int = 0  # lanes refused by run --stream (each makes the run failed)

    def note(self, receipt: Receipt) -> None:
        """A settled receipt (counted by the settlement): trips the halt policy on failures."""
        if receipt.status not in ("ok", "skipped"):
            self.failed += 1
            if self.halt is not None and not self.halted and self.halt.tripped(self.failed, self.total):
                self.halted = True
                if self.halt.when == "now":
                    for scope in list(self.in_flight):
                        scope.cancel()

    def cancelling(self) -> bool:
        """Whether work in flight is being cancelled: a signal, an operator's stop, or ``--halt now``."""
        return self.interrupted or (self.halted and (self.stopped_by is not None
                                                     or (self.halt is not None and self.halt.when == "now")))

    def stop_now(self, why: str) -> None:
        """Stop as ``--halt now`` would: calls in flight are cancelled, the rest skipped."""
        self.stopped_by = why
        self.halted = True
        for scope in list(self.in_flight):
            scope.cancel()

    def interrupt(self) -> None:
        self.interrupted = True
        for scope in list(self.in_flight):
            scope.cancel()
