"""Run-time gates: the one check every call passes right before it starts, whatever path it
comes from (a lane, ``dispatch()``, the routed loop, a child plan).

``check_call`` answers:

- ``Go(args)``: run the call with these arguments (an approver may have edited them);
- ``Refuse(status, message, args)``: the call does not run; its receipt says why;
- ``WAIT``: a person must answer an approval request first (the run pauses; resume asks again).

In order: the input schema (for arguments not checked at admission: projected from a lane payload,
dispatched, or edited by an approver), the tool's ``max_calls`` and the run's tool-call budget for
dispatched calls, a write after untrusted content in a routed run (``taint.py``: refused, or gated
as if its tool said ``approval: required``), then the approval gate (``--approve all | none |
ask``: a journaled answer, or a person at a terminal through the ``ask`` service). Approval fails
closed.

A call a model proposes is checked before it reaches the gate (``proposal_problem``: its schema,
whether it already ran, the tool-call budget, ``max_calls``); what fails there is not a receipt
but a rejection the model is shown, so the gate does not check it again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._canonical import sha256_of
from ..contract.schemas import schema_errors
from ..receipts import rfc3339
from .._login import login_name

if TYPE_CHECKING:
    from ..contract.compiled import ToolSpec
    from .context import RunContext


@dataclass(frozen=True, slots=True)
class Go:
    args: Any
    approval: dict[str, Any] | None = None  # a gated call's answer, for its receipt


@dataclass(frozen=True, slots=True)
class Refuse:
    status: str
    message: str
    args: Any  # the arguments the receipt shows
    approval: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Wait:
    pass


WAIT = Wait()

#: where a call's arguments came from, and how a schema failure reads for each (None: checked at admission)
SOURCES = {
    "admitted": None,
    "payload": "arguments from the lane payload fail input_schema",
    "dispatch": "dispatched arguments fail input_schema",
    "model": None,  # checked when proposed (``proposal_problem``)
}
#: calls that admission did not count against their tool's max_calls, and that were not checked
#: when proposed
_COUNTED_HERE = frozenset({"dispatch"})


def input_problem(tool: ToolSpec, args: Any, *, skip_marked: bool = False) -> str | None:
    """Why ``args`` fail the tool's input schema, or None when they pass (or there is none).
    ``skip_marked``: a failure at a value that is the redaction marker does not count (it stands
    for a value the journal withheld)."""
    if tool.input_validator is None or tool.input_validator.is_valid(args):
        return None
    if skip_marked:
        from .redact import REDACTED

        errors = [e for e in tool.input_validator.iter_errors(args) if e.instance != REDACTED]
        if not errors:
            return None
    return "; ".join(schema_errors(tool.input_validator, args, limit=3))


def max_calls_made(ctx: RunContext, tool: ToolSpec) -> bool:
    """Whether the tool has made its ``max_calls`` in this run."""
    return tool.max_calls is not None and ctx.ledger.made(tool.id) >= tool.max_calls


def proposal_problem(ctx: RunContext, tool: ToolSpec, args: Any, *, ran_before: bool,
                     withheld: bool = False) -> tuple[str, str] | None:
    """Why a call a model proposed is rejected before the gate, as ``(kind, message for the
    model)``, or None. ``ran_before``: the same tool already ran with these exact arguments in this
    run; ``withheld``: the markers standing for redacted values the journal withheld are not
    checked against the input schema. The run's tool-call budget is its budget ledger's."""
    problem = input_problem(tool, args, skip_marked=withheld)
    if problem is not None:
        return "invalid_args", f"the arguments fail the input schema of '{tool.id}': {problem}"
    if ran_before:
        return "duplicate", f"'{tool.id}' already ran with these exact arguments in this run"
    budget = ctx.services.budget
    if budget is not None and budget.tool_calls_left() <= 0:
        return "over_budget", f"the run's tool-call budget ({budget.budget.max_tool_calls}) is used up"
    if max_calls_made(ctx, tool):
        return "over_budget", f"'{tool.id}' has made its max_calls ({tool.max_calls}) in this run"
    return None


def check_lane_call(tool: ToolSpec, args: Any, *, source: str) -> Go | Refuse | None:
    """``check_call``'s answer for a call of a lane (``source`` "admitted" or "payload") when no
    one needs to answer it, without a coroutine; None when its tool's approval gate covers it (then
    ``check_call`` answers). A lane's calls are counted at admission and never tainted."""
    lead = SOURCES[source]
    if lead is not None:
        problem = input_problem(tool, args)
        if problem is not None:
            return Refuse("invalid_input", f"{lead}: {problem}", args)
    if tool.approval is None or not tool.approval.matches(args, tool.effect):
        return Go(args)
    return None


async def check_call(ctx: RunContext, tool: ToolSpec, args: Any, *, source: str, item_key: str | None,
                     call_key: str | None, args_sha256: str | None = None) -> Go | Refuse | Wait:
    """The gates of one call, right before it starts (see the module's docstring).

    ``source`` is a key of ``SOURCES``. A dispatched call cannot wait for a person: a gated one is
    refused. ``args_sha256`` is the admitted arguments' hash, when known.
    """
    lead = SOURCES[source]
    if lead is not None:
        problem = input_problem(tool, args)
        if problem is not None:
            return Refuse("invalid_input", f"{lead}: {problem}", args)
    if source in _COUNTED_HERE and max_calls_made(ctx, tool):
        return Refuse("budget_exceeded", f"tool '{tool.id}' has made its max_calls ({tool.max_calls}) in this run",
                      args)
    budget = ctx.services.budget
    if source == "dispatch" and budget is not None and not budget.take_tool_call():
        return Refuse("budget_exceeded", "the run's tool-call budget (max_tool_calls) is used up", args)
    taint = _taint_gate(ctx, tool, args, source)
    if isinstance(taint, Refuse):
        return taint
    if taint is None and (tool.approval is None or not tool.approval.matches(args, tool.effect)):
        return Go(args)
    return await _approval_gate(ctx, tool, args, source, item_key, call_key, args_sha256, taint)


async def _approval_gate(ctx: RunContext, tool: ToolSpec, args: Any, source: str, item_key: str | None,
                         call_key: str | None, args_sha256: str | None, taint: str | None) -> Go | Refuse | Wait:
    """A gated call: its tool's own gate, or a taint's (``taint``: what the person is shown)."""
    gate = taint if taint is not None else tool.approval_text
    if source == "dispatch":
        return Refuse("denied", f"tool '{tool.id}' needs approval here ({gate}); "
                                "a dispatched call cannot wait for it", args, _answered("rejected", "engine", args))
    if ctx.config.approve == "all":
        return Go(args, _answered("approved", "flag", args))
    verdict, value, by = await _answer(ctx, tool, args, item_key, call_key, args_sha256, taint)
    if verdict == "wait":
        return WAIT
    if verdict == "reject":
        return Refuse("denied", f"tool '{tool.id}' needs approval ({gate}): {value}", args,
                      _answered("rejected", by, args))
    if verdict == "lost":  # an edit typed a new secret that only the approver's process ever held
        return Refuse("interrupted", value, args, _answered("edited", by, args))
    if value is not args:  # arguments edited by the approver: checked again
        problem = input_problem(tool, value)
        if problem is not None:
            return Refuse("invalid_input", f"approved arguments fail input_schema: {problem}", value,
                          _answered("edited", by, value))
        if sha256_of(value) != (args_sha256 or sha256_of(args)):
            return Go(value, _answered("edited", by, value))
    return Go(value, _answered("approved", by, value))


def _taint_gate(ctx: RunContext, tool: ToolSpec, args: Any, source: str) -> str | Refuse | None:
    """A write or destructive call after the run was shown untrusted content (``taint.py``), by the
    plan's ``taint.on_write``: ``deny`` refuses it (naming the untrusted tool and turn), ``approve``
    gates it as if its tool said ``approval: required`` (the gate reads "after untrusted content
    from TOOL at turn N"), ``allow`` leaves it to its own gate. None when the run is not tainted."""
    taint = ctx.services.taint
    if taint is None or source not in ("model", "dispatch") or taint.of(tool) is None:
        return None
    if taint.on_write == "deny":
        return Refuse("denied", str(taint.denied(tool)), args)
    return str(taint.why()) if taint.on_write == "approve" else None


def tell_waiting(ctx: RunContext, tool: ToolSpec, args: Any, item_key: str | None, call_key: str | None,
                 reason: str | None = None, taint: Any = None) -> None:
    """A call starts waiting for a person: the run's notifier (``notify``), if any, says so, with
    the arguments redacted as everywhere else and what gated it (``reason``: default, the tool's gate)."""
    notifier = ctx.services.notify
    if notifier is not None:
        shown = ctx.services.secrets.deep(ctx.redactor(tool).apply(args))
        notifier.approval_request(run_id=ctx.run_id, tool=tool.id, call_key=call_key, item_key=item_key, args=shown,
                                  reason=reason if reason is not None else tool.approval_text, taint=taint)


def _answered(decision: str, by: str, args: Any) -> dict[str, Any]:
    """A gated call's ``approval`` as its receipt shows it (decision, by, at, args_sha256)."""
    return {"decision": decision, "by": by, "at": rfc3339(time.time()), "args_sha256": sha256_of(args)}


async def _answer(ctx: RunContext, tool: ToolSpec, args: Any, item_key: str | None, call_key: str | None,
                  args_sha256: str | None, taint: str | None = None) -> tuple[str, Any, str]:
    """A gated call's answer, failing closed: ("run", args, by), ("reject", why, by) or ("wait", None, "")."""
    if ctx.config.approve == "none":
        return "reject", "rejected by --approve none", "flag"
    approvals = ctx.services.approvals
    if approvals is None:
        return "reject", "no person can answer here (run with --approve all or --approve none)", "engine"
    sha = args_sha256 or sha256_of(args)
    verdict, value, by = approvals.decide(item_key, call_key, args, sha, ctx.redactor(tool))
    if verdict == "wait" and getattr(approvals, "asked", False):
        # a taint gate tells what tainted the run, as the terminal prompt and the inbox do
        tell_waiting(ctx, tool, args, item_key, call_key, reason=taint,
                     taint=ctx.services.taint.source if taint is not None else None)
    ask = ctx.services.ask
    if verdict == "wait" and ask is not None:  # a person at a terminal answers now
        # a taint gate tells the person what tainted the run
        verdict, value = await (ask(tool, item_key, call_key, args) if taint is None
                                else ask(tool, item_key, call_key, args, reason=taint))
        by = login_name()
        approvals.record(item_key, call_key, sha, verdict, value, by)
    return verdict, value, by or "unknown"

