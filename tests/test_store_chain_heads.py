"""The journal's store keeps each run's chain head and next record number from its own commits
instead of reading them back in every transaction: links another writer adds in between (an
operator's control from another process, a reset by the same store) are found, and the chain and
the records' numbers go on from them. Real SQLite files, two connections."""

from __future__ import annotations

from toolloop_cli.chain import link_sha256
from toolloop_cli.store import Store
from toolloop_cli.store.db import MODEL_ANSWER, RECEIPT

_SAMPLE = {str: "x", int: 0, bool: False, dict: {}, object: None}


def receipt(seq: int) -> dict:
    rec = {k: _SAMPLE.get(kind, None) if not isinstance(kind, tuple) else None for k, kind in RECEIPT.items()}
    return {**rec, "type": "receipt", "run_id": "r1", "seq": seq, "status": "ok", "duration_ms": 1}


def answer(n: int) -> dict:
    return {**{k: _SAMPLE[kind] for k, kind in MODEL_ANSWER.items()}, "type": "model_answer", "run_id": "r1",
            "n": n, "role": "router", "text": f"reply {n}"}


def decision(it: int) -> tuple[dict, int]:
    return {"type": "decision", "run_id": "r1", "iteration": it}, 0


def test_a_runs_chain_and_records_go_on_from_links_another_writer_added(tmp_path):
    run, operator = Store(tmp_path), Store(tmp_path)  # two connections, as two processes have
    try:
        run.put_records([receipt(0)], [decision(1)], [answer(1)])
        operator.add_control("r1", "steer", "go left")  # linked by the other connection
        run.put_records([receipt(1)], [decision(2)], [answer(2)])
        run.put_records([receipt(2)])
        operator.put_records([], [decision(9)])  # another store writes the run's records too
        run.put_records([], [decision(10)])
        operator.add_control("r1", "abort", None)
        run.put_records([receipt(3)])
        written = [r["iteration"] for _b, r in operator.records_of("r1")]
        run.clear_records("r1")  # a reset link, by the run's own store
        run.put_records([], [decision(3)], [answer(3)])
        links, current = operator.chain_of("r1")
        records = run.records_of("r1")
    finally:
        run.close()
        operator.close()
    assert [link.n for link in links] == list(range(15))
    assert [link.kind for link in links] == [
        "model_answer", "receipt", "record", "control", "model_answer", "receipt", "record", "receipt", "record",
        "record", "control", "receipt", "reset", "model_answer", "record"]
    before = ""
    for link in links:  # each link follows from the one before it
        assert link.link_sha256 == link_sha256(before, link.kind, link.ref, link.record_sha256), link
        before = link.link_sha256
    assert written == [1, 2, 9, 10]  # each store's record numbered after the other's
    assert [r["iteration"] for _b, r in records] == [3]  # numbered from 0 again after the reset
    assert ("record", 0) in current
