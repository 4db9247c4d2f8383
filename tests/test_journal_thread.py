"""Every write a running run makes goes through its journal writer: a routed run's model answers,
the operators' controls it reads and its call total are committed by the journal thread, in order
with its records, so the event loop never waits on SQLite. An answer is still committed before
the call it asked for starts, and a resume finds it."""

from __future__ import annotations

import threading

import pytest

from modelserver import Reply
from test_routed_loop import ANSWER, CALL_ECHO, FINAL, KEY, plan_file
from toolloop_cli.engine.run import RunOptions, execute_plan
from toolloop_cli.plan.admit import admit_plan
from toolloop_cli.store import JournalWriter, Store

RUN_ID = "20260101T000000Z-journal1"


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("TL_TEST_KEY", KEY)


class Watched(Store):
    """A store that notes which thread makes each write under watch."""

    def __init__(self, folder):
        super().__init__(folder)
        self.writes: list[tuple[str, str]] = []

    def _note(self, what: str) -> None:
        self.writes.append((what, threading.current_thread().name))

    def put_records(self, receipts, others=(), answers=()) -> None:
        for _answer in answers:  # a model's answer commits with the records queued around it
            self._note("model_answer")
        super().put_records(receipts, others, answers)

    def consume_control(self, run_id: str, n: int, iteration: int) -> None:
        self._note("consume_control")
        super().consume_control(run_id, n, iteration)

    def set_total_calls(self, run_id: str, total: int) -> None:
        self._note("set_total_calls")
        super().set_total_calls(run_id, total)


def test_a_routed_runs_answers_and_controls_are_written_by_the_journal_thread(tmp_path, model_server):
    model_server.script(Reply(CALL_ECHO, 100, 10), Reply(FINAL, 120, 5), Reply(ANSWER, 50, 4))
    store = Watched(tmp_path / "state")
    store.add_control(RUN_ID, "steer", "Prefer short answers.")  # read before the first turn
    got: list = []
    try:
        result = execute_plan(admit_plan(plan_file(tmp_path, model_server)), store, got.append,
                              RunOptions(handle_signals=False), run_id=RUN_ID)
        answers = store.model_answers_of(RUN_ID)
        controls = store.controls_after(RUN_ID, 0)
    finally:
        store.close()
    assert result.summary["outcome"] == "final"
    assert [w for w, _thread in store.writes] == ["consume_control", "model_answer", "model_answer", "model_answer",
                                                  "set_total_calls"]
    assert {thread for _w, thread in store.writes} == {"toolloop-journal"}
    assert [(a["n"], a["role"]) for a in answers] == [(1, "router"), (2, "router"), (3, "final")]
    assert controls == [(0, "steer", "Prefer short answers.", 1)]
    steer = [r for r in got if r["type"] == "supervisor"]
    assert [(r["action"], r["iteration"]) for r in steer] == [("steer", 1)]


def test_an_answer_is_committed_before_the_call_it_asked_for_starts(tmp_path, model_server):
    model_server.script(Reply(CALL_ECHO, 100, 10), Reply(FINAL, 120, 5), Reply(ANSWER, 50, 4))
    store = Store(tmp_path / "state")
    reader = Store(tmp_path / "state")  # another connection: it sees only what is committed
    at_start: list[list[int]] = []

    def audit(event: dict) -> None:
        if event["event"] == "started":
            at_start.append([a["n"] for a in reader.model_answers_of(RUN_ID)])

    try:
        result = execute_plan(admit_plan(plan_file(tmp_path, model_server)), store, [].append,
                              RunOptions(handle_signals=False, audit=audit), run_id=RUN_ID)
    finally:
        reader.close()
        store.close()
    assert result.summary["outcome"] == "final"
    assert at_start == [[1]]  # the router's answer that asked for the echo call


def test_a_change_written_through_the_journal_keeps_its_place_among_the_records(tmp_path):
    store = Store(tmp_path)
    order: list[str] = []

    class Noting:
        def __getattr__(self, name):
            return getattr(store, name)

        def put_records(self, receipts, others=()):
            order.extend(f"record {r['seq']}" for r in receipts)
            store.put_records(receipts, others)

        def put_receipts(self, receipts):
            self.put_records(receipts)

    store.create_run({"run_id": "r", "mode": "sequential", "plan_path": "p", "plan_sha256": "x", "registry_path": "r",
                      "contract_sha256": "c", "options": {}, "total_calls": 3})
    writer = JournalWriter(Noting(), lambda r, _line: None, max_batch=512)
    receipt = {"type": "receipt", "run_id": "r", "status": "ok"}
    writer.commit({**receipt, "seq": 0})
    writer.write(lambda: order.append("change"))
    writer.commit({**receipt, "seq": 1})
    writer.close()
    store.close()
    assert order == ["record 0", "change", "record 1"]
