"""What a tool's isolation means for a plan that uses it and for the receipts of its calls. Every
admission and every call asks, and few tools have a sandbox: the sandbox module (its compiled
type, the bwrap probe) is imported only for a tool that has one."""

from __future__ import annotations

from typing import Any


def isolation_of(tool: Any) -> dict | None:
    """A receipt's ``isolation``: None for a tool that did not ask for a sandbox, else what its
    calls get on this machine (the same answer the executor acts on)."""
    sandbox = getattr(tool, "sandbox", None)
    if sandbox is None:
        return None
    from .sandbox import availability

    _bwrap, why = availability()
    return sandbox.applied() if why is None else {"kind": "none", "reason": why}


def refusal(tool: Any, placement: str = "local") -> tuple[str, str] | None:
    """Why a plan may not use ``tool`` (message, hint), or None: its sandbox cannot be made here
    and is required, or the calls would go to Ray, which has no sandbox to give."""
    sandbox = getattr(tool, "sandbox", None)
    if sandbox is None:
        return None
    from .._text import quoted
    from .sandbox import HOW_TO_FIX, availability

    if placement == "ray":
        return (f"tool {quoted(tool.id)} runs in a sandbox (isolation: sandbox), which --executor ray cannot give:"
                " its calls would run on Ray workers unconfined",
                "run the plan with --executor local, or remove isolation: sandbox from the tool")
    _bwrap, why = availability()
    if why is None or not sandbox.required:
        return None
    return f"tool {quoted(tool.id)} needs a sandbox (isolation: sandbox), and none can be made on this machine: {why}", HOW_TO_FIX
