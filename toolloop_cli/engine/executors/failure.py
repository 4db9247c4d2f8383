"""What App code raised, as an ordinary exception: every executor turns whatever a callable raises
(``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``, any ``BaseException``) into a
``ToolRaised`` that carries the original kind and message, so no App exception stops the run, a
loop or a worker. Only trio's own cancellation and the engine's own signals (``engine_signal``)
go through untouched."""

from __future__ import annotations

from ..procpool import WorkerFailure


class ToolRaised(WorkerFailure):
    """The callable raised: ``kind`` is its exception's type name, the message its text (the
    engine redacts it before it is written anywhere)."""

    @classmethod
    def of(cls, exc: BaseException) -> ToolRaised:
        kind = type(exc).__name__
        try:
            message = str(exc)
        except BaseException:  # noqa: BLE001 - an App's __str__ may raise anything
            message = ""
        return cls(kind, message or kind)


def engine_signal(exc: BaseException) -> bool:
    """A BaseException of toolloop's own on its way through App code (a child run that paused,
    raised in a router's ``dispatch``): the engine's control flow, never the App's failure."""
    return not isinstance(exc, Exception) and type(exc).__module__.split(".")[0] == "toolloop_cli"
