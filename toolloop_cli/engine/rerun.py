"""What ``resume`` does with a call, by the status of its receipt: the one table, read by the lanes'
resume (``resume.py``) and by the routed runner going through its journal again (``recording.py``).

- a committed ``ok`` receipt is kept; the call never runs again;
- ``error``, ``timeout``, ``invalid_output``, ``invalid_input`` are kept, or run again with
  ``--retry-failed``; ``interrupted`` is kept, or run again with ``--retry-interrupted``;
- ``denied``, ``duplicate``, ``budget_exceeded`` are kept;
- no receipt, ``cancelled`` or ``skipped``: the call runs again, unless it is an at-most-once write
  whose start was committed: then it is reported ``interrupted`` (``--retry-interrupted`` runs it).

A kept receipt counts toward its tool's ``max_calls`` when the call ran (``counts_as_made``): an
attempt, a cache hit, or an ``interrupted`` write that had started, which may have happened. That a
write had started is the journal's start marker for its seq, never a receipt's wording: a replay or
a fork that copies such a receipt writes the marker into its own journal too (``copies_start``).
Only where no marker is kept (a test case's fixture, a journal from before copies brought theirs)
is a copy known by its exact form (``in_flight_by_form``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from ..receipts import FAILED_STATUSES

#: kept whatever the flags say
KEPT_STATUSES = frozenset({"ok", "denied", "duplicate", "budget_exceeded"})
#: kept, or run again with --retry-failed
RETRIED_IF_FAILED = FAILED_STATUSES | {"invalid_input"}
#: receipts that leave the call to run again (and so may leave a write in flight)
NOT_DONE = (None, "cancelled", "skipped")

#: the message of a write reported ``interrupted`` because its start was committed with no receipt
IN_FLIGHT = ("this write was in flight when the run stopped, so it may or may not have happened;"
             " run it again on purpose with --retry-interrupted")
#: every wording that message has had: where no start marker is kept (an export, a journal written
#: before replays and forks copied them) a copy is known by it (``in_flight_by_form``); a
#: rewording of ``IN_FLIGHT`` adds the new text here and keeps the old
_IN_FLIGHT_TEXTS = frozenset({IN_FLIGHT})


def resume_action(status: str | None, *, in_flight_write: bool, retry_failed: bool, retry_interrupted: bool) -> str:
    """``keep`` (the receipt stands), ``run`` (the call runs again) or ``interrupted`` (an
    at-most-once write that was in flight) for a call whose receipt has ``status`` (None: none)."""
    if status in KEPT_STATUSES:
        return "keep"
    if status in RETRIED_IF_FAILED:
        return "run" if retry_failed else "keep"
    if status == "interrupted":
        return "run" if retry_interrupted else "keep"
    # no receipt, cancelled or skipped
    if in_flight_write and not retry_interrupted:
        return "interrupted"
    return "run"


def write_in_flight(status: str | None, started: bool, at_most_once: bool) -> bool:
    """Whether a call is an at-most-once write whose start was committed and whose receipt (if
    any) does not say it ended: the process stopped while it ran."""
    return at_most_once and started and status in (None, "cancelled")


def counts_as_made(receipt: Any, started: Collection[int] = ()) -> bool:
    """Whether a settled call counts as one its tool made (toward ``max_calls``, and a write
    toward the supervisor's count of writes that ran): it had an attempt or a cache hit, or it is
    a write settled ``interrupted`` because it was in flight (its start marker is in
    ``started``), which may have happened."""
    if receipt.attempts > 0 or receipt.cache == "hit":
        return True
    return receipt.status == "interrupted" and receipt.seq in started


def copies_start(record: dict, started: Collection[int]) -> bool:
    """Whether a recorded receipt a replay or fork takes as its own is a write that was in flight
    (settled ``interrupted`` with its start marker in the recording's ``started``): the new run
    journals a start marker for it too, so it still counts as made when that run is read again."""
    return record.get("status") == "interrupted" and record.get("seq") in started


def in_flight_by_form(receipts: Iterable[dict]) -> set[int]:
    """Seqs of receipts that are copies of writes settled ``interrupted`` because they were in
    flight, where no start marker came with them (a test case's fixture, an export; a replay or
    fork journaled before copies brought their marker): settled by the engine (kind
    ``interrupted``, no attempt) with its message. A tool's own failure never has that shape (it
    had an attempt, and its error's kind is its own)."""
    return {r["seq"] for r in receipts if r.get("status") == "interrupted" and not r.get("attempts")
            and _engine_in_flight(r.get("error") or {})}


def _engine_in_flight(error: dict) -> bool:
    return error.get("kind") == "interrupted" and error.get("message") in _IN_FLIGHT_TEXTS
