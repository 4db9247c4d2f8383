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
    assert list(seen) == ["echo", "text", "pay", "wipe", "boom", "login", "nap", "capped", "marker"]
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
