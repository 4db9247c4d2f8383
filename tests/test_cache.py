"""The cache: keyed by the tool's contract hash and the canonical arguments; only ok,
schema-valid results are stored; --no-cache and --refresh-cache; identical calls in flight at
once run once (single flight)."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter

from conftest import jsonl, write
from test_store import parallel_plan, read_log, sequential_plan, state_registry
from toolloop_cli.engine.run import RunOptions, execute_plan
from toolloop_cli.plan.admit import admit_plan
from toolloop_cli.store import Store


def run_here(tmp_path, plan, **options) -> list[dict]:
    store = Store(tmp_path / "st")
    got: list[dict] = []
    try:
        execute_plan(admit_plan(plan), store, got.append, RunOptions(handle_signals=False, **options))
    finally:
        store.close()
    return got


def cache_rows(tmp_path) -> list[tuple]:
    con = sqlite3.connect(tmp_path / "st" / "state.db")
    try:
        return con.execute("SELECT key, tool, result, created_at FROM cache ORDER BY key").fetchall()
    finally:
        con.close()


def one_call(tmp_path, tool: str, args: dict, name: str = "plan.yml"):
    return sequential_plan(tmp_path, [{"call_key": "c", "tool": tool, "args": args}], name=name)


def test_miss_then_hit_then_no_cache_then_refresh(cli, tmp_path):
    state_registry(tmp_path)
    log = tmp_path / "log"
    plan = one_call(tmp_path, "cached", {"log": str(log), "key": "k"})

    def run(*flags: str) -> dict:
        r = cli("run", str(plan), "--format", "jsonl", "--state-dir", "st", *flags)
        assert r.returncode == 0, r.stderr
        return jsonl(r.stdout)[0]

    first = run()
    assert (first["cache"], first["attempts"], read_log(log)) == ("miss", 1, ["k"])
    second = run()
    assert (second["cache"], second["attempts"], read_log(log)) == ("hit", 0, ["k"])
    assert second["result"] == first["result"] == {"key": "k"}
    (key, tool, result, created), = cache_rows(tmp_path)
    assert tool == "cached" and json.loads(result) == {"key": "k"}

    off = run("--no-cache")
    assert (off["cache"], read_log(log)) == ("off", ["k", "k"])
    assert cache_rows(tmp_path) == [(key, tool, result, created)]  # not read, not written

    fresh = run("--refresh-cache")
    assert (fresh["cache"], read_log(log)) == ("miss", ["k", "k", "k"])
    (key2, _, _, created2), = cache_rows(tmp_path)
    assert key2 == key and created2 > created  # rewritten
    assert run()["cache"] == "hit"


def test_a_tool_that_is_not_cacheable_says_off(tmp_path):
    state_registry(tmp_path)
    got = run_here(tmp_path, one_call(tmp_path, "read", {"log": str(tmp_path / "log"), "key": "k"}))
    assert got[0]["cache"] == "off"
    assert cache_rows(tmp_path) == []


def test_key_is_canonical_arguments(tmp_path):
    state_registry(tmp_path)
    log = str(tmp_path / "log")
    a = write(tmp_path / "a.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "s", "mode": "sequential",
                                               "calls": [{"tool": "cached", "args": {"log": log, "key": "k"}}]}))
    b = write(tmp_path / "b.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "s", "mode": "sequential",
                                               "calls": [{"tool": "cached", "args": {"key": "k", "log": log}}]}))
    assert run_here(tmp_path, a)[0]["cache"] == "miss"
    assert run_here(tmp_path, b)[0]["cache"] == "hit"
    c = one_call(tmp_path, "cached", {"key": "k", "log": log, "seconds": 0}, name="c.yml")
    assert run_here(tmp_path, c)[0]["cache"] == "miss"  # other arguments, another key


def test_key_follows_the_tools_contract_hash(tmp_path):
    reg = state_registry(tmp_path)
    log = tmp_path / "log"
    plan = one_call(tmp_path, "cached", {"log": str(log), "key": "k"})
    assert run_here(tmp_path, plan)[0]["cache"] == "miss"
    reg.write_text(reg.read_text().replace("Logs and sleeps; a read.", "Logs and sleeps; still a read."))
    assert run_here(tmp_path, plan)[0]["cache"] == "hit"  # another tool changed: this key holds
    reg.write_text(reg.read_text().replace("Logs; cacheable.", "Logs; cacheable, reworded."))
    assert run_here(tmp_path, plan)[0]["cache"] == "miss"  # this tool changed: a new key
    assert read_log(log) == ["k", "k"]


def test_only_ok_schema_valid_results_are_stored(tmp_path):
    state_registry(tmp_path)
    log = tmp_path / "log"
    bad = one_call(tmp_path, "cached_bad", {"log": str(log), "key": "bad"}, name="bad.yml")
    for _ in range(2):
        got = run_here(tmp_path, bad)
        assert (got[0]["status"], got[0]["cache"]) == ("invalid_output", "miss")
    fail = one_call(tmp_path, "cached_fail", {"log": str(log), "key": "f", "marker": str(tmp_path / "m")},
                    name="fail.yml")
    assert (run_here(tmp_path, fail)[0]["status"], run_here(tmp_path, fail)[0]["status"]) == ("error", "ok")
    assert read_log(log) == ["bad", "bad", "f", "f"]
    rows = cache_rows(tmp_path)
    assert [r[1] for r in rows] == ["cached_fail"]  # only the success
    assert run_here(tmp_path, fail)[0]["cache"] == "hit"


def lanes_of(tool: str, n: int, args: dict) -> list[dict]:
    return [{"item_key": f"i{i}", "calls": [{"call_key": "c", "tool": tool, "args": args}]} for i in range(n)]


def test_identical_calls_in_flight_run_once(tmp_path):
    state_registry(tmp_path)
    log = tmp_path / "log"
    plan = parallel_plan(tmp_path, lanes_of("cached", 5, {"log": str(log), "key": "same", "seconds": 0.2}), mc=5)
    got = run_here(tmp_path, plan)
    assert read_log(log) == ["same"]
    receipts = got[:-1]
    assert Counter(r["cache"] for r in receipts) == {"miss": 1, "hit": 4}
    assert all(r["status"] == "ok" and r["result"] == {"key": "same"} for r in receipts)
    assert got[-1]["status"] == "ok"


def test_single_flight_after_a_failed_leader_the_next_one_leads(tmp_path):
    state_registry(tmp_path)
    log = tmp_path / "log"
    args = {"log": str(log), "key": "same", "marker": str(tmp_path / "m")}
    plan = parallel_plan(tmp_path, lanes_of("cached_fail", 3, args), mc=3)
    receipts = run_here(tmp_path, plan)[:-1]
    assert read_log(log) == ["same", "same"]
    assert Counter((r["status"], r["cache"]) for r in receipts) == {("error", "miss"): 1, ("ok", "miss"): 1,
                                                                     ("ok", "hit"): 1}


def test_single_flight_with_refresh_rewrites_once(tmp_path):
    state_registry(tmp_path)
    log = tmp_path / "log"
    args = {"log": str(log), "key": "same", "seconds": 0.1}
    assert run_here(tmp_path, one_call(tmp_path, "cached", args, name="one.yml"))[0]["cache"] == "miss"
    plan = parallel_plan(tmp_path, lanes_of("cached", 4, args), mc=4)
    receipts = run_here(tmp_path, plan, refresh_cache=True)[:-1]
    assert read_log(log) == ["same", "same"]  # the entry was not read, but rewritten once
    assert Counter(r["cache"] for r in receipts) == {"miss": 1, "hit": 3}


def test_no_cache_has_no_single_flight(tmp_path):
    state_registry(tmp_path)
    log = tmp_path / "log"
    plan = parallel_plan(tmp_path, lanes_of("cached", 3, {"log": str(log), "key": "same", "seconds": 0.05}), mc=3)
    receipts = run_here(tmp_path, plan, no_cache=True)[:-1]
    assert read_log(log) == ["same"] * 3
    assert {r["cache"] for r in receipts} == {"off"}
