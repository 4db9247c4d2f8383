"""What a sandbox costs per call: ``isolation: sandbox`` against ``isolation: process``, in the same run.

Both sides are governed calls (``execute_call``) of the same no-op callable, one after the other:

  warm   calls on a warm worker (the sandbox is made once per worker, so this is the pipe round
         trip plus the engine; it should match the plain worker)
  cold   the first call of a run: a worker started (under bwrap, or plain), the App's module
         imported in it, the call made, and at the end of the run the worker closed (for a
         sandbox: its namespace gone); each sample is a whole ``trio.run``

Rounds alternate the two sides so drift on a busy machine hits both; medians are reported, and
the ratio sandbox / process for each. ``--json`` prints one line with the figures last.

Usage: python bench/bench_sandbox.py [--calls 300] [--cold 10] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from toolloop_cli.contract.registry import load_registry  # noqa: E402
from toolloop_cli.contract.sandbox import availability  # noqa: E402
from toolloop_cli.engine.call import RunContext, execute_call  # noqa: E402

APP = textwrap.dedent(
    """
    def noop():
        return {}
    """
)


def registry(folder: Path) -> Path:
    (folder / "benchsandbox.py").write_text(APP)
    (folder / "out").mkdir(exist_ok=True)
    tool = {"callable": "benchsandbox:noop", "description": "noop", "input_schema": {}, "output_schema": {}}
    body = {"version": 1, "subagents": {"b": {"runner_defaults": {"tool_timeout_s": 60}, "tools": {
        "process": {**tool, "isolation": "process"},
        "sandbox": {**tool, "isolation": "sandbox", "sandbox": {"writable": ["out"]}},
    }}}}
    path = folder / "registry.yml"
    path.write_text(json.dumps(body))
    return path


async def calls(ctx: RunContext, tool_id: str, n: int) -> float:
    tool = ctx.contract.subagents["b"].tools[tool_id]
    t0 = time.perf_counter()
    for i in range(n):
        receipt, _, _ = await execute_call(ctx, tool, {}, seq=i, item_key=None, call_key=None)
        assert receipt.status == "ok", receipt
    return (time.perf_counter() - t0) / n


def cold(contract, tool_id: str) -> float:
    """One whole run of one call: worker start, import, call, close."""
    ctx = RunContext("bench-cold", contract)
    t0 = time.perf_counter()
    trio.run(calls, ctx, tool_id, 1)
    return time.perf_counter() - t0


def main(args: argparse.Namespace, folder: Path) -> dict:
    bwrap, why = availability()
    if bwrap is None:
        sys.exit(f"no sandbox can be made here: {why}")
    contract, problems = load_registry(registry(folder))
    assert contract is not None, problems

    async def warm() -> tuple[float, float]:
        ctx = RunContext("bench-warm", contract)
        await calls(ctx, "process", 5)  # start both warm workers
        await calls(ctx, "sandbox", 5)
        p, s = [], []
        for _ in range(args.rounds):
            p.append(await calls(ctx, "process", args.calls))
            s.append(await calls(ctx, "sandbox", args.calls))
        return statistics.median(p), statistics.median(s)

    warm_p, warm_s = trio.run(warm)
    cold(contract, "process")  # page cache warm for both
    cold(contract, "sandbox")
    cold_p, cold_s = [], []
    for _ in range(args.cold):
        cold_p.append(cold(contract, "process"))
        cold_s.append(cold(contract, "sandbox"))
    return {"warm_process_us": warm_p * 1e6, "warm_sandbox_us": warm_s * 1e6, "warm_ratio": warm_s / warm_p,
            "cold_process_ms": statistics.median(cold_p) * 1e3, "cold_sandbox_ms": statistics.median(cold_s) * 1e3,
            "cold_ratio": statistics.median(cold_s) / statistics.median(cold_p)}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300, help="warm calls per side and round")
    ap.add_argument("--cold", type=int, default=10, help="cold runs per side")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line, last")
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        got = main(ns, Path(tmp))
    print(f"per-call cost, sandbox against process, sequential no-op calls (median of {ns.rounds} rounds of {ns.calls})")
    print(f"  warm worker:  process {got['warm_process_us']:8.1f} µs   sandbox {got['warm_sandbox_us']:8.1f} µs"
          f"   ratio {got['warm_ratio']:.2f}x")
    print(f"  first call of a run (start, import, call, close; median of {ns.cold}):")
    print(f"                process {got['cold_process_ms']:8.1f} ms   sandbox {got['cold_sandbox_ms']:8.1f} ms"
          f"   ratio {got['cold_ratio']:.2f}x")
    if ns.json:
        print(json.dumps(got))
