"""The MCP server's run: one run per server process (mode ``mcp``), each ``tools/call`` a governed
call settled as a receipt of that run.

A call goes through what a plan's call goes through: its arguments against the tool's input
schema (a failure is an ``invalid_input`` receipt and nothing runs), the server's ``--max-calls``
and the tool's own ``max_calls``, the approval gate, then the engine's call path (source limits,
timeout, retries, cache, output schema, redaction). Its ``seq`` and ``call_key`` are its order of
arrival in the run (``"0"``, ``"1"``, ...).

A gated call that waits for a person gets no receipt: its request is filed under the key it took,
the client is told how to answer it, and the key is kept for the tool and those exact arguments,
so the next identical call asks under the same key and runs once the answer is there (or gets a
``denied`` receipt carrying the approver's message). Such a call counts against ``--max-calls``
only when it runs.

A signal (or the client going away) stops the server: calls in flight are cancelled and settled
(``cancelled``, or ``interrupted`` for an at-most-once write), and the run ends with its summary,
``ok`` when every call was ``ok``, else ``failed``.
"""

from __future__ import annotations

import shlex
from typing import Any, Awaitable, Callable

import trio

from .._canonical import sha256_of
from .._json import dumps_text
from ..engine.call import execute_call, not_run_receipt
from ..engine.gates import Go, Refuse, Wait, check_call, input_problem, max_calls_made
from ..engine.run import journal_plan
from ..engine.session import RunnerEnd
from .listing import error_result, listed_tools, receipt_result

#: seqs of calls dispatched by a served call start here, far from the served calls' own
DISPATCHED_SEQ_BASE = 1 << 40
#: why a request still waiting when the server stopped is gone
EXPIRED = "the MCP server stopped before anyone answered; a client's new call of the tool asks again"

Transport = Callable[[Any, trio.Event], Awaitable[None]]


class _StopOnSignal:
    """Stands among the run's cancel scopes: a signal (``RunState.interrupt``) stops the server."""

    def __init__(self, stop: trio.Event):
        self._stop = stop

    def cancel(self) -> None:
        self._stop.set()


class McpServerRunner:
    """The runner of a server's run. ``transport(server, stop)`` serves the MCP ``server`` until
    its client goes away or ``stop`` is set."""

    def __init__(self, plan: Any, transport: Transport, *, max_calls: int | None = None,
                 approve_hint: str = "toolloop approve"):
        self.plan = plan
        self.transport = transport
        self.max_calls = max_calls
        self.approve_hint = approve_hint  # the command a person types, with --state-dir when given
        self.next_seq = 0
        self.ran = 0  # calls that ran (what --max-calls counts)
        self.in_flight = 0
        self.stopping = False
        self._waiting: dict[tuple[str, str], int] = {}  # (tool, args sha) -> seq of its pending request
        self._journaled: set[int] = set()
        self._idle: trio.Event | None = None
        self._store: Any = None
        self.run: Any = None

    @property
    def tools(self) -> list[str]:
        """The ids of the tools the server offers."""
        return [t for t in self.plan.subagent.allowed_tools if t in self.plan.subagent.tools]

    # -- the run ---------------------------------------------------------------------------------

    def begin(self, session: Any) -> None:
        journal_plan(session, self.plan)
        self._store = session.store

    async def __call__(self, run: Any) -> RunnerEnd:
        self.run = run
        run.ctx.sequence.child_seq_base = DISPATCHED_SEQ_BASE
        stop = trio.Event()
        run.state.in_flight.add(_StopOnSignal(stop))
        if run.interrupted:  # a signal before the server started: it serves nothing
            stop.set()
        server = self.server()
        async with trio.open_nursery() as nursery:

            async def serving() -> None:
                await self.transport(server, stop)
                stop.set()

            if not stop.is_set():
                nursery.start_soon(serving)
            await stop.wait()
            self.stopping = True
            await self._settled()
            nursery.cancel_scope.cancel()
        self._expire_requests()
        run.set_total_calls(self.next_seq)
        counts = run.state.counts
        failed = any(n for status, n in counts.items() if status != "ok")
        return RunnerEnd(status="failed" if failed else "ok")

    def _expire_requests(self) -> None:
        """Requests still waiting when the server stops can never be acted on (a server's run is
        never resumed, and the client that asked is gone): they expire, so ``approvals list`` and
        the inbox no longer show them and an answer is told they are gone."""
        self._store.answer_all_pending(self.run.run_id, "expired", message=EXPIRED, approver="engine")
        self._waiting.clear()

    async def _settled(self) -> None:
        """Wait until every call in flight (each cancelled by the signal) has its receipt."""
        while self.in_flight:
            self._idle = trio.Event()
            await self._idle.wait()

    def server(self) -> Any:
        from mcp.server.lowlevel import Server

        return Server("toolloop", version=_version(), on_list_tools=self._list_tools, on_call_tool=self._call_tool)

    # -- the protocol's handlers ---------------------------------------------------------------------

    async def _list_tools(self, _ctx: Any, _params: Any) -> Any:
        import mcp_types as types

        return types.ListToolsResult(tools=listed_tools(self.plan.subagent))

    async def _call_tool(self, _ctx: Any, params: Any) -> Any:
        sub = self.plan.subagent
        name = params.name
        tool = sub.tools.get(name) if name in sub.allowed_tools else None
        if tool is None:
            return error_result(f"unknown tool {name!r}: this server offers {', '.join(sub.allowed_tools)}")
        if self.stopping:
            return error_result("the server is stopping; the call did not run")
        args = params.arguments if params.arguments is not None else {}
        self.in_flight += 1
        try:
            return await self._governed(tool, args)
        finally:
            self.in_flight -= 1
            if not self.in_flight and self._idle is not None:
                self._idle.set()

    # -- one governed call -------------------------------------------------------------------------

    async def _governed(self, tool: Any, args: Any) -> Any:
        run = self.run
        ctx = run.ctx
        if not isinstance(args, dict):
            return error_result("invalid_input: the arguments must be a JSON object")
        sha = sha256_of(args)
        seq = self._waiting.pop((tool.id, sha), None)
        if seq is None:
            seq = self.next_seq
            self.next_seq += 1
            run.set_total_calls(self.next_seq)  # runs list counts the calls while the server runs
        key = str(seq)
        problem = input_problem(tool, args)
        if problem is not None:
            return self._not_run(tool, args, seq, "invalid_input",
                                 f"the arguments fail the input schema of '{tool.id}': {problem}")
        spent = self._spent(tool)  # before the gate: a spent budget files no request for a person
        if spent is not None:
            return self._not_run(tool, args, seq, "budget_exceeded", spent)
        if tool.approval is not None and ctx.config.approve == "ask":
            self._journal_call(tool, args, seq, sha)  # approvals list shows the request's tool and arguments
        verdict = await check_call(ctx, tool, args, source="admitted", item_key=None, call_key=key, args_sha256=sha)
        if isinstance(verdict, Wait):
            self._waiting[(tool.id, sha)] = seq
            return error_result(self._approval_text(tool, key))
        if isinstance(verdict, Refuse):
            return self._not_run(tool, verdict.args, seq, verdict.status, verdict.message, verdict.approval)
        assert isinstance(verdict, Go)
        # again after the gate, which may have let other calls start meanwhile: from this check to
        # the call's count (``execute_call`` counts a call before its first checkpoint) nothing else
        # runs, so calls that arrive together never start past either budget
        spent = self._spent(tool)
        if spent is not None:
            return self._not_run(tool, verdict.args, seq, "budget_exceeded", spent, verdict.approval)
        self.ran += 1
        receipt = await self._run(tool, verdict.args, seq, key, sha if verdict.args is args else None,
                                  verdict.approval)
        return receipt_result(receipt)

    async def _run(self, tool: Any, args: Any, seq: int, key: str, sha: str | None, approval: Any) -> Any:
        run = self.run
        receipt = None
        try:
            with trio.CancelScope() as scope, run.cancelled_by_signals(scope):
                receipt, _value, _envelope = await execute_call(run.ctx, tool, args, seq=seq, item_key=None,
                                                                call_key=key, args_sha256=sha, approval=approval)
        finally:
            if receipt is None:  # cut short: a signal stops the server, or the client cancelled or went away
                why = ("interrupted by a signal: the server stopped" if run.interrupted
                       else "cancelled by the client (it cancelled the request or went away)")
                receipt = not_run_receipt(run.ctx, tool, args, seq=seq, item_key=None, call_key=key,
                                          status="interrupted" if tool.at_most_once else "cancelled", message=why,
                                          args_sha256=sha, approval=approval)
            run.settle(receipt)
        return receipt

    def _spent(self, tool: Any) -> str | None:
        """Why the call may not start: the server's ``--max-calls`` or the tool's ``max_calls`` is spent."""
        if self.max_calls is not None and self.ran >= self.max_calls:
            return f"call budget spent (--max-calls {self.max_calls})"
        if max_calls_made(self.run.ctx, tool):
            return f"tool '{tool.id}' has made its max_calls ({tool.max_calls}) in this server's run"
        return None

    def _not_run(self, tool: Any, args: Any, seq: int, status: str, message: str, approval: Any = None) -> Any:
        receipt = not_run_receipt(self.run.ctx, tool, args, seq=seq, item_key=None, call_key=str(seq), status=status,
                                  message=message, approval=approval)
        self.run.settle(receipt)
        return receipt_result(receipt)

    def _journal_call(self, tool: Any, args: Any, seq: int, sha: str) -> None:
        """The call of a request a person answers, as ``approvals list`` and the inbox show it:
        its tool and its arguments as redacted everywhere (a server's run is never resumed, so
        its calls are never rebuilt from these)."""
        if seq in self._journaled:
            return
        self._journaled.add(seq)
        shown = dumps_text(self.run.ctx.redactor(tool).apply(args))
        self._store.journal_calls(self.run.run_id, (), [(seq, 0, None, str(seq), tool.id, shown, sha)])

    def _approval_text(self, tool: Any, key: str) -> str:
        line = f"{self.approve_hint} {self.run.run_id} {shlex.quote(key)} --approve"
        return (f"approval required: tool '{tool.id}' needs approval ({tool.approval_text}) and did not run. "
                f"A person answers with: {line}  (or --reject --message TEXT), or in the web inbox "
                f"(toolloop serve); then call it again with the same arguments and it runs once.")


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("toolloop-cli")
    except Exception:  # noqa: BLE001 - a version is only shown to clients
        return ""
