"""The production router (SPEC 5.6): ``dispatch(tool, args)`` from inside a running callable."""

from __future__ import annotations

from typing import Any

from ..errors import DispatchError


def dispatch(tool: str, args: dict) -> Any:
    """Dispatch ``args`` to ``tool`` through the engine and return its result."""
    raise DispatchError(f"dispatch to '{tool}' refused: no running call declares it")
