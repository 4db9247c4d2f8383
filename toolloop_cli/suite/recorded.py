"""What a case with a fixture replays: the recorded model answers, and for each call the recorded
receipt (``tools: recorded``; writes and gated calls under ``tools: live`` too), or a fault the
case lays over it. It is the engine's replay ``Recording`` with two rules of a test added:

- a call a test must not run (every call under ``tools: recorded``, a write under ``live``) with
  no recorded receipt gets an ``error`` receipt of kind ``not_recorded`` instead of running: a
  test never reaches a tool, a server or the network the recording did not;
- the ``call``-th call of a tool named in ``faults`` gets the fault's status (every attempt of it
  fails that way), whatever its effect and wherever its result would have come from.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .._canonical import sha256_of
from ..engine.recording import Recording
from ..receipts import Receipt
from .expect import FAULT, NOT_RECORDED
from .models import FaultDecl

_RECEIPT_KEYS = frozenset(f.name for f in dataclasses.fields(Receipt)) | {"type"}


@dataclass
class CaseRecording(Recording):
    """A replay ``Recording`` for one case run (``subagent``: the plan's, for receipts made here)."""

    subagent: str = ""
    faults: tuple[FaultDecl, ...] = ()
    calls_of: dict[str, int] = field(default_factory=dict)  # calls so far, per tool

    def replayed_receipt(self, seq: int, tool: object, *more: Any, **named: Any) -> dict | None:
        tid = str(getattr(tool, "id", ""))
        n = self.calls_of[tid] = self.calls_of.get(tid, 0) + 1
        recorded = self.receipts.get(seq)
        if recorded is not None and recorded.get("tool") != tid:
            recorded = None
        fault = next((f for f in self.faults if f.tool == tid and f.call == n), None)
        if fault is not None:
            return _faulted(self._base(seq, tool, recorded), fault, tool, n)
        rec = super().replayed_receipt(seq, tool, *more, **named)
        if rec is not None:
            return {k: v for k, v in rec.items() if k in _RECEIPT_KEYS}
        if self.offline or getattr(tool, "effect", "read") in ("write", "destructive"):
            base = self._base(seq, tool, None)
            return {**base, "status": "error", "error": {
                "kind": NOT_RECORDED, "message": f"no recorded result for {tid} in the fixture; the case does not"
                                                 " run it"}}
        return None

    def _base(self, seq: int, tool: object, recorded: dict | None) -> dict:
        """A receipt of this call that did not run: its recorded arguments where there are some."""
        args = recorded.get("args") if recorded is not None else None
        return {
            "type": "receipt", "run_id": "", "seq": seq, "completion_seq": 0, "subagent": self.subagent,
            "tool": getattr(tool, "id", ""), "parallel_batch_id": None, "item_key": None,
            "call_key": recorded.get("call_key") if recorded is not None else None, "parent_receipt_id": None,
            "iteration": None, "receipt_id": "", "status": "error", "abandoned": False, "attempts": 0,
            "cache": "off", "args_sha256": sha256_of(args) if args is not None else None, "args": args,
            "result": None, "error": None, "envelope": None, "started_at": None, "finished_at": None,
            "duration_ms": 0.0,
        }


def _faulted(base: dict, fault: FaultDecl, tool: object, n: int) -> dict:
    retry = getattr(tool, "retry", None)
    attempts = getattr(retry, "max_attempts", 1) if fault.status in getattr(retry, "on", ()) else 1
    message = fault.message or (f"no result within the tool's timeout (a fault the case lays over call {n})"
                                if fault.status == "timeout" else f"a fault the case lays over call {n}")
    kind = "timeout" if fault.status == "timeout" else FAULT
    return {**base, "status": fault.status, "attempts": attempts, "result": None,
            "error": {"kind": kind, "message": message}}
