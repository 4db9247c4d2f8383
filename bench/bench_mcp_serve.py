#!/usr/bin/env python3
"""Per-call overhead of ``toolloop mcp serve`` against the same tool behind the MCP SDK's own server.

Both servers run over standard input and output in a process of this same Python, on trio, and
are driven by the SDK's own client (``ClientSession`` over ``stdio_client``) from this process:

  toolloop   ``toolloop mcp serve REGISTRY --state-dir TMP``: the tool is a registered callable
             (``async def noop(): return {}``, input and output schemas); each call passes the
             schema gate and the approval gate, runs through the engine's call path and is
             journaled as a receipt before the answer goes back
  sdk        a low-level ``mcp.server.lowlevel.Server`` listing the same tool with the same
             schemas, whose handler awaits the same function and answers its result as
             ``structuredContent`` and JSON text

Calls are ``tools/call`` round trips made one after another (after a warm-up); each figure is the
median of --repeat rounds of --calls calls each, the two servers alternating round by round so
drift on a busy machine hits them alike. Two figures per side:

  CPU per call    the server process's own CPU time (user + system, from /proc/PID/stat) over
                  the timed calls, divided by their number: what serving a call costs, which
                  load on a shared machine does not swell (the headline ratio)
  wall per call   the client's wall time per round trip (the client's own work and the pipes
                  included, so both sides carry the same fixed cost)

Printed: each side's figures, the ratios toolloop / sdk, and the CPU toolloop adds per call.

Usage: python bench/bench_mcp_serve.py [--calls 300] [--repeat 5] [--warmup 30] [--sync]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

APP = textwrap.dedent(
    """
    async def noop():
        return {}

    def noop_sync():
        return {}
    """
)

REGISTRY = textwrap.dedent(
    """
    version: 1
    app_root: .
    subagents:
      bench:
        runner_defaults: {{tool_timeout_s: 30, allowed_tools: [noop]}}
        tools:
          noop:
            callable: benchapp:{fn}
            description: Does nothing.
            input_schema: {{type: object, additionalProperties: false, properties: {{}}}}
            output_schema: {{type: object}}
    """
)

SDK_SERVER = textwrap.dedent(
    """
    import sys, json, inspect
    sys.path.insert(0, sys.argv[1])
    import trio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
    import benchapp

    fn = getattr(benchapp, sys.argv[2])
    TOOL = types.Tool(name="noop", description="Does nothing.",
                      input_schema={"type": "object", "additionalProperties": False, "properties": {}},
                      output_schema={"type": "object"})

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=[TOOL])

    async def call_tool(ctx, params):
        value = fn(**(params.arguments or {}))
        if inspect.isawaitable(value):
            value = await value
        else:  # a sync callable runs in a worker thread, as toolloop runs it
            value = await trio.to_thread.run_sync(fn)
        return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(value))],
                                    structured_content=value)

    async def main():
        server = Server("sdk", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    trio.run(main)
    """
)


async def _round(params, calls: int, warmup: int) -> float:
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    import os

    with open(os.devnull, "w") as quiet:
        async with stdio_client(params, errlog=quiet) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for _ in range(warmup):
                    await session.call_tool("noop", {})
                pid = _child_pid()
                cpu0, t0 = _cpu_s(pid), time.perf_counter()
                for _ in range(calls):
                    result = await session.call_tool("noop", {})
                    assert not result.is_error, result
                wall, cpu = time.perf_counter() - t0, _cpu_s(pid) - cpu0
                return cpu / calls * 1000, wall / calls * 1000


def _child_pid() -> int:
    """The server: the one child process of this process (the client starts it)."""
    import os

    mine = os.getpid()
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == mine:
                children.append(int(entry))
    assert len(children) == 1, f"expected one server process, found {children}"
    return children[0]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (every thread of it)."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    import trio
    from mcp import StdioServerParameters

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--sync", action="store_true", help="a sync callable (a worker thread per call) instead of async")
    args = ap.parse_args()
    fn = "noop_sync" if args.sync else "noop"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "benchapp.py").write_text(APP)
        (root / "reg.yml").write_text(REGISTRY.format(fn=fn))
        (root / "sdk_server.py").write_text(SDK_SERVER)
        sides = {
            "toolloop": StdioServerParameters(command=sys.executable, cwd=tmp, args=[
                "-m", "toolloop_cli", "mcp", "serve", str(root / "reg.yml"), "--state-dir", str(root / "state")]),
            "sdk": StdioServerParameters(command=sys.executable, cwd=tmp, args=[str(root / "sdk_server.py"), tmp, fn]),
        }
        cpu: dict[str, list[float]] = {name: [] for name in sides}
        wall: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(args.repeat):
            for name, params in sides.items():
                c, w = trio.run(_round, params, args.calls, args.warmup)
                cpu[name].append(c)
                wall[name].append(w)
    tl_cpu, sdk_cpu = statistics.median(cpu["toolloop"]), statistics.median(cpu["sdk"])
    tl_wall, sdk_wall = statistics.median(wall["toolloop"]), statistics.median(wall["sdk"])
    kind = "sync (worker thread)" if args.sync else "async"
    print(f"tools/call, {kind} no-op tool, {args.calls} calls x {args.repeat} rounds (medians)")
    print("                       CPU ms/call   wall ms/call")
    print(f"  toolloop mcp serve   {tl_cpu:11.3f}   {tl_wall:12.3f}")
    print(f"  SDK's own server     {sdk_cpu:11.3f}   {sdk_wall:12.3f}")
    print(f"  ratio toolloop/sdk   {tl_cpu / sdk_cpu:11.2f}   {tl_wall / sdk_wall:12.2f}")
    print(f"  toolloop adds {tl_cpu - sdk_cpu:.3f} ms of CPU per call (schema and approval gates, receipt, journal)")


if __name__ == "__main__":
    main()
