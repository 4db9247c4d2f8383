"""The production router: ``toolloop_cli.dispatch(tool, args)`` from inside a running
callable (sync, trio, asyncio), through every gate, with its own receipt after the parent's."""

from __future__ import annotations

import jsonschema
import pytest

from conftest import jsonl
from test_calls_common import admitted, plan_file, run_plan, tool
from toolloop_cli.record_schema import receipt_schema

CHILDREN = ["child", "child_fail", "child_slow", "child_approval", "child_limited", "child_secret", "child_cached"]
TOOLS = {
    "child": tool("echo", input_schema={"type": "object", "required": ["x"], "properties": {"x": {"type": "integer"}}}),
    "child_fail": tool("boom"),
    "child_slow": tool("sleep_async", timeout_s=10),
    "child_approval": tool("echo", approval={"when": "args.x > 5"}),
    "child_limited": tool("echo", max_calls=1),
    "child_secret": tool("secret_echo", redact=["/password"]),
    "child_cached": tool("stamp", cacheable=True),
    "router_sync": tool("route_sync", dispatch=CHILDREN + ["router_trio"]),
    "router_trio": tool("route_trio", dispatch=CHILDREN + ["router_sync"]),
    "router_asyncio": tool("route_asyncio", dispatch=CHILDREN),
    "router_many": tool("route_many", dispatch=["child"]),
    "router_trio_thread": tool("route_trio_thread", dispatch=["child"]),
    "router_slow": tool("route_sync", timeout_s=0.3, dispatch=["child_slow"]),
    "router_trio_slow": tool("route_trio", timeout_s=1, dispatch=["child_slow"]),
    "router_process": tool("route_sync", isolation="process", dispatch=["child"]),
    "undeclared": tool("route_sync"),
}


class DictCache:
    def __init__(self):
        self.data: dict = {}

    def get(self, key):
        return (self.data[key],) if key in self.data else None

    def put(self, key, tool, result):
        self.data[key] = result


@pytest.fixture(autouse=True)
def _reset():
    from testapp import tools

    tools.reset_governed()


def route(router: str, target: str, args, catch: bool = False, key: str | None = None) -> dict:
    return {"call_key": key or router, "tool": router, "args": {"target": target, "args": args, "catch": catch}}


def one(tmp_path, call: dict, **kw):
    plan = admitted(tmp_path, TOOLS, calls=[call])
    got, ctx, state = run_plan(plan, mock=False, **kw)
    return got, state


@pytest.mark.parametrize("router", ["router_sync", "router_trio", "router_asyncio"])
def test_dispatch_returns_the_child_result_and_the_child_receipt_follows_its_parent(tmp_path, router):
    plan = admitted(tmp_path, TOOLS, lanes=[
        {"item_key": "a", "calls": [route(router, "child", {"x": 1}), {"call_key": "after", "tool": "child", "args": {"x": 2}}]},
        {"item_key": "b", "calls": [route(router, "child", {"x": 3})]},
    ])
    got, _, state = run_plan(plan, mock=False)
    assert [(r["item_key"], r["tool"], r["status"]) for r in got] == [
        ("a", router, "ok"), ("a", "child", "ok"), ("a", "child", "ok"), ("b", router, "ok"), ("b", "child", "ok")]
    parent, child = got[0], got[1]
    assert parent["result"] == {"child": {"received": {"x": 1}}}
    assert child["parent_receipt_id"] == parent["receipt_id"] and child["call_key"] is None
    assert child["args"] == {"x": 1} and child["attempts"] == 1
    assert got[2]["parent_receipt_id"] is None and got[2]["seq"] == 1
    # plan calls keep seqs 0..N-1; dispatched calls come after, every seq unique
    assert [r["seq"] for r in got if r["parent_receipt_id"] is None] == [0, 1, 2]
    assert all(r["seq"] >= 3 for r in got if r["parent_receipt_id"] is not None)
    assert len({r["seq"] for r in got}) == 5
    assert state.counts["ok"] == 5
    for r in got:
        jsonschema.validate(r, receipt_schema())


def test_a_tool_not_in_dispatch_is_refused_and_nothing_runs(tmp_path):
    got, _ = one(tmp_path, route("router_sync", "router_many", {"target": "child", "items": []}, catch=True))
    assert len(got) == 1
    assert got[0]["result"]["refused"] == ("dispatch to 'router_many' refused: tool 'router_sync' may dispatch only "
                                           "to [" + ", ".join(CHILDREN + ["router_trio"]) + "]")
    assert got[0]["result"]["receipt"] is None


def test_a_callable_whose_tool_declares_no_dispatch_is_refused(tmp_path):
    got, _ = one(tmp_path, route("undeclared", "child", {"x": 1}))
    assert got[0]["status"] == "error" and got[0]["error"]["kind"] == "DispatchError"
    assert got[0]["error"]["message"].startswith("dispatch to 'child' refused: no running call declares it")


def test_process_isolated_callables_cannot_dispatch(tmp_path):
    got, _ = one(tmp_path, route("router_process", "child", {"x": 1}))
    assert got[0]["status"] == "error" and got[0]["error"]["kind"] == "DispatchError"
    assert len(got) == 1


@pytest.mark.parametrize("router", ["router_sync", "router_trio", "router_asyncio"])
def test_a_failed_child_raises_dispatch_error_carrying_its_receipt(tmp_path, router):
    got, state = one(tmp_path, route(router, "child_fail", {"message": "no luck"}, catch=True))
    assert [r["status"] for r in got] == ["ok", "error"]
    assert got[0]["result"] == {"refused": "dispatch to 'child_fail' ended error: no luck", "receipt": "error"}
    assert state.counts["error"] == 1  # a child that is not ok makes the run fail


def test_an_uncaught_dispatch_error_fails_the_parent(tmp_path):
    got, _ = one(tmp_path, route("router_sync", "child_fail", {"message": "no luck"}))
    assert [(r["tool"], r["status"]) for r in got] == [("router_sync", "error"), ("child_fail", "error")]
    assert got[0]["error"] == {"kind": "DispatchError", "message": "dispatch to 'child_fail' ended error: no luck"}


@pytest.mark.parametrize("target,args,status", [
    ("child", {"x": "not an integer"}, "invalid_input"),
    ("child_approval", {"x": 9}, "denied"),
])
def test_children_pass_the_gates(tmp_path, target, args, status):
    got, _ = one(tmp_path, route("router_trio", target, args, catch=True))
    assert [r["status"] for r in got] == ["ok", status]
    assert got[0]["result"]["receipt"] == status
    assert got[1]["attempts"] == 0 and got[1]["parent_receipt_id"] == got[0]["receipt_id"]


def test_max_calls_counts_dispatched_calls(tmp_path):
    plan = admitted(tmp_path, TOOLS, calls=[route("router_sync", "child_limited", {"n": 1}, key="one"),
                                            route("router_sync", "child_limited", {"n": 2}, catch=True, key="two")])
    got, _, _ = run_plan(plan, mock=False)
    assert [(r["tool"], r["status"]) for r in got] == [
        ("router_sync", "ok"), ("child_limited", "ok"), ("router_sync", "ok"), ("child_limited", "budget_exceeded")]


def test_children_use_the_cache_and_redaction(tmp_path):
    cache = DictCache()
    plan = admitted(tmp_path, TOOLS, calls=[route("router_trio", "child_cached", {"key": "k"}, key="one"),
                                            route("router_trio", "child_cached", {"key": "k"}, key="two"),
                                            route("router_sync", "child_secret", {"user": "ada", "password": "s3cret-canary"},
                                                  key="three")])
    got, _, _ = run_plan(plan, mock=False, cache=cache)
    assert [(r["tool"], r["cache"]) for r in got][:4] == [
        ("router_trio", "off"), ("child_cached", "miss"), ("router_trio", "off"), ("child_cached", "hit")]
    secret = got[5]
    assert secret["tool"] == "child_secret" and secret["args"] == {"user": "ada", "password": "[REDACTED]"}


def test_a_sync_router_can_dispatch_many_calls_in_turn(tmp_path):
    got, _ = one(tmp_path, {"tool": "router_many", "args": {"target": "child", "items": [{"x": i} for i in range(5)]}})
    assert got[0]["result"] == {"children": [{"received": {"x": i}} for i in range(5)]}
    assert [r["args"] for r in got[1:]] == [{"x": i} for i in range(5)]
    assert [r["completion_seq"] for r in got[1:]] == sorted(r["completion_seq"] for r in got[1:])


def test_a_trio_callable_may_dispatch_from_a_thread_it_starts(tmp_path):
    got, _ = one(tmp_path, {"tool": "router_trio_thread", "args": {"target": "child", "args": {"x": 4}}})
    assert [(r["tool"], r["status"]) for r in got] == [("router_trio_thread", "ok"), ("child", "ok")]
    assert got[0]["result"] == {"child": {"received": {"x": 4}}}


def test_dispatch_nests_and_receipts_come_depth_first(tmp_path):
    call = route("router_trio", "router_sync", {"target": "child", "args": {"x": 1}, "catch": False})
    got, _ = one(tmp_path, call)
    assert [r["tool"] for r in got] == ["router_trio", "router_sync", "child"]
    assert got[1]["parent_receipt_id"] == got[0]["receipt_id"]
    assert got[2]["parent_receipt_id"] == got[1]["receipt_id"]
    assert got[0]["result"] == {"child": {"child": {"received": {"x": 1}}}}


def test_children_of_a_thread_that_times_out_are_cancelled(tmp_path):
    got, _ = one(tmp_path, route("router_slow", "child_slow", {"seconds": 30}))
    assert [(r["tool"], r["status"], r["abandoned"]) for r in got] == [
        ("router_slow", "timeout", True), ("child_slow", "cancelled", False)]
    assert got[1]["parent_receipt_id"] == got[0]["receipt_id"]


def test_children_of_a_trio_callable_that_times_out_are_cancelled(tmp_path):
    plan = admitted(tmp_path, TOOLS, calls=[route("router_trio_slow", "child_slow", {"seconds": 30})])
    got, _, _ = run_plan(plan)  # mock clock
    assert [(r["tool"], r["status"]) for r in got] == [("router_trio_slow", "timeout"), ("child_slow", "cancelled")]


def test_dispatch_outside_a_running_call_is_refused():
    from toolloop_cli import DispatchError, dispatch

    with pytest.raises(DispatchError, match="no running call declares it"):
        dispatch("child", {})


def test_the_command_emits_children_after_their_parent(tmp_path, cli):
    plan = plan_file(tmp_path, TOOLS, calls=[route("router_sync", "child", {"x": 1}),
                                             {"call_key": "last", "tool": "child", "args": {"x": 2}}])
    proc = cli("run", str(plan), "--format", "jsonl")
    assert proc.returncode == 0, proc.stderr.decode()
    recs = jsonl(proc.stdout)
    assert [(r["type"], r.get("tool")) for r in recs] == [
        ("receipt", "router_sync"), ("receipt", "child"), ("receipt", "child"), ("summary", None)]
    assert recs[1]["parent_receipt_id"] == recs[0]["receipt_id"] and recs[1]["seq"] >= 2
    assert recs[-1]["counts"]["ok"] == 3
