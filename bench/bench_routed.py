#!/usr/bin/env python3
"""The routed loop's own time per turn, against a bare loop written directly with httpx, side by side.

Both drive the same scripted model server (bench/loopback.py, in a process of its own so its
work is counted against neither) through N turns: N-1 calls of a no-op sync tool, a final
decision and the final answer (N+1 requests each):

- toolloop: a routed plan run in this process (``execute_plan``, admission aside), with the
  journal, receipts, redaction, budgets and the JSON Lines records (written to /dev/null);
- bare: an httpx client posting the same requests, parsing each reply as a decision, calling the
  tool function directly and appending its result to the messages.

A side's CPU time is ``time.process_time()`` around the run (every thread of this process: the
journal's too); wall time is ``perf_counter``. The two sides alternate, round by round. toolloop's
*own* time is its time minus the bare loop's in the same round, and its own time *per turn at N*
is the extra cost of the turns past a 2-turn run, so the fixed cost of a run (opening it,
closing it) cancels out and what is left is what a turn costs, averaged over turns 3..N:

    own(N) = (toolloop(N) - bare(N)) - (toolloop(2) - bare(2)),  per turn: own(N) / (N - 2)

The median over rounds is reported, in CPU time (the figure) and in wall time. The growth of a
turn's cost with history is own per turn at the largest N over the smallest N above 2.

Usage: python bench/bench_routed.py [--turns 20 100 300] [--repeat 5] [--json]
       python bench/bench_routed.py --one toolloop|bare --turns N   (one run, unmeasured: what
       ``ab_routed.py --instructions`` counts under callgrind)
       python bench/bench_routed.py --by-thread --turns N [--repeat 3]   (toolloop's CPU per turn by
       thread: the loop's, the journal's, the output's, the rest; and the bare loop's beside it)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from loopback import Loopback  # noqa: E402

BASE_TURNS = 2

REGISTRY = """
version: 1
app_root: {app}
subagents:
  b:
    runner_defaults: {{tool_timeout_s: 10, max_calls: 100000}}
    tools:
      noop:
        callable: testapp.tools:echo
        description: Returns its arguments.
        input_schema: {{type: object}}
        output_schema: {{}}
"""

PLAN = """
version: 1
registry: reg.yml
subagent: b
mode: routed
goal: Call noop as often as told, then finish.
router_profile: {{provider: openai, model: m, base_url: '{base}', api_key_env: BENCH_KEY}}
final_profile: {{provider: openai, model: m, base_url: '{base}', api_key_env: BENCH_KEY}}
budget: {{max_iterations: {turns}, max_tokens: 100000000, max_tool_calls: {turns}, timeout_s: 3600}}
final_schema: {{type: object, required: [answer]}}
"""


def write_files(folder: Path, base: str, turns: list[int]) -> None:
    (folder / "reg.yml").write_text(REGISTRY.format(app=ROOT / "tests" / "app"))
    for n in turns:
        (folder / f"plan{n}.yml").write_text(PLAN.format(base=base, turns=n))


def toolloop_run(server: Loopback, folder: Path, turns: int, out) -> tuple[float, float]:
    """(wall, cpu) seconds of one routed run of ``turns`` turns, admission aside."""
    import orjson

    from toolloop_cli.engine.run import RunOptions, execute_plan
    from toolloop_cli.plan.admit import admit_plan
    from toolloop_cli.store import Store

    plan = admit_plan(folder / f"plan{turns}.yml")
    store = Store(folder / f"state-{time.monotonic_ns()}")

    def emit(record: dict) -> None:
        out.write(orjson.dumps(record) + b"\n")

    server.script("text", turns)
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        result = execute_plan(plan, store, emit, RunOptions(handle_signals=False))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        store.close()
    if result.summary["outcome"] != "final":
        raise SystemExit(f"toolloop's routed run did not end final: {result.summary}")
    server.check("text", turns, "toolloop")
    return wall, cpu


def bare_run(server: Loopback, turns: int) -> tuple[float, float]:
    import httpx

    sys.path.insert(0, str(ROOT / "tests" / "app"))
    from testapp.tools import echo

    server.script("text", turns)
    messages = [{"role": "system", "content": "You pick tools."}, {"role": "user", "content": "Go."}]
    t0, c0 = time.perf_counter(), time.process_time()
    with httpx.Client(base_url=server.base, headers={"Authorization": "Bearer k"}) as client:
        for _ in range(turns + 1):
            reply = client.post("/chat/completions", json={"model": "m", "messages": messages,
                                                            "response_format": {"type": "json_object"}})
            decision = json.loads(reply.json()["choices"][0]["message"]["content"])
            if decision.get("action") == "call":
                result = echo(**decision["args"])
                messages.append({"role": "user", "content": json.dumps(result)})
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    server.check("text", turns, "bare httpx loop")
    return wall, cpu


def measure(turns: list[int], repeat: int) -> dict:
    """Per N: medians over rounds of both sides and of toolloop's own time per turn (ms)."""
    os.environ["BENCH_KEY"] = "bench-key"
    sizes = sorted({BASE_TURNS, *turns})
    rounds: list[dict[int, dict[str, tuple[float, float]]]] = []
    with Loopback() as server, tempfile.TemporaryDirectory() as tmp, open(os.devnull, "wb") as out:
        folder = Path(tmp)
        write_files(folder, server.base, sizes)
        toolloop_run(server, folder, BASE_TURNS, out)  # warm: imports, the App module
        bare_run(server, BASE_TURNS)
        for _ in range(repeat):
            got = {}
            for n in sizes:
                got[n] = {"toolloop": toolloop_run(server, folder, n, out), "bare": bare_run(server, n)}
            rounds.append(got)
    result: dict = {"repeat": repeat, "base_turns": BASE_TURNS, "turns": {}}
    for n in sizes:
        row: dict = {}
        for i, what in ((0, "wall"), (1, "cpu")):
            row[f"toolloop_{what}_ms"] = statistics.median(r[n]["toolloop"][i] for r in rounds) * 1000
            row[f"bare_{what}_ms"] = statistics.median(r[n]["bare"][i] for r in rounds) * 1000
            # whole run, fixed cost included, per turn
            row[f"own_{what}_avg_ms"] = statistics.median(
                (r[n]["toolloop"][i] - r[n]["bare"][i]) / n for r in rounds) * 1000
            if n > BASE_TURNS:
                row[f"own_{what}_ms"] = statistics.median(
                    ((r[n]["toolloop"][i] - r[n]["bare"][i]) - (r[BASE_TURNS]["toolloop"][i] - r[BASE_TURNS]["bare"][i]))
                    / (n - BASE_TURNS) for r in rounds) * 1000
        result["turns"][n] = row
    big = [n for n in sizes if n > BASE_TURNS]
    if len(big) >= 2:
        lo, hi = result["turns"][big[0]], result["turns"][big[-1]]
        result["growth"] = {"from": big[0], "to": big[-1], "cpu": hi["own_cpu_ms"] / lo["own_cpu_ms"],
                            "wall": hi["own_wall_ms"] / lo["own_wall_ms"]}
    return result


def one_run(side: str, turns: int) -> None:
    """One run of one side, nothing measured (the loopback server is a child process, outside
    what a profiler of this one counts)."""
    os.environ["BENCH_KEY"] = "bench-key"
    with Loopback() as server, tempfile.TemporaryDirectory() as tmp, open(os.devnull, "wb") as out:
        write_files(Path(tmp), server.base, [turns])
        if side == "toolloop":
            toolloop_run(server, Path(tmp), turns, out)
        else:
            bare_run(server, turns)


def by_thread(turns: int, repeat: int) -> None:
    """toolloop's CPU per turn at ``turns``, split by thread: the event loop's (this thread), the
    journal writer's and the output's (each counted as it ends, with the run), and the rest (the
    tool's pool thread, which outlives a run); the bare loop's whole CPU per turn beside it."""
    import collections
    import threading

    os.environ["BENCH_KEY"] = "bench-key"
    ended: collections.Counter[str] = collections.Counter()
    run = threading.Thread.run

    def counted(self: threading.Thread) -> None:
        try:
            run(self)
        finally:
            ended[self.name] += time.thread_time()

    threading.Thread.run = counted  # type: ignore[method-assign]
    with Loopback() as server, tempfile.TemporaryDirectory() as tmp, open(os.devnull, "wb") as out:
        write_files(Path(tmp), server.base, [BASE_TURNS, turns])
        toolloop_run(server, Path(tmp), BASE_TURNS, out)
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; CPU ms per turn at {turns} turns")
        for _ in range(repeat):
            ended.clear()
            main0, all0 = time.thread_time(), time.process_time()
            toolloop_run(server, Path(tmp), turns, out)
            main, whole = time.thread_time() - main0, time.process_time() - all0
            named = {k: v for k, v in ended.items() if k.startswith("toolloop-")}
            rest = whole - main - sum(named.values())
            _wall, bare = bare_run(server, turns)
            print(f"toolloop {whole * 1000 / turns:.3f}: loop thread {main * 1000 / turns:.3f}, "
                  + ", ".join(f"{k} {v * 1000 / turns:.3f}" for k, v in sorted(named.items()))
                  + f", rest {rest * 1000 / turns:.3f}; bare httpx loop {bare * 1000 / turns:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, nargs="+", default=[20, 100, 300])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    ap.add_argument("--one", choices=("toolloop", "bare"), help="one run of one side at --turns N, unmeasured")
    ap.add_argument("--by-thread", action="store_true", help="toolloop's CPU per turn at --turns N, by thread")
    a = ap.parse_args()
    if a.one:
        return one_run(a.one, a.turns[0])
    if a.by_thread:
        return by_thread(a.turns[0], a.repeat)
    if any(n <= BASE_TURNS for n in a.turns):
        ap.error(f"--turns: each must be more than {BASE_TURNS}, the run whose cost is taken as fixed")
    load = os.getloadavg()[0]
    got = measure(a.turns, a.repeat)
    print(f"load average {load:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; median of {a.repeat} rounds")
    print(f"{'turns':>5} {'toolloop cpu':>13} {'bare cpu':>9} {'own cpu/turn':>13} {'own wall/turn':>14}"
          f" {'whole-run own cpu/turn':>23}   (ms)")
    for n, row in got["turns"].items():
        if n == BASE_TURNS:
            print(f"{n:>5} {row['toolloop_cpu_ms']:>13.1f} {row['bare_cpu_ms']:>9.1f}   (the fixed cost of a run: toolloop's "
                  f"own CPU over a {n}-turn run, {row['own_cpu_avg_ms'] * n:.1f} ms, is taken off below)")
            continue
        print(f"{n:>5} {row['toolloop_cpu_ms']:>13.1f} {row['bare_cpu_ms']:>9.1f} {row['own_cpu_ms']:>13.3f}"
              f" {row['own_wall_ms']:>14.3f} {row['own_cpu_avg_ms']:>23.3f}")
    if "growth" in got:
        g = got["growth"]
        print(f"own time per turn at {g['to']} / at {g['from']} turns: CPU {g['cpu']:.2f}x, wall {g['wall']:.2f}x"
              f"  (bar <= 1.1x)")
    if a.json:
        print(json.dumps(got))


if __name__ == "__main__":
    main()
