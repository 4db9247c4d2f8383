"""Source limits (``concurrency``): hard caps per tool across the whole run."""

from __future__ import annotations

import trio


class RateLimiter:
    """At most ``per_second`` starts per second, evenly spaced (a leaky bucket of size 1)."""

    def __init__(self, per_second: float):
        self.interval = 1.0 / per_second
        self._next = -float("inf")
        self._lock = trio.Lock()

    async def acquire(self) -> None:
        async with self._lock:
            now = trio.current_time()
            wait = self._next - now
            if wait > 0:
                await trio.sleep(wait)
                now = trio.current_time()
            self._next = max(now, self._next) + self.interval


class ToolLimits:
    """Per-tool limiters, made on first use."""

    def __init__(self) -> None:
        self._in_flight: dict[tuple[str, str], trio.CapacityLimiter] = {}
        self._rate: dict[tuple[str, str], RateLimiter] = {}

    def in_flight(self, key: tuple[str, str], limit: int) -> trio.CapacityLimiter:
        lim = self._in_flight.get(key)
        if lim is None:
            lim = self._in_flight[key] = trio.CapacityLimiter(limit)
        return lim

    def rate(self, key: tuple[str, str], per_second: float) -> RateLimiter:
        lim = self._rate.get(key)
        if lim is None:
            lim = self._rate[key] = RateLimiter(per_second)
        return lim
