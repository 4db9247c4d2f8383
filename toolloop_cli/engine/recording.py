"""What a stopped routed run left in its journal, for the routed runner to replay on resume."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Recording:
    """What a resumed routed run already has in its journal: model answers to reuse, receipts to
    keep (by seq), the at-most-once writes that had started, and how the resume treats them."""

    answers: list[dict]
    receipts: dict[int, dict]
    started: set[int]
    retry_failed: bool = False
    retry_interrupted: bool = False
    seconds_used: float = 0.0


def seconds_used(receipts: list[dict], answers: list[dict]) -> float:
    """Loop time a run spent before it stopped: its model requests and its calls."""
    return (sum(float(a.get("duration_ms") or 0) for a in answers)
            + sum(float(r.get("duration_ms") or 0) for r in receipts)) / 1000.0

