"""The frozen, compiled contract: what the engine runs against."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .envelope import Envelope


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 1
    backoff_s: float = 0.0
    max_backoff_s: float | None = None
    on: frozenset[str] = frozenset()

    def delay(self, attempt: int, rand: float) -> float:
        """Backoff before try ``attempt + 1`` (attempt counts from 1): exponential, full jitter, capped."""
        base = self.backoff_s * (2 ** (attempt - 1))
        if self.max_backoff_s is not None:
            base = min(base, self.max_backoff_s)
        return base * (0.5 + rand / 2)


NO_RETRY = RetryPolicy()


def timeout_of(own: float | None, *fallbacks: float | None) -> float | None:
    """A call's timeout: its tool's own ``timeout_s``, else the first of ``fallbacks`` that is set
    (its subagent's ``runner_defaults.tool_timeout_s``, then the run's ``--default-timeout``); None
    when none is. The one statement of that order: compilation, the call and the dry run read it."""
    for seconds in (own, *fallbacks):
        if seconds is not None:
            return seconds
    return None


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One registered tool, compiled."""

    subagent: str
    id: str
    kind: str  # callable | mcp | plan
    ref: str  # module:attr, the MCP tool name, or a child plan's absolute path
    fn: Callable[..., Any] | None
    is_async: bool
    description: str
    input_schema: Any
    output_schema: Any
    input_validator: Any
    output_validator: Any
    cacheable: bool
    timeout_s: float | None
    retry: RetryPolicy
    isolation: str
    max_in_flight: int | None
    per_second: float | None
    max_calls: int | None
    effect: str
    idempotent: bool
    redact: tuple[str, ...]
    approval: Any  # compiled approval gate or None
    approval_text: str | None
    dispatch: tuple[str, ...]
    envelope: Envelope | None
    contract_sha256: str
    mcp: Any = None  # McpDecl for MCP tools
    runtime: str = "trio"  # async callables: the event loop they need, trio | asyncio (set at compile)
    #: MCP tools: which of "description", "input", "output" come from the server's tools/list,
    #: and "effect", "idempotent" from a trusted server's annotations (filled in at admission, see
    #: contract/mcp.py) rather than from the registry
    from_server: frozenset[str] = frozenset()
    source: tuple[str, int, int] = ("", 1, 1)  # where the tool is declared: file, line, column
    sandbox: Any = None  # contract.sandbox.Sandbox for isolation: sandbox, else None
    #: "untrusted" when the tool's results are written by someone outside (``output_trust``)
    output_trust: str = "trusted"
    #: MCP tools: what the server offered for it at admission (``mcp.offer_record``), kept in the
    #: run's contract snapshot so a recorded test case can be admitted without the server
    offered: Any = None

    @property
    def at_most_once(self) -> bool:
        """A write that must not run twice: its start is committed before it runs, a timeout is
        never retried, and resume reports it ``interrupted`` rather than running it again. A plan
        tool is not one: its child run is journaled on its own and resumed where it stopped."""
        return self.effect in ("write", "destructive") and not self.idempotent and self.kind != "plan"


@dataclass(frozen=True, slots=True)
class SubagentSpec:
    id: str
    tools: Mapping[str, ToolSpec]
    allowed_tools: tuple[str, ...]
    max_calls: int | None
    tool_timeout_s: float | None
    max_depth: int = 2  # how deep child plans may nest below a top plan of this subagent


@dataclass(frozen=True, slots=True)
class Contract:
    """A registry compiled: resolved callables, validators, envelopes and hashes."""

    file: str
    app_root: str
    subagents: Mapping[str, SubagentSpec]
    contract_sha256: str
    evidence: Callable[..., Any] | None = None
    decl: Any = field(default=None, compare=False)

    def tool_hashes(self) -> dict[str, str]:
        return {
            f"{s.id}/{t.id}": t.contract_sha256
            for s in self.subagents.values()
            for t in s.tools.values()
        }
