"""What every call of one run shares, in three parts: its configuration (what the run was asked
to do), its services (what calls use while they run) and its sequencing (the numbers it hands out).
Plain state; no printing. Each part is changed only through its own methods."""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from ..contract.compiled import Contract, ToolSpec
from ..receipts import rfc3339
from .executors import Executors
from .limits import ToolLimits
from .redact import Redactor, RunSecrets

DEFAULT_OUTPUT_CAP = 16 * 1024 * 1024
#: first seq of dispatched calls when the runner did not say how many calls its plan has
CHILD_SEQ_FALLBACK = 1_000_000_000


class Cache(Protocol):
    def get(self, key: str) -> Any | None: ...
    def put(self, key: str, tool: str, result: Any) -> None: ...


@dataclass(slots=True)
class RunConfig:
    """What the run was asked to do. ``parallel_batch_id`` is set when a parallel run opens."""

    run_id: str
    contract: Contract
    subagent: str | None = None  # the plan's subagent, for receipts of calls that never resolved a tool
    parallel_batch_id: str | None = None
    default_timeout_s: float | None = None
    no_cache: bool = False
    refresh_cache: bool = False
    output_cap_bytes: int = DEFAULT_OUTPUT_CAP
    approve: str = "ask"  # approval gates: ask (a person) | all | none  (run --approve)
    #: out-of-band identity of the run (run --label KEY=VALUE): in audit events, telemetry and the
    #: running call's identity (``current_call().labels``); never in arguments or results
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class RunServices:
    """What calls use while they run."""

    cache: Cache | None = None
    audit: Callable[[dict], None] | None = None
    approvals: Any = None  # engine.approvals.Approvals: answers from the journal (approve=ask)
    # a person at a terminal: async (tool, item_key, call_key, args) -> ("run", args) | ("reject", message)
    ask: Any = None
    before_start: Callable[[Any], None] | None = None  # journal hook for at-most-once writes
    rng: random.Random = field(default_factory=random.Random)
    limits: ToolLimits = field(default_factory=ToolLimits)
    executors: Executors | None = None
    warn: Callable[[str], None] | None = None  # a one-line warning for a person (standard error)
    #: the routed loop's budget ledger (``budget.BudgetLedger``): child runs and dispatched calls
    #: check and charge it; None in sequential and parallel runs
    budget: Any = None
    #: secret values no pointer reaches (credentials read, redacted values a model proposed):
    #: scrubbed from every record the run writes; a child run shares its parent's
    secrets: RunSecrets = field(default_factory=RunSecrets)
    #: the routed run's taint (``taint.RunTaint``): the gates and receipts read it; None in
    #: sequential and parallel runs
    taint: Any = None
    #: who is told when a call waits for a person or the run ends (``notify.Notifier``), or None;
    #: a child run shares its parent's
    notify: Any = None


class Sequencer:
    """The numbers a run hands out: receipt ids, the order calls finish in, seqs of dispatched calls."""

    __slots__ = ("_completion", "_id_prefix", "_ids", "_child_next", "child_seq_base")

    def __init__(self) -> None:
        self._completion = 0
        # receipt ids: a random prefix per run context (one system call) and a counter
        self._id_prefix = os.urandom(8).hex()
        self._ids = 0
        self._child_next: int | None = None
        #: seq of the first dispatched call: the number of calls in the plan (set by the runner)
        self.child_seq_base: int | None = None

    def new_receipt_id(self) -> str:
        """A unique receipt id: 16 random hex digits for this context, then a counter."""
        self._ids += 1
        return f"{self._id_prefix}{self._ids:016x}"

    def next_completion(self) -> int:
        n = self._completion
        self._completion += 1
        return n

    @property
    def completed(self) -> int:
        return self._completion

    def continue_from(self, completion: int) -> None:
        """A resumed run goes on numbering where the journal left off."""
        self._completion = completion

    def plan_calls(self, n: int | None) -> None:
        """Dispatched calls are numbered after the plan's ``n`` calls (first caller wins)."""
        if n is not None and self.child_seq_base is None:
            self.child_seq_base = n

    def new_child_seq(self) -> int:
        """A seq for a dispatched call: after every plan seq, never reused in the run. The count
        starts at the run's completion counter, which a resume continues, so a resumed run
        cannot hand out a seq an earlier child already had."""
        if self._child_next is None:
            self._child_next = self._completion
        n = self._child_next
        self._child_next += 1
        base = self.child_seq_base if self.child_seq_base is not None else CHILD_SEQ_FALLBACK
        return base + n


class CallLedger:
    """Calls started per tool in this run, for the tools that cap them (``max_calls``)."""

    __slots__ = ("_made",)

    def __init__(self) -> None:
        self._made: dict[str, int] = {}

    def count(self, tool: ToolSpec) -> None:
        if tool.max_calls is not None:
            self._made[tool.id] = self._made.get(tool.id, 0) + 1

    def made(self, tool_id: str) -> int:
        return self._made.get(tool_id, 0)


class RunContext:
    """One run's configuration, services and sequencing, with the redactors and the record of
    dispatched receipts waiting for their parent (``settle.Children``)."""

    __slots__ = ("config", "services", "sequence", "ledger", "children", "dispatching", "_redactors")

    def __init__(self, run_id: str, contract: Contract, *, services: RunServices | None = None,
                 **config: Any):
        from .settle import Children

        self.config = RunConfig(run_id, contract, **config)
        self.services = services if services is not None else RunServices()
        if self.services.executors is None:
            self.services.executors = Executors(contract, self.config.output_cap_bytes)
        self.sequence = Sequencer()
        self.ledger = CallLedger()
        self.children = Children()
        #: some tool of the contract may dispatch
        self.dispatching = any(t.dispatch for s in contract.subagents.values() for t in s.tools.values())
        self._redactors: dict[tuple[str, str], Redactor] = {}

    @property
    def run_id(self) -> str:
        return self.config.run_id

    @property
    def contract(self) -> Contract:
        return self.config.contract

    def redactor(self, tool: ToolSpec) -> Redactor:
        key = (tool.subagent, tool.id)
        r = self._redactors.get(key)
        if r is None:
            r = self._redactors[key] = Redactor(tool.redact)
        return r

    def emit_audit(self, event: str, **data: Any) -> None:
        audit = self.services.audit
        if audit is not None:
            audit({"event": event, "run_id": self.config.run_id, "at": rfc3339(time.time()),
                   "labels": self.config.labels, **self.services.secrets.deep(data)})
