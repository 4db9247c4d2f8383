"""What a routed run left in its journal, for the routed runner to go through again: on ``resume``
(the same run goes on: recorded answers reused, settled receipts kept) or on ``replay`` (a new run
answered by the recorded answers; tools run again or their recorded results are taken)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .rerun import resume_action, write_in_flight


@dataclass
class Recording:
    """What a resumed routed run already has in its journal: model answers to reuse, receipts to
    keep (by seq), the at-most-once writes that had started, and how the resume treats them."""

    answers: list[dict]
    receipts: dict[int, dict]
    started: set[int]
    retry_failed: bool = False
    retry_interrupted: bool = False
    seconds_used: float = 0.0
    #: (iteration, rule) of supervisor pauses the run stopped at (a resume goes past them)
    pauses: frozenset = frozenset()
    #: replay a recorded run as a new run instead of resuming it
    replay: bool = False
    offline: bool = False  # replay: every tool result from the recording
    execute_writes: bool = False  # replay: run write and destructive tools again too
    #: replay: the recorded run's budget raises (operator controls of kind ``raise``), met again where they were
    raises: list = field(default_factory=list)

    def action(self, seq: int, tool: object) -> str | None:
        """On resume, what the call at ``seq`` gets by the resume table (``rerun.py``): ``keep``
        its receipt, ``run`` again, or ``interrupted`` (a write that was in flight); None on replay.
        A receipt of another tool at that seq (the run goes another way now) counts as none."""
        if self.replay:
            return None
        rec = self.receipts.get(seq)
        status = rec["status"] if rec is not None and rec["tool"] == getattr(tool, "id", None) else None
        in_flight = write_in_flight(status, seq in self.started, bool(getattr(tool, "at_most_once", False)))
        return resume_action(status, in_flight_write=in_flight, retry_failed=self.retry_failed,
                             retry_interrupted=self.retry_interrupted)

    def kept_receipt(self, seq: int, tool: object) -> dict | None:
        """On resume, the settled receipt the call keeps instead of running again."""
        return self.receipts[seq] if self.action(seq, tool) == "keep" else None

    def write_in_flight(self, seq: int, tool: object) -> bool:
        """On resume, whether an at-most-once write had started with no receipt (the process
        died): it is reported ``interrupted`` rather than run again, unless --retry-interrupted."""
        return self.action(seq, tool) == "interrupted"

    def replayed_receipt(self, seq: int, tool: object) -> dict | None:
        """On replay, the recorded receipt a call takes instead of running: every call offline,
        else writes (unless ``execute_writes``), gated calls (their recorded answer is reused; a
        write gated by the recorded run's taint is one)
        and ``plan:`` tools (a child run is replayed on its own)."""
        rec = self.receipts.get(seq)
        if rec is None or rec.get("tool") != getattr(tool, "id", None):
            return None
        effect = getattr(tool, "effect", "read")
        # a call that was gated (its tool's own gate, or a taint's) takes its recorded answer
        gated = getattr(tool, "approval", None) is not None or rec.get("approval") is not None
        if self.offline or gated or getattr(tool, "kind", None) == "plan":
            return rec
        if effect in ("write", "destructive") and not self.execute_writes:
            return rec
        return None


def seconds_used(receipts: list[dict], answers: list[dict]) -> float:
    """Loop time a run spent before it stopped: its model requests and its calls."""
    return (sum(float(a.get("duration_ms") or 0) for a in answers)
            + sum(float(r.get("duration_ms") or 0) for r in receipts)) / 1000.0

