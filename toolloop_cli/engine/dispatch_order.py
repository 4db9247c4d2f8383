"""Where a dispatched call's receipt stands among a run's receipts: right after its
parent's, with the calls it dispatched in turn after it (depth first), siblings in the order they
finished. The one statement of that order, read by settlement (receipts as they settle), resume
(kept receipts printed again) and ``runs show`` (the journal read back)."""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")


def dispatched_by_parent(records: Iterable[dict], is_plan_call: Callable[[dict], bool]) -> tuple[dict[int, list[dict]], list[dict]]:
    """Journaled receipts of dispatched calls grouped under their parent's seq, each group in the
    order they finished (``completion_seq``); and the receipts that are neither plan calls nor
    children of a receipt among ``records`` (their parent has none), in the order given."""
    records = list(records)
    seq_of = {r["receipt_id"]: r["seq"] for r in records}
    by_parent: dict[int, list[dict]] = {}
    loose: list[dict] = []
    for r in records:
        if is_plan_call(r):
            continue
        parent = seq_of.get(r.get("parent_receipt_id"))
        if parent is not None:
            by_parent.setdefault(parent, []).append(r)
        else:
            loose.append(r)
    for group in by_parent.values():
        group.sort(key=lambda c: c["completion_seq"])
    return by_parent, loose


def walk_dispatched(by_parent: dict[int, list[T]], parent_seq: int, seq_of: Callable[[T], int]) -> Iterator[tuple[int, T]]:
    """``(parent seq, receipt)`` for the calls ``parent_seq`` dispatched and those they dispatched,
    in printed order; each is taken out of ``by_parent`` as it is handed out."""
    for child in by_parent.pop(parent_seq, ()):
        yield parent_seq, child
        yield from walk_dispatched(by_parent, seq_of(child), seq_of)


def take_dispatched(by_parent: dict[int, list[T]], parent_seq: int, seq_of: Callable[[T], int]) -> list[T]:
    """The receipts printed right after ``parent_seq``'s, in order (see ``walk_dispatched``)."""
    return [child for _parent, child in walk_dispatched(by_parent, parent_seq, seq_of)]
