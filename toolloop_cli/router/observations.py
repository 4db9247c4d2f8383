"""Observations: what the model is shown of an earlier turn, bounded and deterministic.

A summary is the canonical JSON of the redacted result (``ok``) or the redacted error (any
other status), cut to a bound; the same value always gives the same summary, so a replayed run
shows the model exactly what the recorded one did.
"""

from __future__ import annotations

from typing import Any

from ._text import bounded, to_json
from .views import Observation

#: default bound on a summary, in characters
SUMMARY_CHARS = 2000
#: bound on a rejection's or a guard's reason
REASON_CHARS = 1000

REJECTION_KINDS = ("unknown_tool", "invalid_args", "duplicate", "over_budget", "malformed")


def observe_receipt(iteration: int, tool: str, status: str, value: Any, limit_chars: int = SUMMARY_CHARS,
                    args: Any = None) -> Observation:
    """A call's receipt as the model sees it: ``value`` is the redacted ``result`` when the
    status is ``ok``, else the redacted ``error``."""
    return Observation(iteration, tool, status, bounded(to_json(value), max(limit_chars, 1)), None, args)


def observe_rejection(iteration: int, tool: str | None, kind: str, why: str, args: Any = None) -> Observation:
    """A decision that was not executed (``kind`` one of ``REJECTION_KINDS``) and why."""
    if kind not in REJECTION_KINDS:
        raise ValueError(f"unknown rejection kind {kind!r}")
    return Observation(iteration, tool, "rejected", bounded(why, REASON_CHARS), kind, args)


def observe_withheld(iteration: int, tool: str, status: str, reason: str, args: Any = None) -> Observation:
    """A result an observation guardrail blocked: the model learns it was withheld, and why."""
    return Observation(iteration, tool, status, to_json({"withheld": bounded(reason, REASON_CHARS)}), None, args)


def observe_masked(iteration: int, tool: str, status: str, masked: Any, limit_chars: int = SUMMARY_CHARS,
                   args: Any = None) -> Observation:
    """A result an observation guardrail masked: the model sees the guard's value instead."""
    return observe_receipt(iteration, tool, status, masked, limit_chars, args)
