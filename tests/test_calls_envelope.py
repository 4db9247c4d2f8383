"""The control envelope: readings in receipts, a lane stopped by a producer's stop
status, unknown statuses as invalid_output, lane payload projection and handoff."""

from __future__ import annotations

from test_calls_common import admitted, run_plan, tool

ENVELOPE = {
    "version": 1, "role": "production",
    "graph": {"status_field": "state", "continue_statuses": ["success", "partial"], "stop_statuses": ["failed"]},
    "diagnosis": {"ready_field": "ready", "reason_code_field": "code", "failure_kind_field": "kind",
                  "facts_field": "facts", "fields": ["errors", "warnings"]},
    "handoff_fields": ["extra"],
}
CLOSED_IN = {"type": "object", "additionalProperties": False,
             "properties": {"status": {"type": "string"}, "extra": {"type": "string"}, "note": {"type": "string"}}}
TOOLS = {
    "produce": tool("producer", control_envelope=ENVELOPE, input_schema=CLOSED_IN),
    "closed": tool("echo", input_schema={"type": "object", "additionalProperties": False,
                                         "properties": {"extra": {"type": "string"}, "note": {"type": "string"}}}),
    "open": tool("echo"),
}


def test_the_receipt_carries_the_envelope_reading(tmp_path):
    plan = admitted(tmp_path, TOOLS, calls=[{"tool": "produce", "args": {"status": "partial", "extra": "E"}}])
    got, _, _ = run_plan(plan, mock=False)
    assert got[0]["status"] == "ok"
    assert got[0]["envelope"] == {
        "status": "partial", "decision": "continue",
        "diagnosis": {"ready": True, "reason_code": "c1", "failure_kind": "k1", "facts": {"n": 1},
                      "fields": {"errors": [], "warnings": []}},
        "handoff": {"extra": "E"},
    }


def test_a_stop_status_stops_the_lane_as_a_failure_would(tmp_path):
    plan = admitted(tmp_path, TOOLS, lanes=[
        {"item_key": "a", "calls": [{"call_key": "p", "tool": "produce", "args": {"status": "failed"}},
                                    {"call_key": "next", "tool": "open", "args": {}}]},
        {"item_key": "b", "calls": [{"call_key": "p", "tool": "produce", "args": {"status": "success"}},
                                    {"call_key": "next", "tool": "open", "args": {}}]},
    ])
    got, _, state = run_plan(plan, mock=False)
    assert [(r["item_key"], r["status"]) for r in got] == [("a", "ok"), ("a", "skipped"), ("b", "ok"), ("b", "ok")]
    assert got[0]["envelope"]["decision"] == "stop"
    assert got[1]["error"]["message"] == "call 'p' reported status 'failed' (control envelope: stop)"


def test_a_status_in_neither_list_is_invalid_output(tmp_path):
    plan = admitted(tmp_path, TOOLS, calls=[{"call_key": "p", "tool": "produce", "args": {"status": "maybe"}},
                                            {"call_key": "next", "tool": "open", "args": {}}])
    got, _, _ = run_plan(plan, mock=False)
    assert [r["status"] for r in got] == ["invalid_output", "skipped"]
    assert got[0]["error"] == {"kind": "envelope",
                               "message": "producer status 'maybe' is in neither continue_statuses nor stop_statuses"}
    assert got[0]["result"] is None and got[0]["envelope"] is None


def test_lane_payload_is_projected_and_handoff_fields_flow_to_later_calls(tmp_path):
    plan = admitted(tmp_path, TOOLS, lanes=[{
        "item_key": "doc", "payload": {"status": "success", "note": "n1", "unrelated": 7},
        "calls": [
            {"call_key": "first", "tool": "closed"},  # before any handoff
            {"call_key": "p", "tool": "produce"},  # projected: status and note only
            {"call_key": "then", "tool": "closed"},  # now with the producer's handoff
            {"call_key": "all", "tool": "open"},  # an open schema takes the whole payload
        ],
    }])
    got, _, _ = run_plan(plan, mock=False)
    assert [r["status"] for r in got] == ["ok"] * 4
    assert got[0]["args"] == {"note": "n1"}
    assert got[1]["args"] == {"status": "success", "note": "n1"}
    assert got[1]["envelope"]["handoff"] == {"extra": ""}
    assert got[2]["args"] == {"note": "n1", "extra": ""}
    assert got[3]["result"] == {"received": {"status": "success", "note": "n1", "unrelated": 7, "extra": ""}}


def test_handoff_overrides_the_payload_for_the_calls_after_it(tmp_path):
    plan = admitted(tmp_path, TOOLS, lanes=[{
        "item_key": "doc", "payload": {"status": "success", "extra": "from-plan"},
        "calls": [{"call_key": "p", "tool": "produce", "args": {"status": "success", "extra": "from-producer"}},
                  {"call_key": "c", "tool": "closed"}],
    }, {
        "item_key": "other", "payload": {"extra": "untouched"},
        "calls": [{"call_key": "c", "tool": "closed"}],
    }])
    got, _, _ = run_plan(plan, mock=False)
    assert got[1]["args"] == {"extra": "from-producer"}
    assert got[2]["args"] == {"extra": "untouched"}  # lanes never share a payload


def test_the_example_registries_and_plans_validate(cli):
    from conftest import ROOT

    r = cli("validate", str(ROOT / "registries"), str(ROOT / "plans"))
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    assert " error " not in r.stdout.decode()


def test_the_handoff_example_passes_one_calls_result_to_the_next(cli):
    from conftest import ROOT, jsonl

    plan = str(ROOT / "plans" / "handoff.yml")
    records = jsonl(cli("run", plan, "--format", "jsonl").stdout)
    draft = [r for r in records if r.get("call_key") == "draft"]
    assert [r["args"] for r in draft] == [{"order": "A-17", "customer": "ACME Corp", "total": 250},
                                          {"order": "B-42", "customer": "Globex", "total": 80}]
    assert records[-1]["status"] == "ok"
    # an order that is not found stops its lane: the draft is skipped, as docs/calls.md shows
    lane = b'{"item_key": "Z-99", "payload": {"order": "Z-99"}, "calls": [{"call_key": "find", "tool": "find_order"},' \
           b' {"call_key": "draft", "tool": "draft_refund"}]}\n'
    r = cli("run", plan, "--lanes", "-", "--format", "jsonl", input=lane)
    z = [rec for rec in jsonl(r.stdout) if rec.get("item_key") == "Z-99"]
    assert [(rec["call_key"], rec["status"]) for rec in z] == [("find", "ok"), ("draft", "skipped")]
    assert z[0]["envelope"]["decision"] == "stop" and r.returncode == 1
