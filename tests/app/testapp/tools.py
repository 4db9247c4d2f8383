"""Test tools: each makes one behaviour observable from outside."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import trio

# in-process observation of concurrency (engine tests run in the same interpreter)
IN_FLIGHT = {"now": 0, "max": 0, "calls": 0}
STARTS: dict = {}  # key -> trio.current_time() when hold() started


def reset() -> None:
    IN_FLIGHT.update(now=0, max=0, calls=0)
    STARTS.clear()


async def hold(key: str, seconds: float = 0.01) -> dict:
    """Async: counts itself in flight while it sleeps."""
    STARTS[key] = trio.current_time()
    IN_FLIGHT["now"] += 1
    IN_FLIGHT["calls"] += 1
    IN_FLIGHT["max"] = max(IN_FLIGHT["max"], IN_FLIGHT["now"])
    try:
        await trio.sleep(seconds)
    finally:
        IN_FLIGHT["now"] -= 1
    return {"key": key}


def echo(**kwargs):
    """Returns exactly the arguments it received."""
    return {"received": kwargs}


def marker(path: str) -> dict:
    """Writes a file: proves the call ran."""
    with open(path, "a") as fh:
        fh.write("ran\n")
    return {"path": path}


def log_run(log: str, key: str, seconds: float = 0.0) -> dict:
    """Appends its key to a log file (one line per execution), then sleeps."""
    with open(log, "a") as fh:
        fh.write(key + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    if seconds:
        time.sleep(seconds)
    return {"key": key}


def boom(message: str = "boom") -> dict:
    raise RuntimeError(message)


async def sleep_async(seconds: float) -> dict:
    await trio.sleep(seconds)
    return {"slept": seconds}


def sleep_sync(seconds: float) -> dict:
    time.sleep(seconds)
    return {"slept": seconds}


async def asyncio_sleep(seconds: float) -> dict:
    await asyncio.sleep(seconds)
    return {"slept": seconds, "loop": "asyncio"}


def not_json() -> object:
    return {"a": {1, 2}}


def printer(text: str) -> dict:
    print(text)
    sys.stdout.flush()
    return {"printed": len(text)}


def big(n: int) -> str:
    return "x" * n


def producer(status: str, extra: str = "", note: str = "") -> dict:
    """Producer-owned result read through a control envelope."""
    return {"state": status, "ready": True, "code": "c1", "kind": "k1", "facts": {"n": 1},
            "errors": [], "warnings": [], "extra": extra, "note": note}


def secret_echo(user: str, password: str) -> dict:
    if password.startswith("fail"):
        raise PermissionError(f"bad password {password} for {user}")
    return {"user": user, "token": "tok-" + password}


COUNTER_FILE = "counter.txt"


def fail_then_ok(path: str, failures: int) -> dict:
    n = int(open(path).read()) if os.path.exists(path) else 0
    with open(path, "w") as fh:
        fh.write(str(n + 1))
    if n < failures:
        raise RuntimeError(f"failure {n + 1}")
    return {"tries": n + 1}


async def boom_async(message: str = "boom") -> dict:
    """Async and always raises (usable under a mock clock: no thread)."""
    raise RuntimeError(message)
