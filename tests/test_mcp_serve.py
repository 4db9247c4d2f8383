"""toolloop as a governed MCP server (``toolloop mcp serve``), driven by the MCP SDK's own client:
in process over memory streams for the governance, in subprocesses for the transports."""

from __future__ import annotations

import json

import pytest

from mcpserve_kit import pending, receipts, serve_in_process, write_registry

pytest.importorskip("mcp")


def _text(result) -> str:
    return "".join(c.text for c in result.content)


def test_tools_are_listed_with_schemas_and_annotations_from_the_contract(tmp_path):
    reg = write_registry(tmp_path)
    seen = {}

    async def scenario(session, _runner):
        await session.send_ping()
        for tool in (await session.list_tools()).tools:
            seen[tool.name] = tool.model_dump(by_alias=True, exclude_none=True)

    serve_in_process(reg, tmp_path / "state", scenario)
    assert list(seen) == ["echo", "text", "pay", "wipe", "boom", "login", "nap", "capped", "marker", "printer",
                          "hold_write"]
    echo = seen["echo"]
    assert echo["description"] == "Returns the arguments it got."
    assert echo["inputSchema"] == {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert echo["outputSchema"] == {"type": "object", "required": ["received"]}
    # all three hints, always, from effect and idempotent
    assert echo["annotations"] == {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": False}
    assert seen["pay"]["annotations"] == {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False}
    assert seen["wipe"]["annotations"] == {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True}
    # an open output schema, or results that are not objects: no outputSchema
    assert "outputSchema" not in seen["text"] and "outputSchema" not in seen["boom"]
    assert seen["wipe"]["inputSchema"] == {"type": "object"}  # open input: MCP's object schema


def test_every_call_is_a_receipt_of_one_mcp_run_and_results_come_back_as_mcp_results(tmp_path):
    reg = write_registry(tmp_path)
    got = {}

    async def scenario(session, _runner):
        got["object"] = await session.call_tool("echo", {"n": 1})
        got["string"] = await session.call_tool("text", {"n": 3})
        got["error"] = await session.call_tool("boom", {"message": "it broke"})

    result = serve_in_process(reg, tmp_path / "state", scenario)
    obj, string, error = got["object"], got["string"], got["error"]
    assert not obj.is_error and obj.structured_content == {"received": {"n": 1}}
    assert json.loads(_text(obj)) == {"received": {"n": 1}}
    assert not string.is_error and string.structured_content is None and json.loads(_text(string)) == "xxx"
    assert error.is_error and _text(error) == "error: it broke"
    summary = result.summary
    assert summary["mode"] == "mcp" and summary["status"] == "failed"
    assert summary["counts"]["ok"] == 2 and summary["counts"]["error"] == 1
    shown, run = receipts(tmp_path / "state", summary["run_id"])
    assert run["mode"] == "mcp" and run["calls"] == 3
    assert [(r["call_key"], r["seq"], r["tool"], r["status"]) for r in shown] == [
        ("0", 0, "echo", "ok"), ("1", 1, "text", "ok"), ("2", 2, "boom", "error")]


def test_a_server_whose_calls_were_all_ok_ends_ok(tmp_path):
    reg = write_registry(tmp_path)

    async def scenario(session, _runner):
        assert not (await session.call_tool("echo", {})).is_error

    assert serve_in_process(reg, tmp_path / "state", scenario).summary["status"] == "ok"


def test_arguments_failing_the_input_schema_get_an_error_result_and_nothing_runs(tmp_path):
    reg = write_registry(tmp_path)
    target = tmp_path / "ran.txt"
    got = {}

    async def scenario(session, _runner):
        got["bad"] = await session.call_tool("marker", {"path": str(target), "extra": 1})

    result = serve_in_process(reg, tmp_path / "state", scenario)
    assert got["bad"].is_error and _text(got["bad"]).startswith("invalid_input: the arguments fail the input schema")
    assert not target.exists()
    assert result.summary["counts"]["invalid_input"] == 1


def test_results_are_redacted_as_on_standard_output(tmp_path):
    reg = write_registry(tmp_path)
    got = {}

    async def scenario(session, _runner):
        got["ok"] = await session.call_tool("login", {"user": "ann", "password": "hunter2-secret"})

    result = serve_in_process(reg, tmp_path / "state", scenario)
    assert got["ok"].structured_content == {"user": "ann", "token": "[REDACTED]"}
    assert "hunter2" not in _text(got["ok"])
    shown, _run = receipts(tmp_path / "state", result.summary["run_id"])
    assert shown[0]["args"] == {"user": "ann", "password": "[REDACTED]"}
    for name in ("state.db", "state.db-wal"):
        path = tmp_path / "state" / name
        assert not path.exists() or b"hunter2-secret" not in path.read_bytes()


def test_max_calls_caps_the_calls_a_server_runs_and_runner_defaults_max_calls_does_not_apply(tmp_path):
    # the registry's runner_defaults.max_calls is 1: a server is not held to it
    reg = write_registry(tmp_path)
    got = []

    async def scenario(session, _runner):
        for n in range(3):
            got.append(await session.call_tool("echo", {"n": n}))

    result = serve_in_process(reg, tmp_path / "state", scenario, max_calls=2)
    assert [r.is_error for r in got] == [False, False, True]
    assert "call budget spent" in _text(got[2])
    assert result.summary["counts"]["budget_exceeded"] == 1


def test_a_tools_own_max_calls_holds_per_server_process(tmp_path):
    reg = write_registry(tmp_path)
    got = []

    async def scenario(session, _runner):
        for n in range(3):
            got.append(await session.call_tool("capped", {"n": n}))

    serve_in_process(reg, tmp_path / "state", scenario)
    assert [r.is_error for r in got] == [False, False, True]
    assert "max_calls (2)" in _text(got[2])


async def _toolloop(*args: str):
    import os
    import sys

    import trio

    env = {**os.environ, "NO_COLOR": "1"}
    return await trio.run_process([sys.executable, "-m", "toolloop_cli", *args], capture_stdout=True,
                                  capture_stderr=True, check=False, env=env)


def test_a_gated_call_waits_for_a_person_and_the_next_identical_call_runs_once_approved(tmp_path):
    reg = write_registry(tmp_path)
    state = tmp_path / "state"
    got: dict = {}

    async def scenario(session, runner):
        run_id = runner.run.run_id
        got["first"] = await session.call_tool("pay", {"amount": 500})
        got["pending"] = pending(state)
        got["other"] = await session.call_tool("echo", {})  # takes the next key; the request keeps its own
        got["again"] = await session.call_tool("pay", {"amount": 500})  # not answered yet: still waiting
        answered = await _toolloop("approve", "--state-dir", str(state), run_id, "0", "--approve", "--approver", "alice")
        assert answered.returncode == 0, answered.stderr
        got["approved"] = await session.call_tool("pay", {"amount": 500})
        got["fresh"] = await session.call_tool("pay", {"amount": 500})  # the approval was used once

    result = serve_in_process(reg, state, scenario, max_calls=3)
    run_id = result.summary["run_id"]
    first = _text(got["first"])
    assert got["first"].is_error and first.startswith("approval required: tool 'pay' needs approval")
    assert f"toolloop approve --state-dir {state} {run_id} 0 --approve" in first
    [request] = got["pending"]
    assert (request["run_id"], request["call_key"], request["tool"], request["effect"], request["args"]) == (
        run_id, "0", "pay", "write", {"amount": 500})
    assert not got["other"].is_error
    assert got["again"].is_error and " 0 --approve" in _text(got["again"])
    assert not got["approved"].is_error and got["approved"].structured_content == {"received": {"amount": 500}}
    # --max-calls 3: the waiting call counted only when it ran, so the fresh one is filed (not refused)
    assert got["fresh"].is_error and f"{run_id} 2 --approve" in _text(got["fresh"])
    shown, _run = receipts(state, run_id)
    by_key = {r["call_key"]: r for r in shown}
    assert sorted(by_key) == ["0", "1"]  # a call still waiting has no receipt
    assert by_key["0"]["status"] == "ok" and by_key["0"]["approval"]["decision"] == "approved"
    assert by_key["0"]["approval"]["by"] == "alice"


def test_a_rejected_call_gets_the_approvers_message(tmp_path):
    reg = write_registry(tmp_path)
    state = tmp_path / "state"
    got: dict = {}

    async def scenario(session, runner):
        await session.call_tool("pay", {"amount": 900})
        answered = await _toolloop("approve", "--state-dir", str(state), runner.run.run_id, "0", "--reject",
                                   "--message", "not this month")
        assert answered.returncode == 0, answered.stderr
        got["denied"] = await session.call_tool("pay", {"amount": 900})

    result = serve_in_process(reg, state, scenario)
    assert got["denied"].is_error and _text(got["denied"]).startswith("denied: ")
    assert "not this month" in _text(got["denied"])
    shown, _run = receipts(state, result.summary["run_id"])
    assert [(r["call_key"], r["status"], r["approval"]["decision"]) for r in shown] == [("0", "denied", "rejected")]


@pytest.mark.parametrize("approve, status, decision", [("all", "ok", "approved"), ("none", "denied", "rejected")])
def test_approve_all_runs_gated_calls_and_none_refuses_them(tmp_path, approve, status, decision):
    reg = write_registry(tmp_path)
    got: dict = {}

    async def scenario(session, _runner):
        got["call"] = await session.call_tool("pay", {"amount": 500})
        got["ungated"] = await session.call_tool("pay", {"amount": 5})

    result = serve_in_process(reg, tmp_path / "state", scenario, approve=approve)
    assert got["call"].is_error is (status != "ok") and not got["ungated"].is_error
    shown, _run = receipts(tmp_path / "state", result.summary["run_id"])
    assert (shown[0]["status"], shown[0]["approval"]["decision"], shown[0]["approval"]["by"]) == (status, decision, "flag")
    assert shown[1]["approval"] is None


def test_a_stop_cancels_the_calls_in_flight_and_settles_them_before_the_summary(tmp_path):
    import trio
    import trio.testing

    reg = write_registry(tmp_path)

    async def scenario(session, runner):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.call_tool, "nap", {"seconds": 60})
            await trio.testing.wait_all_tasks_blocked()
            assert runner.in_flight == 1
            runner.run.state.interrupt()  # what SIGINT or SIGTERM does to the run

    result = serve_in_process(reg, tmp_path / "state", scenario)
    assert result.summary["status"] == "failed" and result.summary["counts"]["cancelled"] == 1
    shown, _run = receipts(tmp_path / "state", result.summary["run_id"])
    assert [(r["tool"], r["status"]) for r in shown] == [("nap", "cancelled")]


def test_a_servers_run_is_not_resumed_and_the_web_page_offers_no_resume(tmp_path, cli):
    reg = write_registry(tmp_path)
    state = tmp_path / "state"

    async def scenario(session, _runner):
        await session.call_tool("boom", {})

    run_id = serve_in_process(reg, state, scenario).summary["run_id"]
    resumed = cli("resume", run_id, "--state-dir", str(state))
    assert resumed.returncode == 2 and b"run of an MCP server" in resumed.stderr, resumed.stderr
    _shown, run = receipts(state, run_id)
    assert run["status"] == "failed" and run["calls"] == 1  # its summary is left as it was
    from toolloop_cli.serve.journal import Journal

    journal = Journal(state, log=lambda _line: None)
    try:
        assert "run of an MCP server" in journal.resume_refusal(run_id)
    finally:
        journal.close()


def test_the_web_inbox_answers_a_clients_gated_call_with_an_edit(tmp_path):
    from toolloop_cli.serve.journal import Journal

    reg = write_registry(tmp_path)
    state = tmp_path / "state"
    got: dict = {}

    async def scenario(session, runner):
        await session.call_tool("pay", {"amount": 500})
        journal = Journal(state, log=lambda _line: None)
        try:
            got["inbox"] = journal.approvals()
            journal.answer(runner.run.run_id, None, "0", {"decision": "approve", "args": {"amount": 150}}, "bob")
        finally:
            journal.close()
        got["ran"] = await session.call_tool("pay", {"amount": 500})

    result = serve_in_process(reg, state, scenario)
    [request] = got["inbox"]
    assert (request["tool"], request["call_key"], request["args"]) == ("pay", "0", {"amount": 500})
    assert got["ran"].structured_content == {"received": {"amount": 150}}  # the approver's arguments
    shown, _run = receipts(state, result.summary["run_id"])
    assert [(r["call_key"], r["status"], r["approval"]["decision"], r["approval"]["by"]) for r in shown] == [
        ("0", "ok", "edited", "bob")]


@pytest.mark.parametrize("headers, refused", [
    ({"host": "127.0.0.1:8766"}, None),
    ({"host": "localhost:8766", "origin": "http://localhost:3000"}, None),
    ({"host": "[::1]:8766"}, None),
    ({"host": "evil.example:8766"}, 403),
    ({}, 403),
    ({"host": "127.0.0.1:8766", "origin": "http://evil.example"}, 403),
    ({"host": "127.0.0.1:8766", "origin": "null"}, 403),
])
def test_on_loopback_host_and_origin_must_be_loopback_names(headers, refused):
    from toolloop_cli.mcpserve.guard import Guard

    got = Guard("127.0.0.1", 8766, None).refusal(headers)
    assert (got[0] if got else None) == refused


@pytest.mark.parametrize("headers, refused", [
    ({"host": "10.1.2.3:8766", "authorization": "Bearer t0k"}, None),
    ({"host": "10.1.2.3:8766", "origin": "http://10.1.2.3:8766", "authorization": "Bearer t0k"}, None),
    ({"host": "10.1.2.3:8766", "origin": "http://10.1.2.3:9999", "authorization": "Bearer t0k"}, 403),
    ({"host": "127.0.0.1:8766", "authorization": "Bearer t0k"}, 403),
    ({"host": "10.1.2.3:8766"}, 401),
    ({"host": "10.1.2.3:8766", "authorization": "Bearer nope"}, 401),
])
def test_off_loopback_host_must_name_the_host_and_origin_be_the_same_origin(headers, refused):
    from toolloop_cli.mcpserve.guard import Guard

    got = Guard("10.1.2.3", 8766, "t0k").refusal(headers)
    assert (got[0] if got else None) == refused


def test_the_server_token_is_the_chosen_one_or_a_new_one_each_start():
    from toolloop_cli.mcpserve.guard import server_token

    assert server_token({"TOOLLOOP_MCP_TOKEN": "chosen"}) == ("chosen", False)
    first, generated = server_token({})
    assert generated and len(first) >= 32 and server_token({})[0] != first


def test_a_call_the_client_cancels_gets_a_cancelled_receipt(tmp_path):
    import trio
    import trio.testing

    reg = write_registry(tmp_path)

    async def scenario(session, runner):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.call_tool, "nap", {"seconds": 60})
            await trio.testing.wait_all_tasks_blocked()
            assert runner.in_flight == 1
            nursery.cancel_scope.cancel()  # the client gives up on the request
        with trio.fail_after(30):
            while runner.in_flight:
                await trio.testing.wait_all_tasks_blocked()
                await trio.sleep(0.01)

    result = serve_in_process(reg, tmp_path / "state", scenario)
    shown, _run = receipts(tmp_path / "state", result.summary["run_id"])
    assert [(r["tool"], r["status"], r["error"]["message"]) for r in shown] == [
        ("nap", "cancelled", "cancelled by the client (it cancelled the request or went away)")]




@pytest.fixture
def yielding_gate(monkeypatch):
    """The gate answers once all five calls are in it, as a gate that waits for a person or a
    database may: a max_calls check made before the gate is then stale when each call starts."""
    import trio

    from toolloop_cli.mcpserve import runner as served

    real = served.check_call
    inside = [0]
    all_in = trio.Event()

    async def gate(*args, **kwargs):
        inside[0] += 1
        if inside[0] == 5:
            all_in.set()
        await all_in.wait()
        return await real(*args, **kwargs)

    monkeypatch.setattr(served, "check_call", gate)


def test_a_tools_own_max_calls_holds_for_calls_that_arrive_together(tmp_path, yielding_gate):
    import trio

    reg = write_registry(tmp_path)
    got = []

    async def scenario(session, _runner):
        async def one(n):
            got.append(await session.call_tool("capped", {"n": n}))

        async with trio.open_nursery() as nursery:  # five calls in flight at once; capped allows two
            for n in range(5):
                nursery.start_soon(one, n)

    result = serve_in_process(reg, tmp_path / "state", scenario)
    assert sorted(r.is_error for r in got) == [False, False, True, True, True]
    assert sum("max_calls (2)" in _text(r) for r in got) == 3
    shown, _run = receipts(tmp_path / "state", result.summary["run_id"])
    assert sorted(r["status"] for r in shown) == ["budget_exceeded"] * 3 + ["ok"] * 2


def test_max_calls_caps_calls_that_arrive_together(tmp_path, yielding_gate):
    import trio

    reg = write_registry(tmp_path)
    got = []

    async def scenario(session, _runner):
        async def one(n):
            got.append(await session.call_tool("echo", {"n": n}))

        async with trio.open_nursery() as nursery:
            for n in range(5):
                nursery.start_soon(one, n)

    result = serve_in_process(reg, tmp_path / "state", scenario, max_calls=2)
    assert sorted(r.is_error for r in got) == [False, False, True, True, True]
    assert result.summary["counts"]["ok"] == 2 and result.summary["counts"]["budget_exceeded"] == 3


def test_a_request_still_waiting_when_the_server_stops_expires_and_runs_list_counts_calls_as_they_come(tmp_path):
    reg = write_registry(tmp_path)
    state = tmp_path / "state"
    got: dict = {}

    async def scenario(session, runner):
        await session.call_tool("echo", {"n": 1})
        got["waiting"] = await session.call_tool("pay", {"amount": 500})  # filed under key 1; nobody answers
        await session.call_tool("echo", {"n": 2})
        listed = await _toolloop("runs", "list", "--state-dir", str(state), "--format", "jsonl")
        got["listed"] = [json.loads(line) for line in listed.stdout.decode().splitlines()]
        got["pending"] = pending(state)

    result = serve_in_process(reg, state, scenario)
    run_id = result.summary["run_id"]
    assert got["waiting"].is_error and [p["call_key"] for p in got["pending"]] == ["1"]
    (row,) = got["listed"]
    assert row["run_id"] == run_id and row["status"] == "running" and row["calls"] == 3  # while it runs
    assert pending(state) == []  # the server stopped: the request is gone from approvals list
    import subprocess
    import sys

    answered = subprocess.run([sys.executable, "-m", "toolloop_cli", "approve", "--state-dir", str(state), run_id, "1",
                               "--approve"], capture_output=True, timeout=120)
    assert answered.returncode == 1
    assert (f"the request of call '1' in run {run_id} is gone: the MCP server stopped before anyone answered"
            in answered.stderr.decode())
    from toolloop_cli.serve.journal import Journal, Refused

    journal = Journal(state)
    try:
        with pytest.raises(Refused) as gone:  # the inbox's answer is told the same
            journal.answer(run_id, None, "1", {"decision": "approve"}, "ann")
    finally:
        journal.close()
    assert gone.value.status == 410 and "is gone: the MCP server stopped" in gone.value.message
