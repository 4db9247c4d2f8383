"""Per-call cost of each worker kind against a bare baseline in the same run, and how long after
the deadline a process-isolated timeout produces its receipt.

Each engine figure is one governed call (``execute_call``: limits, timeout, retry policy,
output gate, redaction, receipt) of a no-op callable, one after the other; each baseline is the
bare mechanism the worker is built on, called the same number of times:

  async    ``await fn()`` on the trio loop
  thread   ``trio.to_thread.run_sync(fn)``
  process  a round trip to a warm child that reads length-prefixed pickles on a pipe, calls
           ``fn`` and writes the reply (what a warm worker is, without the engine);
           also ``trio.run_process`` of a fresh interpreter per call, for scale

Overshoot: a process-isolated call that sleeps far past its timeout, on a warm worker; the
overshoot is the time from the deadline to the receipt (TERM, reaping, receipt), for a
callable that dies on SIGTERM and for one that ignores it (TERM, the grace period, KILL).

Usage: python bench/bench_workers.py [--calls 3000] [--process-calls 500] [--rounds 5] [--timeouts 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from toolloop_cli.contract.registry import load_registry  # noqa: E402
from toolloop_cli.engine.call import RunContext, execute_call  # noqa: E402
from toolloop_cli.engine.procpool import TERM_GRACE_S  # noqa: E402

APP = textwrap.dedent(
    """
    import signal, time

    def noop():
        return {}

    async def noop_async():
        return {}

    def sleeper(seconds, ignore_term=False):
        if ignore_term:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(seconds)
        return {}
    """
)

CHILD = textwrap.dedent(
    """
    import os, pickle, struct, sys
    sys.path.insert(0, sys.argv[1])
    from benchapp import noop
    H = struct.Struct("!Q")
    def read(n):
        b = b""
        while len(b) < n:
            c = os.read(0, n - len(b))
            if not c:
                sys.exit(0)
            b += c
        return b
    while True:
        (n,) = H.unpack(read(H.size))
        pickle.loads(read(n))
        out = pickle.dumps(("ok", noop()))
        os.write(1, H.pack(len(out)) + out)
    """
)


def registry(folder: Path) -> Path:
    (folder / "benchapp.py").write_text(APP)
    tool = lambda fn, **kw: {"callable": f"benchapp:{fn}", "description": fn, "input_schema": {},  # noqa: E731
                              "output_schema": {}, **kw}
    body = {"version": 1, "subagents": {"b": {"runner_defaults": {"tool_timeout_s": 30}, "tools": {
        "async": tool("noop_async"),
        "thread": tool("noop"),
        "process": tool("noop", isolation="process"),
        "sleeper": tool("sleeper", isolation="process", timeout_s=0.2),
    }}}}
    path = folder / "registry.yml"
    path.write_text(json.dumps(body))
    return path


async def engine_calls(ctx: RunContext, tool_id: str, n: int, args: dict | None = None) -> float:
    tool = ctx.contract.subagents["b"].tools[tool_id]
    t0 = time.perf_counter()
    for i in range(n):
        receipt, _, _ = await execute_call(ctx, tool, args or {}, seq=i, item_key=None, call_key=None)
        assert receipt.status == "ok", receipt
    return (time.perf_counter() - t0) / n


async def bare_async(n: int) -> float:
    from benchapp import noop_async  # type: ignore[import-not-found]

    t0 = time.perf_counter()
    for _ in range(n):
        await noop_async()
    return (time.perf_counter() - t0) / n


async def bare_thread(n: int) -> float:
    from benchapp import noop  # type: ignore[import-not-found]

    t0 = time.perf_counter()
    for _ in range(n):
        await trio.to_thread.run_sync(noop)
    return (time.perf_counter() - t0) / n


async def bare_process(n: int, folder: Path) -> float:
    import pickle
    import struct

    header = struct.Struct("!Q")
    proc = await trio.lowlevel.open_process([sys.executable, "-c", CHILD, str(folder)],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    buf = bytearray()

    async def read(k: int) -> bytes:
        while len(buf) < k:
            buf.extend(await proc.stdout.receive_some(65536))
        out = bytes(buf[:k])
        del buf[:k]
        return out

    async def round_trip() -> None:
        body = pickle.dumps(("benchapp:noop", str(folder), {}, None))
        await proc.stdin.send_all(header.pack(len(body)) + body)
        (k,) = header.unpack(await read(header.size))
        pickle.loads(await read(k))

    await round_trip()  # warm
    t0 = time.perf_counter()
    for _ in range(n):
        await round_trip()
    elapsed = (time.perf_counter() - t0) / n
    await proc.stdin.aclose()
    await proc.wait()
    return elapsed


async def bare_spawn(n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        await trio.run_process([sys.executable, "-S", "-c", "pass"])
    return (time.perf_counter() - t0) / n


async def overshoot(ctx: RunContext, n: int, ignore_term: bool) -> list[float]:
    sleeper = ctx.contract.subagents["b"].tools["sleeper"]
    out = []
    for i in range(n):
        await engine_calls(ctx, "process", 1)  # leaves a warm worker for the sleeper
        t0 = time.perf_counter()
        receipt, _, _ = await execute_call(ctx, sleeper, {"seconds": 60, "ignore_term": ignore_term},
                                           seq=i, item_key=None, call_key=None)
        assert receipt.status == "timeout" and not receipt.abandoned, receipt
        out.append(time.perf_counter() - t0 - sleeper.timeout_s)  # type: ignore[operator]
    return out


def us(seconds: float) -> str:
    return f"{seconds * 1e6:9.1f} µs"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:7.1f} ms"


async def main(args: argparse.Namespace, folder: Path) -> None:
    contract, problems = load_registry(registry(folder))
    assert contract is not None, problems
    ctx = RunContext("bench", contract)
    n, pn = args.calls, args.process_calls

    await engine_calls(ctx, "async", 200)  # warm both sides
    await engine_calls(ctx, "thread", 200)
    await engine_calls(ctx, "process", 5)  # start the warm worker

    async def paired(bare, engine) -> tuple[float, float]:
        # rounds alternate the two sides so drift on a busy machine hits both; medians reported
        b, e = [], []
        for _ in range(args.rounds):
            b.append(await bare())
            e.append(await engine())
        return statistics.median(b), statistics.median(e)

    rows = [
        ("async (trio)", *await paired(lambda: bare_async(n), lambda: engine_calls(ctx, "async", n))),
        ("thread", *await paired(lambda: bare_thread(n), lambda: engine_calls(ctx, "thread", n))),
        ("process (warm)", *await paired(lambda: bare_process(pn, folder), lambda: engine_calls(ctx, "process", pn))),
    ]
    p_eng = rows[2][2]
    spawn = await bare_spawn(args.spawns)

    print(f"per-call cost, sequential calls, median of {args.rounds} rounds ({n} async/thread, {pn} process per round)")
    print(f"  {'worker':<16}{'baseline':>13}{'toolloop':>13}{'overhead':>13}{'ratio':>8}")
    for name, bare, eng in rows:
        print(f"  {name:<16}{us(bare):>13}{us(eng):>13}{us(eng - bare):>13}{eng / bare:>7.1f}x")
    print(f"  for scale: trio.run_process of a fresh interpreter per call: {ms(spawn)} "
          f"({spawn / p_eng:.0f}x a warm process call)")

    for ignore_term, label in ((False, "dies on SIGTERM"), (True, f"ignores SIGTERM (grace {TERM_GRACE_S:g} s)")):
        shots = await overshoot(ctx, args.timeouts, ignore_term)
        print(f"process timeout overshoot, callable {label}, {args.timeouts} runs, timeout 0.2 s:")
        print(f"  median {ms(statistics.median(shots))}  max {ms(max(shots))}  "
              f"(receipt at {statistics.median(shots) / 0.2 + 1:.2f}x the timeout)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--process-calls", type=int, default=500)
    ap.add_argument("--spawns", type=int, default=20)
    ap.add_argument("--timeouts", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sys.path.insert(0, tmp)
        trio.run(main, ns, Path(tmp))
