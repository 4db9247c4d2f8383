"""The running call that may dispatch: what a child call needs to know about its
parent, and the context variable through which ``dispatch()`` finds it in every worker a callable
can run in (the trio task, a worker thread, the asyncio loop thread)."""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any

from ..errors import DispatchError

if TYPE_CHECKING:
    from ..contract.compiled import ToolSpec
    from .context import RunContext


class CallFrame:
    """The running call that may dispatch: what a child call needs to know about its parent."""

    __slots__ = ("ctx", "tool", "seq", "receipt_id", "item_key", "iteration", "token", "nursery", "secrets", "ended")

    def __init__(self, ctx: RunContext, tool: ToolSpec, seq: int, receipt_id: str, item_key: str | None,
                 iteration: int | None, token: Any):
        self.ctx = ctx
        self.tool = tool
        self.seq = seq
        self.receipt_id = receipt_id
        self.item_key = item_key
        self.iteration = iteration
        self.token = token  # the engine's trio loop
        self.nursery: Any = None  # open while an attempt of a thread or asyncio callable runs
        # values its children redact: hidden in this call's receipt too (a result may quote them)
        self.secrets: list[str] = []
        self.ended = False  # the call has its receipt: it can dispatch no more

    def target(self, name: str) -> ToolSpec:
        """The tool ``name`` if this call may dispatch to it; else DispatchError (nothing runs)."""
        if not isinstance(name, str) or name not in self.tool.dispatch:
            allowed = ", ".join(self.tool.dispatch)
            raise DispatchError(
                f"dispatch to '{name}' refused: tool '{self.tool.id}' may dispatch only to [{allowed}]"
            )
        sub = self.ctx.contract.subagents[self.tool.subagent]
        return sub.tools[name]


CURRENT: contextvars.ContextVar[CallFrame | None] = contextvars.ContextVar("toolloop_call", default=None)
