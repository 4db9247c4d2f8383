"""The Receipt record and its statuses (plain data)."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from datetime import datetime, timezone
from typing import Any

STATUSES = (
    "ok", "error", "timeout", "invalid_input", "invalid_output", "skipped", "cancelled",
    "denied", "duplicate", "budget_exceeded", "interrupted",
)
SUMMARY_STATUSES = ("ok", "failed", "rejected", "stopped", "interrupted")
EXIT_CODES = {"ok": 0, "failed": 1, "rejected": 3, "stopped": 4, "interrupted": 130}
# statuses retried by resume --retry-failed
FAILED_STATUSES = frozenset({"error", "timeout", "invalid_output"})


#: the last second formatted, and its date part: one tuple, replaced whole, so a thread never
#: reads one second's date with another's (a process may run several runs, e.g. ``serve``)
_last_second: tuple = (None, "")


def rfc3339(epoch_s: float | None) -> str | None:
    """RFC 3339 UTC with microseconds, e.g. 2026-01-02T03:04:05.678901Z."""
    if epoch_s is None:
        return None
    second, frac = divmod(round(epoch_s * 1_000_000), 1_000_000)
    global _last_second
    cached = _last_second
    if cached[0] != second:  # receipts cluster within a second: format the date part once
        cached = _last_second = (second, datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S."))
    return "%s%06dZ" % (cached[1], frac)  # cheaper than an f-string's format spec, twice a receipt


def millis3(ms: float) -> float:
    """``round(ms, 3)``, the same float, without the decimal conversion ``round`` makes for a
    number of digits (several times the cost of the rest of a receipt's times, once a call): the
    nearest integer of microseconds, divided back, both steps exact; a value so close to half a
    microsecond that the product's own rounding could tip it is left to ``round``."""
    us = ms * 1000
    n = round(us)
    # below 1e9 the product's own error stays far under 1e-6
    if abs(abs(us - n) - 0.5) < 1e-6 or not -1e9 < us < 1e9:
        return round(ms, 3)
    return n / 1000


@dataclass(frozen=True, slots=True)
class Receipt:
    run_id: str
    seq: int
    completion_seq: int
    subagent: str
    tool: str
    parallel_batch_id: str | None
    item_key: str | None
    call_key: str | None
    parent_receipt_id: str | None
    iteration: int | None
    receipt_id: str
    status: str
    abandoned: bool
    attempts: int
    cache: str
    args_sha256: str | None
    args: Any
    result: Any
    error: dict | None
    envelope: dict | None
    started_at: str | None
    finished_at: str | None
    duration_ms: float
    approval: dict | None = None  # a gated call's answer: {decision, by, at, args_sha256}
    child_run_id: str | None = None  # the child run of a plan tool
    #: None for a tool that did not ask for a sandbox, else the sandbox its calls get
    isolation: dict | None = None
    #: the run's ``tainted_by`` on a write or destructive call proposed after untrusted content
    taint: dict | None = None

    def as_record(self) -> dict:
        """The JSON Lines record: every receipt key, in its documented order (``RECORD_KEYS``).
        Copied from a template of those keys and filled in: a dict built key by key (a display of
        28 keys) cost about twice as much, once a call."""
        rec = _TEMPLATE.copy()
        rec["run_id"] = self.run_id
        rec["seq"] = self.seq
        rec["completion_seq"] = self.completion_seq
        rec["subagent"] = self.subagent
        rec["tool"] = self.tool
        rec["parallel_batch_id"] = self.parallel_batch_id
        rec["item_key"] = self.item_key
        rec["call_key"] = self.call_key
        rec["parent_receipt_id"] = self.parent_receipt_id
        rec["iteration"] = self.iteration
        rec["receipt_id"] = self.receipt_id
        rec["status"] = self.status
        rec["abandoned"] = self.abandoned
        rec["attempts"] = self.attempts
        rec["cache"] = self.cache
        rec["args_sha256"] = self.args_sha256
        rec["args"] = self.args
        rec["result"] = self.result
        rec["error"] = self.error
        rec["envelope"] = self.envelope
        rec["started_at"] = self.started_at
        rec["finished_at"] = self.finished_at
        rec["duration_ms"] = self.duration_ms
        rec["approval"] = self.approval
        rec["child_run_id"] = self.child_run_id
        rec["isolation"] = self.isolation
        rec["taint"] = self.taint
        return rec

    @classmethod
    def from_record(cls, rec: dict) -> "Receipt":
        return cls(**{k: v for k, v in rec.items() if k != "type"})


#: a receipt record's keys, in their documented order
RECORD_KEYS = ("type", *(f.name for f in fields(Receipt)))
_TEMPLATE: dict = dict.fromkeys(RECORD_KEYS)
_TEMPLATE["type"] = "receipt"


def _frozen_init(cls: type) -> None:
    """Give the frozen dataclass ``cls`` an ``__init__`` that fills its slots as a plain object
    would. The generated one looks up ``object.__setattr__`` for every field, and setting each slot
    through its descriptor still cost about five times a plain store (28 fields, once a call): the
    new object is given, for the length of ``__init__``, an unfrozen class of the very same slots,
    filled with plain stores, and given its class back. The class stays frozen (nothing outside
    ``__init__`` ever sees the other class), and the signature, defaults and order are the
    dataclass's own. A subclass (another layout) is filled slot by slot through the descriptors."""
    names, params, env = [], [], {}
    for f in fields(cls):
        assert f.default_factory is MISSING, "a default factory needs the generated __init__"
        if f.default is MISSING:
            params.append(f.name)
        else:
            env[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
        env[f"_s_{f.name}"] = getattr(cls, f.name).__set__
        names.append(f.name)
    env["_cls"], env["_set"] = cls, object.__setattr__
    env["_open"] = type(f"_Open{cls.__name__}", (), {"__slots__": cls.__slots__})  # type: ignore[attr-defined]
    fast = "".join(f"        self.{n} = {n}\n" for n in names)
    slow = "".join(f"        _s_{n}(self, {n})\n" for n in names)
    body = (f"    if type(self) is _cls:\n        _set(self, '__class__', _open)\n{fast}"
            f"        _set(self, '__class__', _cls)\n    else:\n{slow}")
    ns: dict = {}
    exec(f"def __init__(self, {', '.join(params)}):\n{body}", env, ns)  # noqa: S102 - built from field names
    ns["__init__"].__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = ns["__init__"]  # type: ignore[misc]


_frozen_init(Receipt)


def taint_text(source: dict | None) -> str:
    """How a taint reads for a person (approval requests, the terminal prompt, the web inbox)."""
    src = source or {}
    return f"after untrusted content from {src.get('tool')} at turn {src.get('iteration')}"


def summary_status(counts: dict[str, int], *, stopped: bool = False, interrupted: bool = False) -> str:
    if interrupted:
        return "interrupted"
    if stopped:
        return "stopped"
    return "ok" if all(s == "ok" for s, n in counts.items() if n) else "failed"


def summary_record(run_id: str | None, mode: str | None, status: str, counts: dict[str, int], duration_ms: float,
                   contract_sha256: str | None, outcome: str | None = None, final: Any = None, *,
                   executor: str = "local", labels: dict[str, str] | None = None,
                   chain_sha256: str | None = None) -> dict:
    """The last record of a run. ``run_id``, ``mode`` and ``contract_sha256`` are None only for a
    plan rejected before it became a run (status ``rejected``). ``executor`` says where calls of
    callables run (``local`` or ``ray``); ``labels`` are the run's (``{}`` when none);
    ``chain_sha256`` is the head of the hash chain over the run's records (``chain.py``), None before
    any record."""
    return {
        "type": "summary",
        "run_id": run_id,
        "mode": mode,
        "status": status,
        "outcome": outcome,
        "final": final,
        "counts": {s: counts.get(s, 0) for s in STATUSES},
        "duration_ms": round(duration_ms, 3),
        "contract_sha256": contract_sha256,
        "executor": executor,
        "labels": dict(labels) if labels else {},
        "chain_sha256": chain_sha256,
    }
