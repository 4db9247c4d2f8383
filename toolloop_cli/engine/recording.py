"""What a routed run left in its journal, for the routed runner to go through again: on ``resume``
(the same run goes on: recorded answers reused, settled receipts kept), on ``replay`` (a new run
answered by the recorded answers; tools run again or their recorded results are taken) or on a
fork (``replay --from N``: a new run that takes the recorded turns before N, then goes on live)."""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Iterable
from typing import Any

from .rerun import in_flight_by_form, resume_action, write_in_flight

#: the message of a write or destructive call a fork refuses from its first live turn on
FORK_DENIED = "not executed in a fork; pass --execute-writes"


@dataclass(frozen=True, slots=True)
class Fork:
    """A run forked from turn ``iteration`` of run ``run_id``: turns before it are the recording's,
    from it on the loop is live, and writes are refused unless ``execute_writes``. Journaled with
    the fork's options, so a resumed fork is still one."""

    run_id: str
    iteration: int
    execute_writes: bool = False
    #: a fork of a child run: its context (from the child's journal), depth and the top plan's
    #: cap, journaled with the fork so that its resume admits the plan as the fork did
    child: dict | None = None

    def live(self, iteration: int) -> bool:
        return iteration >= self.iteration

    def refusal(self, iteration: int, tool: Any) -> str | None:
        """Why a call at ``iteration`` is not executed in the fork, or None."""
        if (self.live(iteration) and not self.execute_writes
                and getattr(tool, "effect", "read") in ("write", "destructive")):
            return FORK_DENIED
        return None

    def summary(self) -> dict:
        return {"run_id": self.run_id, "iteration": self.iteration}

    def journal_form(self) -> dict:
        return {"forked_from": self.summary(), "fork_execute_writes": self.execute_writes, **(self.child or {})}

    @classmethod
    def from_options(cls, options: dict | None) -> Fork | None:
        """The fork a run's journaled options say it is, or None."""
        found = (options or {}).get("forked_from")
        if not isinstance(found, dict):
            return None
        return cls(found["run_id"], int(found["iteration"]), bool((options or {}).get("fork_execute_writes")))


@dataclass
class Recording:
    """What a resumed routed run already has in its journal: model answers to reuse, receipts to
    keep (by seq), the at-most-once writes that had started, and how the resume treats them. A
    receipt not kept (the call runs again) is still what the model was told of that call: the
    answers after it are reused only while the new receipt shows the model the same."""

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
    #: a fork (new, or resumed): where it left the recording; a new fork also has ``replay`` set,
    #: with ``answers`` and ``receipts`` the recorded turns before its first live one
    fork: Fork | None = None

    def went_past(self, seq: int) -> None:
        """The resumed run went another way than the recording from call ``seq`` on: the
        receipts and start markers recorded there are not its own."""
        self.receipts = {s: r for s, r in self.receipts.items() if s < seq or r.get("parent_receipt_id") is not None}
        self.started = {s for s in self.started if s < seq}

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

    def replaced_receipt(self, seq: int, tool: object) -> dict | None:
        """On resume, the recorded receipt of a call that runs again instead of keeping it
        (``--retry-failed``, ``--retry-interrupted``, a cancelled call): what the model was told
        of it is what the recorded answers after it were given on (``LoopCalls._observe``)."""
        if self.replay:
            return None
        rec = self.receipts.get(seq)
        if rec is None or rec.get("tool") != getattr(tool, "id", None) or self.action(seq, tool) == "keep":
            return None
        return rec

    def kept_receipt(self, seq: int, tool: object) -> dict | None:
        """On resume, the settled receipt the call keeps instead of running again."""
        return self.receipts[seq] if self.action(seq, tool) == "keep" else None

    def write_in_flight(self, seq: int, tool: object) -> bool:
        """On resume, whether an at-most-once write had started with no receipt (the process
        died): it is reported ``interrupted`` rather than run again, unless --retry-interrupted."""
        return self.action(seq, tool) == "interrupted"

    def live(self, iteration: int) -> bool:
        """Whether turn ``iteration`` asks the models (a fork from its first live turn on)."""
        return self.fork is not None and self.fork.live(iteration)

    def replayed_receipt(self, seq: int, tool: object, iteration: int | None = None) -> dict | None:
        """On replay, the recorded receipt a call takes instead of running: every call offline,
        else writes (unless ``execute_writes``), gated calls (their recorded answer is reused; a
        write gated by the recorded run's taint is one)
        and ``plan:`` tools (a child run is replayed on its own). A fork takes none from its
        first live turn on."""
        if iteration is not None and self.live(iteration):
            return None
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


def recorded_starts(store: Any, run_id: str, receipts: Iterable[dict]) -> set[int]:
    """The seqs of run ``run_id`` whose at-most-once write had started: its journal's start
    markers, and the in-flight writes a replay or fork journaled before it copied their markers
    took from its recording (``receipts``: the run's)."""
    return store.started_seqs(run_id) | in_flight_by_form(receipts)


def seconds_used(receipts: list[dict], answers: list[dict]) -> float:
    """Loop time a run spent before it stopped: its model requests and its calls."""
    return (sum(float(a.get("duration_ms") or 0) for a in answers)
            + sum(float(r.get("duration_ms") or 0) for r in receipts)) / 1000.0

