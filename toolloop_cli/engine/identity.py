"""The running call's identity, for the callable itself: ``toolloop_cli.current_call()``.

Light on purpose (the standard library only): App modules import it at their top, also in worker
processes. The engine sets it for each attempt of a call; worker threads, the asyncio loop and
dispatched calls see it through context variables, and a worker process gets it with the request.
"""

from __future__ import annotations

import contextvars
import hashlib
from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True, slots=True)
class CallIdentity:
    """Who a running call is: out of band, never in its arguments.

    ``idempotency_key`` is derived from the run id and the call's ``seq``: the same on every attempt
    and after any resume, so a write tool that passes it to its backend cannot apply a write twice,
    even when ``resume --retry-interrupted`` runs a write that may already have happened.
    """

    run_id: str
    seq: int
    item_key: str | None
    call_key: str | None
    attempt: int
    labels: Mapping[str, str] = field(default_factory=dict)
    idempotency_key: str = ""
    receipt_id: str | None = None  # the id the call's receipt will carry


#: the running call's identity, or the fields it is made of (``set_pending``): the engine sets it for
#: every attempt of every call, and few callables ask for it, so the key's hash and the object are
#: made only when asked for (``current_identity``)
_CURRENT: contextvars.ContextVar[CallIdentity | tuple | None] = contextvars.ContextVar(
    "toolloop_call_identity", default=None)


def idempotency_key(run_id: str, seq: int) -> str:
    return "tl-" + hashlib.sha256(f"{run_id}/{seq}".encode()).hexdigest()[:32]


def current_identity() -> CallIdentity | None:
    """The identity of the call running this code, None outside a call."""
    ident = _CURRENT.get()
    if type(ident) is tuple:
        run_id, seq, item_key, call_key, attempt, labels, receipt_id = ident
        return CallIdentity(run_id, seq, item_key, call_key, attempt, labels, idempotency_key(run_id, seq), receipt_id)
    return ident  # type: ignore[return-value]


def current_call() -> CallIdentity:
    """The identity of the call running this code; ``LookupError`` outside a call."""
    ident = current_identity()
    if ident is None:
        raise LookupError("current_call() works inside a callable that toolloop is running")
    return ident


def set_current(ident: CallIdentity | None) -> contextvars.Token:
    return _CURRENT.set(ident)


def set_pending(run_id: str, seq: int, item_key: str | None, call_key: str | None, attempt: int,
                labels: Mapping[str, str], receipt_id: str | None) -> contextvars.Token:
    """``set_current`` of the identity these fields make, made only if the callable asks for it."""
    return _CURRENT.set((run_id, seq, item_key, call_key, attempt, labels, receipt_id))


def reset_current(token: contextvars.Token) -> None:
    _CURRENT.reset(token)

