"""Helpers for the MCP server's tests: a registry over the test App, and an in-process server run
driven by the SDK's own client over memory streams."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Awaitable, Callable

import trio

from conftest import APP

REGISTRY = """
version: 1
app_root: {app}
subagents:
  s:
    runner_defaults:
      tool_timeout_s: 10
      max_calls: 1
      allowed_tools: [echo, text, pay, wipe, boom, login, nap, capped, marker, printer, hold_write]
    tools:
      echo:
        callable: testapp.tools:echo
        description: Returns the arguments it got.
        input_schema: {{type: object, properties: {{n: {{type: integer}}}}}}
        output_schema: {{type: object, required: [received]}}
      text:
        callable: testapp.tools:big
        description: A string of n x.
        input_schema: {{type: object, required: [n], properties: {{n: {{type: integer}}}}}}
        output_schema: {{type: string}}
      pay:
        callable: testapp.tools:echo
        description: Needs a person's approval above 100.
        effect: write
        approval: {{when: "args.amount > 100"}}
        input_schema: {{type: object, required: [amount], properties: {{amount: {{type: integer}}}}}}
        output_schema: {{}}
      wipe:
        callable: testapp.tools:echo
        description: Wipes, twice as well as once.
        effect: destructive
        idempotent: true
        input_schema: {{}}
        output_schema: {{}}
      boom:
        callable: testapp.tools:boom
        description: Always raises.
        input_schema: {{type: object, properties: {{message: {{type: string}}}}}}
        output_schema: {{}}
      login:
        callable: testapp.tools:secret_echo
        description: Logs in.
        redact: [/password, /token]
        input_schema: {{type: object, required: [user, password], properties: {{user: {{type: string}}, password: {{type: string}}}}}}
        output_schema: {{type: object}}
      nap:
        callable: testapp.tools:sleep_async
        description: Sleeps on the event loop.
        input_schema: {{type: object, required: [seconds], properties: {{seconds: {{type: number}}}}}}
        output_schema: {{}}
      capped:
        callable: testapp.tools:echo
        description: Two calls per run.
        max_calls: 2
        input_schema: {{}}
        output_schema: {{}}
      marker:
        callable: testapp.tools:marker
        description: Writes a file.
        input_schema: {{type: object, additionalProperties: false, required: [path], properties: {{path: {{type: string}}}}}}
        output_schema: {{}}
      printer:
        callable: testapp.tools:printer
        description: Prints its text on standard output.
        input_schema: {{type: object, required: [text], properties: {{text: {{type: string}}}}}}
        output_schema: {{}}
      hold_write:
        callable: testapp.tools:log_run
        description: Logs its key, then holds (a write).
        effect: write
        input_schema: {{type: object, required: [log, key], properties: {{log: {{type: string}}, key: {{type: string}}, seconds: {{type: number}}}}}}
        output_schema: {{}}
"""


def write_registry(folder: Path, name: str = "reg.yml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(REGISTRY.format(app=APP)).lstrip(), encoding="utf-8")
    return path


class _Discard:
    def write(self, record: dict, line: bytes | None = None) -> None:
        pass

    def flush(self) -> None:
        pass


def serve_in_process(registry: Path, state: Path, scenario: Callable[[Any, Any], Awaitable[None]], *,
                     approve: str = "ask", max_calls: int | None = None, subagent: str | None = None) -> Any:
    """Run an MCP server's run in this process and drive it with the SDK's ``ClientSession`` over
    memory streams: ``scenario(session, runner)`` once initialized; the run ends when it returns.
    Returns the run's result (its summary)."""
    from mcp import ClientSession
    from mcp.shared.memory import create_client_server_memory_streams

    from toolloop_cli.engine.launch import Launch, RunOptions
    from toolloop_cli.mcpserve.runner import McpServerRunner

    holder: list[Any] = []

    async def transport(server: Any, stop: trio.Event) -> None:
        async with create_client_server_memory_streams() as (client, server_streams):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: server.run(*server_streams, server.create_initialization_options()))
                async with ClientSession(*client) as session:
                    await session.initialize()
                    await scenario(session, holder[0])
                nursery.cancel_scope.cancel()

    launch = Launch(state)
    prepared = launch.mcp_server(registry, subagent, RunOptions(approve=approve, order="completion"))
    runner = McpServerRunner(prepared.plan, transport, max_calls=max_calls,
                             approve_hint=f"toolloop approve --state-dir {state}")
    holder.append(runner)
    return launch.start(prepared, _Discard(), runner=runner, handle_signals=False)


def receipts(state: Path, run_id: str) -> list[dict]:
    """The run's receipts as ``runs show`` prints them, and its run record."""
    from toolloop_cli.runview import printed_records, run_record
    from toolloop_cli.store import Store

    store = Store(state, create=False)
    try:
        run = store.get_run(run_id)
        return [r for r in printed_records(store, run) if r["type"] == "receipt"], run_record(store, run)
    finally:
        store.close()


def pending(state: Path) -> list[dict]:
    """``approvals list``'s records."""
    from toolloop_cli.pending import pending_records
    from toolloop_cli.store import Store

    store = Store(state, create=False)
    try:
        return pending_records(store)
    finally:
        store.close()
