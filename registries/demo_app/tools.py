"""Example tools. They know nothing of toolloop: plain functions taking keyword arguments."""

from __future__ import annotations

import os
import time

import trio


def transform(text: str, mode: str = "upper") -> dict:
    """Sync: change the case of a text."""
    out = text.upper() if mode == "upper" else text.lower()
    return {"text": out, "length": len(out)}


async def count_words(text: str) -> dict:
    """Async (trio): count the words of a text."""
    await trio.sleep(0)
    return {"words": len(text.split())}


def slow(seconds: float) -> dict:
    """Sync and slow: sleeps in its worker thread."""
    time.sleep(seconds)
    return {"slept": seconds}


async def slow_async(seconds: float) -> dict:
    """Async and slow: cancelled cleanly at its timeout."""
    await trio.sleep(seconds)
    return {"slept": seconds}


def flaky(fail_times: int, marker: str) -> dict:
    """Fails ``fail_times`` times for a given marker file, then succeeds (shows retries)."""
    count = 0
    if os.path.exists(marker):
        with open(marker) as fh:
            count = int(fh.read() or 0)
    with open(marker, "w") as fh:
        fh.write(str(count + 1))
    if count < fail_times:
        raise RuntimeError(f"transient failure {count + 1} of {fail_times}")
    return {"tries": count + 1}


def fail(reason: str) -> dict:
    """Always raises."""
    raise ValueError(reason)


def lookup(key: str) -> dict:
    """Cacheable: a pure function of its argument."""
    return {"key": key, "value": sum(map(ord, key))}


def login(user: str, password: str) -> dict:
    """Secret-bearing: the password is redacted everywhere toolloop writes."""
    if not password:
        raise PermissionError(f"empty password for {user}")
    return {"user": user, "session_token": f"tok-{len(password)}-{user}"}


def noop() -> dict:
    """Does nothing: the cheapest call, for benchmarks."""
    return {}


async def noop_async() -> dict:
    """Does nothing, asynchronously."""
    return {}
