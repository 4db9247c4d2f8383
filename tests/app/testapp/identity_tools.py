"""Tools that report the identity toolloop gives the running call."""

from __future__ import annotations

import asyncio

import trio

from toolloop_cli import asyncio_tool, current_call

SEEN: list = []


def _shown() -> dict:
    c = current_call()
    return {"run_id": c.run_id, "seq": c.seq, "item_key": c.item_key, "call_key": c.call_key,
            "attempt": c.attempt, "labels": dict(c.labels), "idempotency_key": c.idempotency_key}


def who_sync(fail_first: bool = False) -> dict:
    got = _shown()
    SEEN.append(got)
    if fail_first and got["attempt"] == 1:
        raise RuntimeError("first try fails")
    return got


async def who_trio() -> dict:
    await trio.sleep(0)
    return _shown()


@asyncio_tool
async def who_asyncio() -> dict:
    await asyncio.sleep(0)
    return _shown()


def pay_then_wait(ref: str, ledger: str, fifo: str) -> dict:
    """Applies a payment keyed by the idempotency key, then waits on a FIFO (a test kills the run
    there: the write happened, its receipt did not)."""
    import json
    import os

    key = current_call().idempotency_key
    seen = open(ledger).read().splitlines() if os.path.exists(ledger) else []
    if any(json.loads(line)["key"] == key for line in seen):
        return {"ref": ref, "replayed": True}
    with open(ledger, "a") as fh:
        fh.write(json.dumps({"ref": ref, "key": key}) + "\n")
    if os.path.exists(fifo):
        with open(fifo, "w") as f:  # blocks until the test opens the other end
            f.write("applied\n")
        os.unlink(fifo)
        import time

        time.sleep(60)  # the test kills the run here
    return {"ref": ref, "replayed": False}
