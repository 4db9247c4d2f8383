"""A receipt's timestamps: RFC 3339 UTC with microseconds, the same text whichever second the
formatter saw last (it keeps the date part of one second)."""

from __future__ import annotations

import random
from datetime import datetime, timezone

from toolloop_cli.receipts import rfc3339


def _reference(epoch_s: float) -> str:
    second, frac = divmod(round(epoch_s * 1_000_000), 1_000_000)
    return datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:06d}Z"


def test_timestamps_are_rfc3339_with_microseconds_across_seconds_and_in_any_order():
    rng = random.Random(7)
    base = 1_780_000_000.0
    values = [0.0, -1.5, -0.0000004, 1e9 + 0.9999995, 1e9 + 0.9999994, base, base + 0.999999, base + 1]
    values += [base + i * 0.3e-6 for i in range(5000)]  # many within one second, then the next
    values += [rng.uniform(-1e9, 4e9) for _ in range(5000)]  # a different second every time
    assert [rfc3339(v) for v in values] == [_reference(v) for v in values]
    assert rfc3339(None) is None
    assert rfc3339(1_767_323_045.678901) == "2026-01-02T03:04:05.678901Z"
