"""Where a call runs: one small protocol, one module per place.

| executor | module | runs | at the timeout |
|---|---|---|---|
| ``trio`` | ``trio_loop.py`` | async callables written for trio, on the engine's loop | cancelled |
| ``asyncio`` | ``asyncio_loop.py`` | asyncio coroutines, on a shared asyncio loop thread | task cancelled |
| ``thread`` | ``thread.py`` | sync callables, in worker threads (the default) | abandoned |
| ``process`` | ``process.py`` | sync callables with ``isolation: process`` | worker killed |
| ``sandbox`` | ``sandbox.py`` | sync callables with ``isolation: sandbox``, in a bwrap sandbox | sandbox killed |
| ``mcp`` | ``mcp.py`` | tools of MCP servers, over one session per server | request cancelled |
| ``ray`` | ``ray.py`` | sync and asyncio callables as Ray tasks (``placement="ray"``) | task killed |

The choice is made once per tool (``Executors.for_tool``). What an executor needs for a run (MCP
sessions, the Ray connection; the process pool lives with the trio run) is opened by
``Executors.opened()`` and closed when the run ends; a run session connects to Ray before it
journals the run (``Executors.connected()``), so a cluster that cannot be reached leaves no run
behind. Every executor returns the callable's value or raises its failure; the deadline is the
caller's cancel scope (``engine/call.py``).
"""

from __future__ import annotations

import importlib
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Iterator

from ...contract.compiled import Contract, ToolSpec


class Executor:
    """What every executor is: two steps and the traits the call path acts on (the defaults
    here; an executor says which it differs in). Subclass it, or give the same attributes."""

    name: str = "executor"
    #: a call cancelled at its timeout is left running (its receipt says ``abandoned: true``)
    abandons: bool = False
    #: the callable gets a copy of its arguments of its own anyway (a worker process): the call
    #: path does not copy them first
    copies_arguments: bool = False
    #: the callable runs in the calling task (a trio callable): calls it dispatches run in that
    #: task too, so the call path opens no nursery for them
    in_calling_task: bool = False
    #: the executor takes the tool's ``max_in_flight`` slot with it (``thread.HeldSlot``) and
    #: gives it back when the callable really ends, so an abandoned call keeps it; otherwise the
    #: call path gives it back when the attempt ends
    holds_slot: bool = False
    #: the executor has a ``prepare`` step of its own; set for each subclass from whether it
    #: overrides ``prepare``, so the call path awaits no coroutine for the base one's nothing
    prepares: bool = False

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls.prepares = cls.prepare is not Executor.prepare

    async def prepare(self, tool: ToolSpec, args: dict[str, Any]) -> Any:
        """What the call needs before its deadline starts (a worker process, a task started on a
        cluster); may raise OSError."""
        return None

    async def run(self, tool: ToolSpec, args: dict[str, Any], prepared: Any, slot: Any) -> Any:
        """``fn(**args)`` where this executor runs it: its value, or its failure raised."""
        raise NotImplementedError


class WorkerLost(Exception):
    """The worker running a call went away before it replied (killed, out of memory, its node
    lost): whether the callable ran to its end is unknown. An at-most-once write becomes
    ``interrupted``; anything else is an ``error`` of this kind."""

    kind = "worker_lost"


PLACEMENTS = ("local", "ray")

#: executor kind -> the module (in this package) whose ``make(executors)`` gives a run's executor
#: of that kind, made on first use; ``plan`` executors are installed above this layer
EXECUTORS: dict[str, str] = {
    "trio": ".trio_loop",
    "asyncio": ".asyncio_loop",
    "thread": ".thread",
    "process": ".process",
    "sandbox": ".sandbox",
    "mcp": ".mcp",
    "ray": ".ray",
}


def kind_of(tool: ToolSpec, placement: str = "local") -> str:
    """The executor a tool's calls run on. With ``placement="ray"``, sync and asyncio callables
    go to the cluster; MCP tools, trio callables and tools that dispatch (they call back into
    the run) stay in this process, and so do child plans (``plan`` tools) and sandboxed tools
    (a Ray worker has no sandbox to give; admission refuses such plans)."""
    if placement == "ray" and tool.kind == "callable" and not tool.dispatch and tool.sandbox is None and (
            not tool.is_async or tool.runtime == "asyncio"):
        return "ray"
    if tool.kind in ("mcp", "plan"):
        return tool.kind
    if tool.is_async:
        return "asyncio" if tool.runtime == "asyncio" else "trio"
    return tool.isolation if tool.isolation in EXECUTORS else "thread"


class Executors:
    """The executors of one run, chosen once per tool, and what they need open while it runs."""

    def __init__(self, contract: Contract, output_cap_bytes: int, placement: str = "local",
                 ray_address: str | None = None):
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, not {placement!r}")
        self.contract = contract
        self.output_cap_bytes = output_cap_bytes
        self.placement = placement
        self._by_tool: dict[tuple[str, str], Executor] = {}
        self._shared: dict[str, Executor] = {}
        self._mcp: Any = None  # the run's MCP sessions, while opened
        self._uses_mcp = any(t.kind == "mcp" for s in contract.subagents.values() for t in s.tools.values())
        self._ray: Any = None  # the Ray connection (placement="ray"); ray is imported only then
        if placement == "ray":
            from .ray import RayConnection

            connection = RayConnection(contract.app_root, ray_address)  # without Ray: a usage error
            if any(kind_of(t, placement) == "ray" for s in contract.subagents.values() for t in s.tools.values()):
                self._ray = connection

    def install(self, kind: str, executor: Executor) -> None:
        """An executor made above this layer (child runs of ``plan`` tools: ``engine/child_plans.py``)."""
        self._shared[kind] = executor

    def for_tool(self, tool: ToolSpec) -> Executor:
        key = (tool.subagent, tool.id)
        ex = self._by_tool.get(key)
        if ex is None:
            ex = self._by_tool[key] = self._make(kind_of(tool, self.placement))
        return ex

    @property
    def app_root(self) -> str:
        return self.contract.app_root

    @property
    def mcp_sessions(self) -> Any:
        """The run's MCP sessions; RuntimeError outside ``opened()``."""
        if self._mcp is None:
            raise RuntimeError("MCP tools run inside an opened run (Executors.opened)")
        return self._mcp

    @property
    def ray_connection(self) -> Any:
        return self._ray

    def _make(self, kind: str) -> Executor:
        ex = self._shared.get(kind)
        if ex is not None:
            return ex
        module = EXECUTORS.get(kind)
        if module is None:
            raise RuntimeError(f"no executor of kind {kind!r} in this run (plan tools run inside a run that installed"
                               " its child plans: engine/child_plans.py)")
        made: Executor = importlib.import_module(module, __name__).make(self)
        self._shared[kind] = made
        return made

    @contextmanager
    def connected(self) -> Iterator[Executors]:
        """Connect to Ray (or start a local Ray) for the length of the block, when the run's calls
        go there; a no-op otherwise. Blocking: call it outside the event loop."""
        if self._ray is None:
            yield self
            return
        self._ray.open()
        try:
            yield self
        finally:
            self._ray.close()

    @asynccontextmanager
    async def opened(self) -> AsyncIterator[Executors]:
        """Open what the run's executors need (the Ray connection, unless ``connected()`` holds it
        already; MCP sessions, when the contract has MCP tools) and close it when the block ends.
        Opening again while open is a no-op."""
        async with AsyncExitStack() as stack:
            if self._ray is not None:
                await stack.enter_async_context(self._ray.opened())
            if self._mcp is None and self._uses_mcp:
                await stack.enter_async_context(self._mcp_opened())
            yield self

    @asynccontextmanager
    async def _mcp_opened(self) -> AsyncIterator[None]:
        from .mcp import open_mcp_sessions

        decls = [t.mcp for s in self.contract.subagents.values() for t in s.tools.values() if t.kind == "mcp"]
        async with open_mcp_sessions(decls) as sessions:  # the servers admission started, taken
            self._mcp = sessions
            try:
                yield
            finally:
                self._mcp = None
                made = self._shared.pop("mcp", None)
                self._by_tool = {k: v for k, v in self._by_tool.items() if v is not made}
