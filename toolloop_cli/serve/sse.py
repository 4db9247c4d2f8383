"""A run's records as Server-Sent Events: the records already committed (in printed order), then
each new one as it is committed (the journal is polled; another process writes it), the summary
last, and then the stream ends. A run whose process is gone without a summary ends the stream
too. Each event is ``event: TYPE`` and ``data: RECORD`` (one line of JSON)."""

from __future__ import annotations

from typing import AsyncIterator

from .._canonical import sha256_of
from .._json import dumps
from ..errors import StateError
from .journal import Journal, Refused

#: how often the journal is looked at while a run goes on
POLL_S = 0.2
#: a full look even when nothing was committed (a run whose process died commits nothing more)
FULL_LOOK_EVERY = 10
#: a comment line now and then, so that a reader that went away is noticed
HEARTBEAT_S = 15.0


def event(record: dict) -> bytes:
    return b"event: " + str(record.get("type", "record")).encode() + b"\ndata: " + dumps(record) + b"\n\n"


def _key(record: dict) -> tuple:
    if record.get("type") == "receipt" and record.get("receipt_id"):
        return ("receipt", record["receipt_id"])
    return ("other", sha256_of(record))


async def follow(journal: Journal, run_id: str, first: tuple[int, list[dict], dict | None, bool]) -> AsyncIterator[bytes]:
    """The events of run ``run_id``; ``first`` is ``(journal.changes(), *journal.view(...)[1:])``
    taken before the response started (so an unknown run is a 404, not an empty stream)."""
    import anyio

    version, records, summary, live = first
    seen: set[tuple] = set()
    for rec in records:
        seen.add(_key(rec))
        yield event(rec)
    if summary is not None:
        yield event(summary)
        return
    if not live:
        return
    polls = 0
    quiet_s = 0.0
    while True:
        await anyio.sleep(POLL_S)
        polls += 1
        quiet_s += POLL_S
        now = await anyio.to_thread.run_sync(journal.changes)
        if now == version and polls % FULL_LOOK_EVERY:
            if quiet_s >= HEARTBEAT_S:
                quiet_s = 0.0
                yield b": still following\n\n"
            continue
        version = now
        try:
            _run, records, summary, live = await anyio.to_thread.run_sync(journal.view, run_id)
        except (Refused, StateError):  # the run was pruned meanwhile, or the journal is damaged
            return
        for rec in records:
            key = _key(rec)
            if key not in seen:
                seen.add(key)
                quiet_s = 0.0
                yield event(rec)
        if summary is not None:
            yield event(summary)
            return
        if not live:
            return
