"""Declarations, their loading and checks, and their compilation into a frozen ``Contract``."""

from __future__ import annotations

import os

#: the state folder of the command this process runs (its ``--state-dir``), where ``mcp_tokens``
#: keeps MCP servers' client-credential tokens; held here so a run sets it without loading MCP
_state_folder: str | None = None


def use_state_folder(folder: str | os.PathLike[str] | None) -> None:
    """The state folder whose token file later requests use (a command's ``--state-dir``); None:
    ``TOOLLOOP_STATE_DIR``, else ``./.toolloop``."""
    global _state_folder
    _state_folder = os.fspath(folder) if folder else None


def state_folder() -> str | None:
    return _state_folder
