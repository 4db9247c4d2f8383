"""A journaled run's records in the order the run printed them (``runs show``)."""

from __future__ import annotations

from .dispatch_order import dispatched_by_parent, take_dispatched


def in_output_order(records: list[dict], plan_calls: int) -> list[dict]:
    """A run's journaled receipts in the order the run printed them: plan calls by seq, each
    followed by the calls it dispatched (``dispatch_order``)."""
    by_parent, loose = dispatched_by_parent(records, lambda r: r["seq"] < plan_calls)
    out = [r for r in records if r["seq"] < plan_calls]
    if not by_parent:
        return out + loose
    ordered = [x for r in sorted(out, key=lambda r: r["seq"])
               for x in (r, *take_dispatched(by_parent, r["seq"], _seq))]
    leftover = [r for rs in by_parent.values() for r in rs]  # children of calls with no receipt
    return ordered + sorted(leftover + loose, key=lambda r: r["seq"])


def _seq(record: dict) -> int:
    return record["seq"]


def with_other_records(receipts: list[dict], others: list[tuple[int, dict]]) -> list[dict]:
    """Receipts in output order with the run's other records (decisions, supervisor and guardrail
    records) put back where they were printed: each after the receipts printed before it."""
    if not others:
        return receipts
    out: list[dict] = []
    i = 0
    for before, rec in others:
        while i < len(receipts) and i < before:
            out.append(receipts[i])
            i += 1
        out.append(rec)
    out.extend(receipts[i:])
    return out
