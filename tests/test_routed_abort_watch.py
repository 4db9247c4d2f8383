"""One watch for operators' aborts for a routed run's whole loop: it sleeps between calls and the
runner moves its wake-up as each call starts and ends (no task per call), and it still ends the
loop at once when an abort reaches the journal while a later call of the run is running."""

from __future__ import annotations

import json
import threading

from conftest import APP, write
from testapp import tools as testapp_tools
from toolloop_cli.engine.run import RunOptions, execute_plan
from toolloop_cli.engine.supervision import Supervision
from toolloop_cli.plan.admit import admit_plan
from toolloop_cli.providers.scripted import ScriptedProvider
from toolloop_cli.store import Store


def call(key: str, seconds: float) -> str:
    return json.dumps({"action": "call", "tool": "hold", "args": {"key": key, "seconds": seconds}, "reason": "go"})


class Starts(dict):
    """The hold tool's start times; tells the test when the call it waits for began."""

    def __init__(self, key: str):
        super().__init__()
        self.key, self.began = key, threading.Event()

    def __setitem__(self, key: str, value: float) -> None:
        super().__setitem__(key, value)
        if key == self.key:
            self.began.set()


def test_one_watch_for_the_whole_loop_ends_a_later_call_when_an_operator_aborts(tmp_path, monkeypatch):
    watches: list[str] = []
    for name in ("watch_calls", "watch_for_abort"):
        inner = getattr(Supervision, name, None)
        if inner is None:
            continue

        def counted(self, *args, _inner=inner, _name=name):
            watches.append(_name)
            return _inner(self, *args)
        monkeypatch.setattr(Supervision, name, counted)
    starts = Starts("long")
    monkeypatch.setattr(testapp_tools, "STARTS", starts)
    plan = write(tmp_path / "plan.yml", f"""
        version: 1
        registry: {APP / "registry.yml"}
        subagent: t
        mode: routed
        goal: Hold twice.
        allowed_tools: [hold]
        router_profile: {{provider: openai, model: m}}
        final_profile: {{provider: openai, model: m}}
        budget: {{max_iterations: 6, max_tokens: 100000, max_tool_calls: 5, timeout_s: 300}}
        final_schema: {{type: object}}
    """)
    provider = ScriptedProvider([call("a", 0.001), call("b", 0.001), call("long", 120)])
    store = Store(tmp_path / "state")

    def operator() -> None:  # another connection, as `toolloop abort` is: once the third call runs
        starts.began.wait()
        other = Store(tmp_path / "state")
        try:
            (run_id,) = [r["run_id"] for r in other.list_runs()]
            other.add_control(run_id, "abort", "enough")
        finally:
            other.close()

    records: list[dict] = []
    helper = threading.Thread(target=operator, daemon=True)
    helper.start()
    try:
        result = execute_plan(admit_plan(str(plan)), store, records.append,
                              RunOptions(handle_signals=False, providers={"openai": provider}))
    finally:
        starts.began.set()
        helper.join()
        store.close()
    assert result.summary["outcome"] == "aborted", result.summary
    assert result.summary["error"]["message"] == "aborted by an operator: enough"
    receipts = [r for r in records if r["type"] == "receipt"]
    assert [(r["args"]["key"], r["status"]) for r in receipts] == [("a", "ok"), ("b", "ok"), ("long", "cancelled")]
    assert watches == ["watch_calls"]  # one watch for the run's three calls, not one each
