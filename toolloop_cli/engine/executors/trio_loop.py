"""Async callables written for trio run on the engine's own event loop and are cancelled at
their deadline. Whatever they raise becomes ``ToolRaised``, except trio's cancellation, a
Ctrl-C that trio itself delivers (a signal to the program, not the tool's failure) and the
engine's own signals."""

from __future__ import annotations

import os
from typing import Any

import trio

from ...contract.compiled import ToolSpec
from . import Executor
from .failure import ToolRaised, engine_signal

_TRIO_DIR = os.path.dirname(trio.__file__) + os.sep


def _not_the_tools(exc: BaseException) -> bool:
    """Trio's cancellation (alone or in a group), a KeyboardInterrupt raised by trio's own SIGINT
    handling (its innermost frame is trio's), or the engine's own signal: these go on untouched."""
    if engine_signal(exc):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[0] is not None
    if isinstance(exc, KeyboardInterrupt):
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        return tb is not None and tb.tb_frame.f_code.co_filename.startswith(_TRIO_DIR)
    return False


class TrioExecutor(Executor):
    """``await fn(**args)`` in the calling task."""

    name = "trio"
    in_calling_task = True

    async def run(self, tool: ToolSpec, args: dict[str, Any], prepared: Any, slot: Any) -> Any:
        failure: ToolRaised | None = None
        try:
            return await tool.fn(**args)  # type: ignore[misc]
        except trio.Cancelled:
            raise
        except BaseException as exc:  # noqa: BLE001 - App code may raise anything
            if _not_the_tools(exc):
                raise
            failure = ToolRaised.of(exc)
        raise failure  # outside the handler: the App's exception and its frames are not kept


def make(run: object) -> TrioExecutor:
    return TrioExecutor()
