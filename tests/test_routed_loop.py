"""The routed loop: every outcome, every rejection kind, token and cost accounting, outcomes and
routes driven in process by an injected ``ScriptedProvider`` (``RunOptions.providers``); the
deadline, retries, both protocols and the API key reaching the provider and nothing else against
the scripted model server on 127.0.0.1 (real HTTP)."""

from __future__ import annotations

import json
import os

import pytest

from conftest import APP, write
from modelserver import Reply
from toolloop_cli.engine.run import RunOptions, execute_plan
from toolloop_cli.plan.admit import admit_plan
from toolloop_cli.providers import ModelReply, ProviderError
from toolloop_cli.providers.scripted import ScriptedProvider
from toolloop_cli.store import Store

REG = APP / "registry.yml"
KEY = "sk-canary-7f3a9c1e5b"
CALL_ECHO = '{"action": "call", "tool": "echo", "args": {"x": 1}, "reason": "look"}'
FINAL = '{"action": "final", "reason": "enough"}'
ANSWER = '{"answer": 1}'


def plan_file(tmp_path, server=None, *, provider: str = "openai", budget: str | None = None, extra: str = "",
              price: str = "") -> str:
    """The plan; without a ``server`` its profiles name no server (a provider is given in process)."""
    if server is None:
        profile = f"{{provider: {provider}, model: m{price}}}"
    else:
        base = server.openai_base if provider == "openai" else server.anthropic_base
        profile = f"{{provider: {provider}, model: m, base_url: '{base}', api_key_env: TL_TEST_KEY{price}}}"
    budget = budget or "{max_iterations: 6, max_tokens: 100000, max_tool_calls: 3, timeout_s: 30}"
    return str(write(tmp_path / "plan.yml", f"""
        version: 1
        registry: {REG}
        subagent: t
        mode: routed
        goal: Find x.
        context: {{who: test}}
        allowed_tools: [echo, boom, log_run]
        router_profile: {profile}
        final_profile: {profile}
        budget: {budget}
        final_schema: {{type: object, required: [answer], properties: {{answer: {{type: integer}}}}}}
        {extra}
    """))


def run(tmp_path, path: str, **opts):
    plan = admit_plan(path)
    store = Store(tmp_path / "state")
    got: list = []
    try:
        result = execute_plan(plan, store, got.append, RunOptions(handle_signals=False, **opts))
    finally:
        store.close()
    return got, result.summary


def scripted(*replies) -> ScriptedProvider:
    """Replies as the loopback server's ``Reply(text, input, output)`` would give them."""
    return ScriptedProvider([ModelReply(r[0], r[1], r[2], "m") if isinstance(r, tuple) else r for r in replies])


def run_scripted(tmp_path, provider: ScriptedProvider, path: str | None = None, **plan):
    """A real routed run, in process, its profiles answered by ``provider``."""
    return run(tmp_path, path or plan_file(tmp_path, **plan), providers={"openai": provider})


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("TL_TEST_KEY", KEY)


def kinds(records) -> list:
    return [(r["type"], r.get("rejected") or r.get("status")) for r in records]


def test_a_call_then_a_final_answer(tmp_path, model_server):
    model_server.script(Reply(CALL_ECHO, 100, 10), Reply(FINAL, 120, 5), Reply(ANSWER, 50, 4))
    records, summary = run(tmp_path, plan_file(tmp_path, model_server))
    assert kinds(records) == [("decision", None), ("receipt", "ok"), ("decision", None), ("summary", "ok")]
    decision, receipt = records[0], records[1]
    assert decision["tool"] == "echo" and decision["args"] == {"x": 1} and decision["tokens"] == {"input": 100, "output": 10}
    assert decision["model"] == "loopback-model"
    assert receipt["iteration"] == 1 and receipt["call_key"] == "1" and receipt["item_key"] is None
    assert receipt["result"] == {"received": {"x": 1}}
    assert summary["outcome"] == "final" and summary["final"] == {"answer": 1} and summary["route"] is None
    loop = summary["loop"]
    assert loop["iterations"] == 2 and loop["tool_calls"] == 1 and loop["model_calls"] == 3
    assert loop["tokens"] == {"input": 270, "output": 19}
    assert loop["per_tool"] == {"echo": {"calls": 1, "ok": 1, "failed": 0}}
    assert loop["by_part"]["router"]["tokens"] == 235 and loop["by_part"]["final"]["tokens"] == 54
    # the model saw the tool's result as data in its second turn, and the key only in the header
    second = json.dumps(model_server.requests[1].json)
    assert '\\"received\\"' in second or '"received"' in second
    assert all(r.headers.get("authorization") == f"Bearer {KEY}" for r in model_server.requests)
    assert all(KEY not in r.raw.decode() for r in model_server.requests)


def test_every_rejection_kind_is_an_observation_without_a_receipt(tmp_path):
    provider = scripted(
        '{"action": "call", "tool": "pay", "args": {"amount": 1}, "reason": "not allowed"}',
        '{"action": "call", "tool": "boom", "args": {"message": 5}, "reason": "bad args"}',
        CALL_ECHO,
        CALL_ECHO,  # duplicate
        "I think I will call echo",  # malformed
        '{"action": "call", "tool": "boom", "args": {"message": "x"}, "reason": "fails"}',
        '{"action": "call", "tool": "log_run", "args": {"log": "l", "key": "k"}, "reason": "over budget"}',
        FINAL, ANSWER,
    )
    records, summary = run_scripted(
        tmp_path, provider, budget="{max_iterations: 10, max_tokens: 100000, max_tool_calls: 2, timeout_s: 30}")
    decisions = [r for r in records if r["type"] == "decision"]
    assert [d["rejected"] for d in decisions] == [
        "unknown_tool", "invalid_args", None, "duplicate", "malformed", None, "over_budget", None]
    assert [r["status"] for r in records if r["type"] == "receipt"] == ["ok", "error"]
    assert summary["outcome"] == "final" and summary["status"] == "ok"
    assert summary["loop"]["rejections"] == {"duplicate": 1, "invalid_args": 1, "malformed": 1, "over_budget": 1,
                                             "unknown_tool": 1}
    assert summary["loop"]["tool_calls"] == 2 and summary["loop"]["iterations"] == 8
    # a tool outside the allowlist is never named to the model
    assert "pay" not in json.dumps(provider.requests[0].messages)
    assert "'pay' is not one of the tools" in json.dumps(provider.requests[1].messages)


@pytest.mark.parametrize("script, budget, outcome, status", [
    ([CALL_ECHO, '{"action": "call", "tool": "echo", "args": {"x": 2}, "reason": "more"}'],
     "{max_iterations: 2, max_tokens: 100000, max_tool_calls: 5, timeout_s: 30}", "max_iterations", "failed"),
    ([(CALL_ECHO, 15, 10)], "{max_iterations: 5, max_tokens: 20, max_tool_calls: 5, timeout_s: 30}",
     "budget_exceeded", "failed"),
    (['{"action": "abort", "reason": "cannot"}'], None, "aborted", "failed"),
    (["no", "still no", "{}"], None, "malformed_output", "failed"),
    (['{"action": "call", "tool": "nope", "args": {}, "reason": "a"}'] * 2, None, "duplicate_action", "failed"),
    ([FINAL, '{"answer": "one"}', "not json"], None, "parse_error", "failed"),
    ([FINAL, '{"answer": "one"}', ANSWER], None, "final", "ok"),
    ([ProviderError("client", "bad key", status=401)], None, "provider_error", "failed"),
])
def test_every_outcome(tmp_path, script, budget, outcome, status):
    provider = scripted(*script)
    records, summary = run_scripted(tmp_path, provider, budget=budget)
    assert (summary["outcome"], summary["status"]) == (outcome, status)
    assert provider.replies == []  # every scripted reply was asked for, and no more
    if outcome == "budget_exceeded":  # the over-budget reply's decision is recorded, never executed
        assert kinds(records) == [("decision", None), ("summary", "failed")]
    assert not provider.closed  # an instance the run was given stays open: it is the caller's


def test_rate_limits_and_server_errors_are_retried_honouring_retry_after(tmp_path, model_server):
    model_server.script(Reply("slow down", status=429, retry_after="0"), Reply("oops", status=503),
                        Reply(FINAL, 1, 1), Reply(ANSWER, 1, 1))
    _records, summary = run(tmp_path, plan_file(tmp_path, model_server))
    assert summary["outcome"] == "final"
    assert len(model_server.requests) == 4 and summary["loop"]["model_calls"] == 2


def test_the_deadline_ends_a_loop_waiting_on_the_model(tmp_path, model_server):
    import threading

    held = threading.Event()  # never set: the server holds the reply until it stops
    model_server.script(CALL_ECHO, Reply(FINAL, hold=held))
    records, summary = run(tmp_path, plan_file(
        tmp_path, model_server, budget="{max_iterations: 5, max_tokens: 1000, max_tool_calls: 5, timeout_s: 1}"))
    assert summary["outcome"] == "timeout" and summary["status"] == "failed"
    assert kinds(records)[:2] == [("decision", None), ("receipt", "ok")]


def test_cost_is_charged_from_prices_and_ends_the_loop(tmp_path):
    provider = scripted((CALL_ECHO, 1_000_000, 0), (FINAL, 1_000_000, 0))
    price = ", price: {input_per_mtok: 0.5, output_per_mtok: 2.0}"
    budget = "{max_iterations: 5, max_tokens: 100000000, max_tool_calls: 5, timeout_s: 30, max_cost_usd: 0.75}"
    _records, summary = run_scripted(tmp_path, provider, budget=budget, price=price)
    assert summary["outcome"] == "budget_exceeded"
    assert summary["loop"]["cost_usd"] == pytest.approx(1.0)
    assert summary["overshoot"] == {"tokens": 0, "cost_usd": pytest.approx(0.25)}  # the reply that crossed 0.75
    assert provider.replies == []


def test_the_anthropic_protocol_drives_the_same_loop(tmp_path, model_server):
    model_server.script(Reply(CALL_ECHO, 9, 3), Reply(FINAL, 9, 3), Reply(ANSWER, 9, 3))
    records, summary = run(tmp_path, plan_file(tmp_path, model_server, provider="anthropic"))
    assert summary["outcome"] == "final" and summary["loop"]["tokens"] == {"input": 27, "output": 9}
    assert all(r.path == "/v1/messages" and r.headers.get("x-api-key") == KEY for r in model_server.requests)


def test_outcomes_and_routes_reach_the_summary(tmp_path):
    extra = "outcomes: [done, escalate]\n        routes: {done: reply, escalate: humans, max_iterations: humans}"
    provider = scripted(FINAL, '{"answer": 2, "outcome": "escalate"}')
    _records, summary = run_scripted(tmp_path, provider, extra=extra)
    assert summary["final"] == {"answer": 2, "outcome": "escalate"} and summary["route"] == "humans"


def test_the_key_appears_in_no_output_and_nowhere_in_the_state_folder(tmp_path, model_server, cli):
    path = plan_file(tmp_path, model_server)
    model_server.script(Reply(CALL_ECHO), Reply("error " + KEY, status=500), Reply(FINAL), Reply(ANSWER))
    proc = cli("run", path, "--audit", "audit.jsonl", env={"TL_TEST_KEY": KEY})
    assert proc.returncode == 0, proc.stderr.decode()
    assert KEY.encode() not in proc.stdout + proc.stderr
    for root, _dirs, files in os.walk(tmp_path):
        for name in files:
            if name.endswith((".db", ".db-wal", ".db-shm", ".jsonl")):
                with open(os.path.join(root, name), "rb") as fh:
                    assert KEY.encode() not in fh.read(), name
