"""A receipt's JSON is made once: the journal thread encodes it to store it and hands those bytes on
with the record (``after_commit(record, line)``, a sink's ``write(record, line)``), and the JSON
Lines writer prints them instead of encoding the record again. The output is byte for byte what
the writer makes by encoding each record itself, and each receipt's line is the text the journal
holds for it, whatever the receipt holds: text in any script, control characters, integers past 64
bits, floats, nesting, scrubbed secrets, dispatched children, a routed run's other records.
Real runs through ``engine/launch.py`` (what the CLI runs) with a real state database."""

from __future__ import annotations

import io
import json

import pytest

from test_calls_common import plan_file, tool
from toolloop_cli import _json
from toolloop_cli.engine.launch import Launch, RunOptions
from toolloop_cli.providers.scripted import ScriptedProvider
from toolloop_cli.render.records import JsonArrayWriter, JsonlWriter
from toolloop_cli.store import JournalWriter, Store

PASSWORD = "hunter2-sécret"

#: arguments (echoed back as the result) that take every path of the JSON writer
ODD = {
    "text": "Zoë — 東京 🚀 \u0000\u0001\u001f\u007f\t\n\r\u2028\u2029 \"quoted\" \\ </script>",
    "big": 1 << 70, "neg": -(1 << 65), "i64": -(1 << 63), "u64": (1 << 64) - 1,
    "floats": [0.1, -2.5, 1.0e300, 5e-324, -0.0, 123456789.125],
    "nested": {"a": [[{"b": [None, True, False, "", {}, []]}]], "ü": {"東": {"🚀": 0}}},
}

TOOLS = {
    "echo": tool("echo"),
    "login": tool("secret_echo", redact=["/password"]),
    "boom": tool("boom"),
    "router": tool("route_sync", dispatch=["echo"]),
}


class Tee:
    """A run's sink that writes each record twice, with the bytes handed on and without them, and
    keeps what it was handed."""

    def __init__(self) -> None:
        self.with_line, self.without = io.BytesIO(), io.BytesIO()
        self.array_with, self.array_without = io.BytesIO(), io.BytesIO()
        self.writers = [JsonlWriter(self.with_line, autoflush=False), JsonArrayWriter(self.array_with)]
        self.plain = [JsonlWriter(self.without, autoflush=False), JsonArrayWriter(self.array_without)]
        self.handed: list[tuple[dict, bytes | None]] = []

    def write(self, record: dict, line: bytes | None = None) -> None:
        self.handed.append((record, line))
        for writer in self.writers:
            writer.write(record, line)
        for writer in self.plain:
            writer.write(record)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        for writer in self.writers + self.plain:
            writer.close()


def _lanes() -> list[dict]:
    lanes = []
    for i in range(6):
        lanes.append({"item_key": f"lane-{i}-ü", "calls": [
            {"call_key": "echo", "tool": "echo", "args": {**ODD, "i": i}},
            {"call_key": "login", "tool": "login", "args": {"user": "zoë", "password": PASSWORD}},
            {"call_key": "route", "tool": "router", "args": {"target": "echo", "args": {"odd": ODD, "i": i}}},
            {"call_key": "boom", "tool": "boom", "args": {"message": f"no — {i} \u0001 🚀"}},
        ]})
    return lanes


def _check(tmp_path, tee: Tee, run_id: str) -> list[dict]:
    """The two outputs are the same bytes, each receipt's line is the journal's text for it, and
    every line handed on is the record's own JSON. Returns the records printed."""
    tee.close()
    out = tee.with_line.getvalue()
    assert out == tee.without.getvalue()
    assert tee.array_with.getvalue() == tee.array_without.getvalue()
    assert PASSWORD.encode() not in out
    lines = out.split(b"\n")
    assert lines[-1] == b""
    printed = [json.loads(line) for line in lines[:-1]]
    store = Store(tmp_path / "state")
    try:
        stored = dict(store.db.execute("SELECT seq, record FROM receipts WHERE run_id=?", (run_id,)).fetchall())
    finally:
        store.close()
    shown = [line for line, rec in zip(lines, printed) if rec["type"] == "receipt"]
    assert shown == [stored[rec["seq"]].encode() for rec in printed if rec["type"] == "receipt"]
    assert len(shown) == len(stored)
    for record, line in tee.handed:
        if line is not None:
            assert record["type"] == "receipt" and line == _json.dumps(record)
    return printed


@pytest.mark.parametrize("order", ["input", "completion"])
def test_a_batch_prints_the_bytes_the_journal_stored_and_they_are_what_encoding_gives(tmp_path, order):
    plan = plan_file(tmp_path, TOOLS, lanes=[], mc=4)
    lanes = io.BytesIO(b"".join(_json.dumps(lane) + b"\n" for lane in _lanes()))  # read as --lanes reads them
    launch = Launch(tmp_path / "state")
    tee = Tee()
    prepared = launch.admit(str(plan), RunOptions(order=order), lanes=lanes)
    result = launch.start(prepared, tee, handle_signals=False)
    printed = _check(tmp_path, tee, result.summary["run_id"])
    receipts = [r for r in printed if r["type"] == "receipt"]
    assert len(receipts) == 30  # 24 calls of the plan and 6 dispatched
    assert sum(r["parent_receipt_id"] is not None for r in receipts) == 6
    echoed = next(r for r in receipts if r["tool"] == "echo" and r["parent_receipt_id"] is None)
    assert echoed["result"]["received"]["big"] == 1 << 70 and echoed["result"]["received"]["text"] == ODD["text"]
    # the hand-off is taken: the receipts handed on with bytes are printed from them
    handed = sum(line is not None for _r, line in tee.handed)
    assert handed >= (len(receipts) if order == "completion" else 1)


def test_a_routed_run_prints_its_decisions_and_receipts_the_same_way(tmp_path):
    from regkit import registry_yaml

    from conftest import write

    write(tmp_path / "reg.yml", registry_yaml("echo", "login"))
    plan = write(tmp_path / "plan.yml", """
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Find x — ü 🚀.
        router_profile: {provider: openai, model: m}
        final_profile: {provider: openai, model: m}
        budget: {max_iterations: 6, max_tokens: 100000, max_tool_calls: 6, timeout_s: 30}
        final_schema: {type: object, required: [answer]}
    """)
    replies = [json.dumps({"action": "call", "tool": "echo", "args": ODD, "reason": "odd — \u0001"}),
               json.dumps({"action": "call", "tool": "login", "args": {"user": "u", "password": PASSWORD},
                           "reason": "r"}),
               json.dumps({"action": "final", "reason": "enough"}),
               json.dumps({"answer": "done — 東京"})]
    launch = Launch(tmp_path / "state")
    tee = Tee()
    result = launch.start(launch.admit(str(plan), RunOptions()), tee, handle_signals=False,
                          providers={"openai": ScriptedProvider(replies)})
    printed = _check(tmp_path, tee, result.summary["run_id"])
    assert {r["type"] for r in printed} >= {"decision", "receipt", "summary"}
    assert sum(line is not None for _r, line in tee.handed) == 2  # both receipts, none of the others


def test_a_record_without_bytes_is_encoded_by_the_writer():
    out = io.BytesIO()
    writer = JsonlWriter(out)
    record = {"type": "decision", "n": 1 << 70, "why": "ü"}
    writer.write(record)
    writer.write(record, b'{"given":true}')
    assert out.getvalue() == _json.dumps(record) + b"\n" + b'{"given":true}\n'


def _receipt(seq: int) -> dict:
    return {"type": "receipt", "run_id": "r", "seq": seq, "status": "ok", "result": {"n": 1 << 70, "t": "ü\u0001"}}


@pytest.mark.parametrize("says_what_it_stored", [True, False])
def test_only_a_receipt_committed_in_the_step_that_hands_it_on_goes_with_bytes(tmp_path, says_what_it_stored):
    """Committed now and printed later, another record, a store that does not return what it
    stored: those go on without bytes, for the writer to encode."""
    store = Store(tmp_path / "state")
    store.create_run({"run_id": "r", "mode": "parallel", "plan_path": "p", "plan_sha256": "x", "registry_path": "r",
                      "contract_sha256": "c", "options": {}, "total_calls": 3})

    class Silent:  # a store with the same methods that returns nothing from a commit
        def __getattr__(self, name):
            return getattr(store, name)

        def put_records(self, *args):
            store.put_records(*args)

        def put_receipts(self, receipts):
            store.put_receipts(receipts)

    got: list[tuple[dict, bytes | None]] = []
    journal = JournalWriter(store if says_what_it_stored else Silent(), lambda r, line: got.append((r, line)))
    a, b, c = _receipt(0), _receipt(1), _receipt(2)
    decision = {"type": "decision", "run_id": "r", "n": 0, "why": "ü"}
    journal.commit(a)
    journal(b)
    journal.record(decision, 1)
    journal.emit(a)
    journal(c)
    journal.close()
    store.close()
    given = [_json.dumps(b), None, None, _json.dumps(c)] if says_what_it_stored else [None] * 4
    assert got == list(zip([b, decision, a, c], given))
