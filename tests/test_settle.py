"""Settlement: receipts counted, committed, ordered and emitted; other record types committed
and emitted where they were recorded; what the journal holds prints back in the same order."""

from __future__ import annotations

from toolloop_cli.engine.history import in_output_order, with_other_records
from toolloop_cli.engine.settle import Settlement
from toolloop_cli.receipts import Receipt
from toolloop_cli.store import JournalWriter, Store


def receipt(seq: int, status: str = "ok", parent: str | None = None) -> Receipt:
    return Receipt(run_id="r1", seq=seq, completion_seq=seq, subagent="s", tool="t", parallel_batch_id=None,
                   item_key=None, call_key=str(seq), parent_receipt_id=parent, iteration=None,
                   receipt_id=f"id{seq}", status=status, abandoned=False, attempts=1, cache="off",
                   args_sha256=None, args={}, result=None, error=None, envelope=None, started_at=None,
                   finished_at=None, duration_ms=0.0)


def decision(n: int) -> dict:
    return {"type": "decision", "run_id": "r1", "iteration": n, "action": "call"}


def test_receipts_are_emitted_in_seq_order_and_counted_once():
    got: list = []
    s = Settlement(got.append)
    s.settle(receipt(2, "error"))
    s.settle(receipt(0))
    assert [r.seq for r in got] == [0]
    s.skip(1)
    assert [r.seq for r in got] == [0, 2]
    assert s.counts["ok"] == 1 and s.counts["error"] == 1 and s.emitted == 3


def test_dispatched_receipts_follow_their_parent():
    got: list = []
    s = Settlement(got.append)
    s.children.add(0, receipt(10, parent="id0"))
    s.children.add(10, receipt(11, parent="id10"))
    s.settle(receipt(1))
    s.settle(receipt(0))
    assert [r.seq for r in got] == [0, 10, 11, 1]
    assert s.counts["ok"] == 4


def test_other_records_are_journaled_in_place_and_shown_back_in_order(tmp_path):
    store = Store(tmp_path / "state")
    printed: list = []
    journal = JournalWriter(store, lambda record, _line: printed.append(record))
    s = Settlement(journal=journal)
    s.record(decision(1))
    s.settle(receipt(0))
    s.record(decision(2))
    s.settle(receipt(1))
    s.record({"type": "supervisor", "run_id": "r1", "iteration": 2, "rule": "x", "action": "steer"})
    journal.close()
    assert [r["type"] for r in printed] == ["decision", "receipt", "decision", "receipt", "supervisor"]
    shown = with_other_records(in_output_order(store.receipts_of("r1"), 2), store.records_of("r1"))
    assert shown == printed
    store.close()
