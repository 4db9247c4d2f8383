"""A journaled run's records in the order the run printed them (``runs show``)."""

from __future__ import annotations


def in_output_order(records: list[dict], plan_calls: int) -> list[dict]:
    """A run's journaled receipts in the order the run printed them: plan calls by seq, each
    followed by the calls it dispatched (depth first, in the order they finished)."""
    seq_of = {r["receipt_id"]: r["seq"] for r in records}
    by_parent: dict[int, list[dict]] = {}
    out: list[dict] = []
    loose: list[dict] = []
    for r in records:
        if r["seq"] < plan_calls:
            out.append(r)
        elif seq_of.get(r.get("parent_receipt_id")) is not None:
            by_parent.setdefault(seq_of[r["parent_receipt_id"]], []).append(r)
        else:
            loose.append(r)
    if not by_parent:
        return out + loose

    def with_children(r: dict) -> list[dict]:
        got = [r]
        for child in sorted(by_parent.pop(r["seq"], ()), key=lambda c: c["completion_seq"]):
            got.extend(with_children(child))
        return got

    ordered = [x for r in sorted(out, key=lambda r: r["seq"]) for x in with_children(r)]
    leftover = [r for rs in by_parent.values() for r in rs]  # children of calls with no receipt
    return ordered + sorted(leftover + loose, key=lambda r: r["seq"])


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
