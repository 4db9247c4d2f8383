"""Single flight for cacheable calls: identical calls in flight at the same time in one run
execute once; the others wait for it and read its result from the cache.

The first call with a cache key becomes the leader and executes; a call arriving while the
leader runs waits for it, then reads the cache. If the leader stored nothing (it failed, or its
result was not schema-valid), the next waiter leads and executes in turn. The table of flights
lives in a trio ``RunVar``, so it belongs to one event loop (one run) and needs no cleanup.
"""

from __future__ import annotations

from typing import Any

import trio

_FLIGHTS: trio.lowlevel.RunVar = trio.lowlevel.RunVar("toolloop_cache_flights")


class _Slot:
    """What waiters hold: the leader's end, and whether it stored a result."""

    __slots__ = ("done", "stored")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.stored = False


def _settle(table: dict, rewritten: set, key: str, slot: _Slot, stored: bool) -> None:
    if slot.done.is_set():
        return
    slot.stored = stored
    if stored:
        rewritten.add(key)
    if table.get(key) is slot:
        del table[key]
    slot.done.set()


class Flight:
    """A leader's claim on a cache key: ``release(stored=...)`` when the call is over.

    Only the leader holds its Flight; if the leader is cancelled before it releases, the Flight
    is dropped with its frame and releases itself, so waiters never hang on it.
    """

    __slots__ = ("_args", "_token")

    def __init__(self, table: dict, rewritten: set, key: str, slot: _Slot):
        self._args = (table, rewritten, key, slot)
        self._token = trio.lowlevel.current_trio_token()

    def release(self, stored: bool = False) -> None:
        _settle(*self._args, stored)

    def __del__(self) -> None:
        # may run on any thread (garbage collection): hand the release to the event loop
        try:
            self._token.run_sync_soon(_settle, *self._args, False)
        except Exception:  # noqa: BLE001 - the run is over: nobody is waiting any more
            pass


def _state() -> tuple[dict, set]:
    try:
        return _FLIGHTS.get()
    except LookupError:
        state: tuple[dict, set] = ({}, set())
        _FLIGHTS.set(state)
        return state


async def cached_or_lead(cache: Any, key: str, *, refresh: bool = False) -> tuple[tuple[Any] | None, Flight | None]:
    """``(hit, None)`` when the cache answers — now, or once an identical call in flight has
    stored its result; ``(None, flight)`` when this call must execute (and release ``flight``).

    With ``refresh`` an entry is read only once a call of this run has rewritten it.
    """
    table, rewritten = _state()
    while True:
        slot: _Slot | None = table.get(key)
        if slot is None:
            if not refresh or key in rewritten:
                hit = cache.get(key)
                if hit is not None:
                    return hit, None
            slot = table[key] = _Slot()
            return None, Flight(table, rewritten, key, slot)
        await slot.done.wait()
        if slot.stored or not refresh:
            hit = cache.get(key)
            if hit is not None:
                return hit, None
