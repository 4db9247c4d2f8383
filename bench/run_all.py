#!/usr/bin/env python3
"""Every performance figure of toolloop against its bare baseline, measured side by side in one run.

Each line: the figure, its baseline, the ratio, the bar and the aim (see docs/performance.md).
Both sides of a figure run as whole processes (or in one process, for the routed loop) of this
same Python, alternating, so drift on a busy machine hits both alike; medians are reported.

  per-call cost   slope between --small and --large lanes of a no-op tool at -j K (default 64),
                  input and output schemas, receipts, the journal and JSON Lines on, against a
                  bare trio worker pool (async) or a bare trio.to_thread.run_sync pool (sync)
  IO fan-out      extra = wall(1,000 calls of 50 ms) - wall(64 calls) at -j 64; ideal = 15 x 50 ms
  streamed RSS    ru_maxrss of `toolloop run --lanes - --stream` for 1M lanes against 10k lanes
                  (--rss-lanes to change the large count)
  start-up        a one-call sequential plan against `python -c 'import trio, sqlite3, json'`
  validate        `toolloop validate` of a 500-tool registry against loading it with the YAML C loader
  routed loop     own time per turn of a 20-turn routed run (bench_routed.py), absolute
  sandbox         per-call cost of isolation: sandbox against isolation: process on warm workers
                  (bench_sandbox.py; needs bwrap), the first call of a run in the note

Usage: python bench/run_all.py [--quick] [--only NAME ...] [--rss-lanes 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

APP = textwrap.dedent(
    """
    import trio

    def noop():
        return {}

    async def noop_async():
        return {}

    async def sleep_async(ms):
        await trio.sleep(ms / 1000)
        return {}
    """
)


def registry_text(app_root: Path) -> str:
    tool = ("        callable: benchapp:{fn}\n        description: {fn}\n"
            "        input_schema: {{type: object, additionalProperties: false{props}}}\n"
            "        output_schema: {{type: object}}\n")
    return (
        f"version: 1\napp_root: {app_root}\nsubagents:\n  b:\n    runner_defaults: {{tool_timeout_s: 30}}\n"
        "    tools:\n"
        "      noop_async:\n" + tool.format(fn="noop_async", props="") +
        "      noop:\n" + tool.format(fn="noop", props="") +
        "      sleep_async:\n" + tool.format(fn="sleep_async", props=", properties: {ms: {type: integer}}")
    )


BARE_POOL = textwrap.dedent(
    """
    import sys, orjson, trio
    sys.path.insert(0, sys.argv[4])
    from benchapp import noop, noop_async

    async def main(n, k, kind):
        send, recv = trio.open_memory_channel(k * 2)
        out = sys.stdout.buffer
        limiter = trio.CapacityLimiter(k)

        async def worker(recv):
            async with recv:
                async for i in recv:
                    if kind == "thread":
                        result = await trio.to_thread.run_sync(noop, limiter=limiter)
                    else:
                        result = await noop_async()
                    out.write(orjson.dumps({"type": "receipt", "seq": i, "status": "ok", "result": result}) + b"\\n")
                    out.flush()

        async with trio.open_nursery() as nursery:
            for _ in range(k):
                nursery.start_soon(worker, recv.clone())
            recv.close()
            async with send:
                for i in range(n):
                    await send.send(i)

    trio.run(main, int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
    """
)


@dataclass
class Row:
    name: str
    measured: float
    baseline: float | None
    ratio: float | None
    bar: str
    aim: str
    met: bool | None
    note: str = ""


def run(cmd: list[str], cwd: Path, stdin=None) -> float:
    """Wall time of a whole process; standard output drained through a pipe, as with `| jq`."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, stdin=stdin)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr.decode()[-2000:]}")
    return elapsed


def toolloop(*args: str) -> list[str]:
    return [sys.executable, "-m", "toolloop_cli", *args]


class Bench:
    def __init__(self, folder: Path, opts: argparse.Namespace):
        self.dir = folder
        self.opts = opts
        (folder / "benchapp.py").write_text(APP)
        (folder / "reg.yml").write_text(registry_text(folder))
        (folder / "bare_pool.py").write_text(BARE_POOL)
        self.k = opts.k
        (folder / "parallel.yml").write_text(
            f"version: 1\nregistry: reg.yml\nsubagent: b\nmode: parallel\nmax_concurrency: {self.k}\nlanes: []\n")
        (folder / "one.yml").write_text(
            "version: 1\nregistry: reg.yml\nsubagent: b\nmode: sequential\ncalls:\n  - {tool: noop_async, args: {}}\n")
        self.runs = 0

    def lanes(self, n: int, tool: str, args: str = "{}") -> Path:
        path = self.dir / f"lanes-{tool}-{n}.jsonl"
        if not path.exists():
            with open(path, "w") as fh:
                for i in range(n):
                    fh.write(f'{{"item_key": "i{i}", "calls": [{{"tool": "{tool}", "args": {args}}}]}}\n')
        return path

    def state(self) -> str:
        self.runs += 1
        return str(self.dir / f"state-{self.runs}")

    def toolloop_batch(self, n: int, tool: str, args: str = "{}") -> float:
        return run(toolloop("run", "parallel.yml", "--lanes", str(self.lanes(n, tool, args)), "--format", "jsonl",
                            "--state-dir", self.state()), self.dir)

    def bare_batch(self, n: int, kind: str) -> float:
        return run([sys.executable, "bare_pool.py", str(n), str(self.k), kind, str(self.dir)], self.dir)

    # -- figures ------------------------------------------------------------------------------

    def per_call(self, tool: str, kind: str) -> Row:
        small, large = self.opts.small, self.opts.large
        ours: dict[int, list[float]] = {small: [], large: []}
        bare: dict[int, list[float]] = {small: [], large: []}
        for _ in range(self.opts.repeat):
            for n in (small, large):
                bare[n].append(self.bare_batch(n, kind))
                ours[n].append(self.toolloop_batch(n, tool))

        def slope(by_n: dict[int, list[float]]) -> float:
            return (statistics.median(by_n[large]) - statistics.median(by_n[small])) / (large - small)

        o, b = slope(ours), slope(bare)
        if kind == "async":
            name, bar, aim = "per-call cost, no-op async tool / bare trio pool", 2.5, 1.5
        else:
            name, bar, aim = "per-call cost, sync tool in threads / bare to_thread pool", 1.3, 1.1
        return Row(name, o * 1e6, b * 1e6, o / b, f"<= {bar}x", f"<= {aim}x", o / b <= bar,
                   f"us per call, -j {self.k}, slope {small}..{large} lanes")

    def fan_out(self) -> Row:
        calls, ms, k = 1000, 50, 64
        if self.k != k:
            (self.dir / "fan.yml").write_text(
                f"version: 1\nregistry: reg.yml\nsubagent: b\nmode: parallel\nmax_concurrency: {k}\nlanes: []\n")
        plan = "fan.yml" if self.k != k else "parallel.yml"
        args = f'{{"ms": {ms}}}'
        walls: dict[int, list[float]] = {calls: [], k: []}
        for _ in range(self.opts.repeat):
            for n in (k, calls):
                walls[n].append(run(toolloop("run", plan, "--lanes", str(self.lanes(n, "sleep_async", args)),
                                             "--format", "jsonl", "--state-dir", self.state()), self.dir))
        extra = statistics.median(walls[calls]) - statistics.median(walls[k])
        ideal = (-(-calls // k) - 1) * ms / 1000
        ratio = ideal / extra
        return Row("IO fan-out, 1,000 calls of 50 ms at -j 64: ideal extra / measured extra", extra, ideal, ratio,
                   ">= 0.95", ">= 0.98", ratio >= 0.95, "s of extra time; the baseline is the ideal extra")

    def rss(self) -> Row:
        small, large = 10_000, self.opts.rss_lanes

        def peak(n: int) -> int:
            with open(self.lanes(n, "noop_async"), "rb") as stdin:
                proc = subprocess.Popen(toolloop("run", "parallel.yml", "--lanes", "-", "--stream", "--format", "jsonl",
                                                 "--state-dir", self.state()),
                                        cwd=self.dir, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                err = proc.stderr.read()  # type: ignore[union-attr]
                _, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode != 0:
                sys.exit(f"streamed run of {n} lanes failed ({proc.returncode}): {err.decode()[-2000:]}")
            return usage.ru_maxrss  # KiB on Linux

        t0 = time.perf_counter()
        big = peak(large)
        took = time.perf_counter() - t0
        base = peak(small)
        ratio = big / base
        label = f"{large // 1_000_000}M" if large % 1_000_000 == 0 else f"{large // 1000}k"
        return Row(f"peak RSS streaming {label} lanes (--lanes - --stream) / 10k lanes", big / 1024, base / 1024,
                   ratio, "<= 1.5x", "<= 1.1x", ratio <= 1.5, f"MiB, ru_maxrss; the {label} run took {took:.0f} s")

    def start_up(self) -> Row:
        state = self.state()
        ours_cmd = toolloop("run", "one.yml", "--format", "jsonl", "--state-dir", state)
        bare_cmd = [sys.executable, "-c", "import trio, sqlite3, json"]
        run(ours_cmd, self.dir)  # warm: the state folder exists, files are in the page cache
        run(bare_cmd, self.dir)
        ours, bare = [], []
        for _ in range(self.opts.starts):
            bare.append(run(bare_cmd, self.dir))
            ours.append(run(ours_cmd, self.dir))
        o, b = statistics.median(ours), statistics.median(bare)
        return Row("start-up: one-call sequential plan / python -c 'import trio, sqlite3, json'", o * 1000, b * 1000,
                   o / b, "<= 2x", "<= 1.5x", o / b <= 2, f"ms, median of {self.opts.starts}")

    def validate(self) -> Row:
        folder = self.dir / "big"
        folder.mkdir(exist_ok=True)
        reg = folder / "registry.yml"
        write_big_registry(reg, folder, 500)
        ours_cmd = toolloop("validate", str(reg))
        bare_cmd = [sys.executable, "-c", "import sys, yaml; yaml.load(open(sys.argv[1], 'rb'), Loader=yaml.CSafeLoader)",
                    str(reg)]
        run(ours_cmd, folder)
        run(bare_cmd, folder)
        ours, bare = [], []
        for _ in range(self.opts.starts):
            bare.append(run(bare_cmd, folder))
            ours.append(run(ours_cmd, folder))
        o, b = statistics.median(ours), statistics.median(bare)
        return Row("toolloop validate, 500-tool registry / loading it with the YAML C loader", o * 1000, b * 1000,
                   o / b, "<= 3x", "<= 2x", o / b <= 3, f"ms, median of {self.opts.starts}")

    def routed(self) -> Row:
        proc = subprocess.run([sys.executable, str(HERE / "bench_routed.py"), "--turns", "20",
                               "--repeat", str(self.opts.routed_repeat), "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        if proc.returncode != 0:
            sys.exit(f"bench_routed.py failed: {proc.stderr.decode()[-2000:]}")
        got = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        own = got["toolloop_ms"]
        return Row("routed loop's own time per turn, 20 turns (absolute)", own, got["bare_ms"], None,
                   "<= 2 ms", "<= 0.5 ms", own <= 2, "ms per turn; the baseline is a bare httpx loop's own time")

    def sandbox(self) -> Row:
        name = "per-call cost, isolation: sandbox / isolation: process, warm worker"
        proc = subprocess.run([sys.executable, str(HERE / "bench_sandbox.py"), "--json",
                               "--cold", str(self.opts.starts)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        if proc.returncode != 0:  # no bwrap here: say so, and measure the rest
            why = (proc.stderr.decode().strip().splitlines() or ["bench_sandbox.py failed"])[-1]
            return Row(name, None, None, None, "<= 1.5x", "<= 1.1x", None, f"not measured: {why}")  # type: ignore[arg-type]
        got = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        ratio = got["warm_ratio"]
        return Row(name, got["warm_sandbox_us"], got["warm_process_us"], ratio, "<= 1.5x", "<= 1.1x", ratio <= 1.5,
                   f"us per call; first call of a run {got['cold_sandbox_ms']:.0f} ms against"
                   f" {got['cold_process_ms']:.0f} ms ({got['cold_ratio']:.2f}x)")


def write_big_registry(path: Path, folder: Path, n: int) -> None:
    """A registry of ``n`` sync tools, each with input and output schemas, an App module holding them."""
    lines = ["import typing", ""]
    for i in range(n):
        lines.append(f"def tool_{i}(text: str, count: int = 1) -> dict:\n    return {{'text': text * count}}\n")
    (folder / "bigapp.py").write_text("\n".join(lines))
    out = [f"version: 1\napp_root: {folder}\nsubagents:\n  main:\n    runner_defaults: {{tool_timeout_s: 30}}\n"
           "    tools:\n"]
    for i in range(n):
        out.append(
            f"      tool_{i}:\n"
            f"        callable: bigapp:tool_{i}\n"
            f"        description: Repeat a text (tool {i}).\n"
            "        input_schema:\n"
            "          type: object\n"
            "          additionalProperties: false\n"
            "          required: [text]\n"
            "          properties:\n"
            "            text: {type: string, maxLength: 1000}\n"
            "            count: {type: integer, minimum: 1, maximum: 10}\n"
            "        output_schema:\n"
            "          type: object\n"
            "          required: [text]\n"
            "          properties:\n"
            "            text: {type: string}\n"
        )
    path.write_text("".join(out))


FIGURES = ("async", "thread", "fanout", "rss", "startup", "validate", "routed", "sandbox")


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=FIGURES, help="measure only these figures")
    ap.add_argument("-k", type=int, default=64, help="max_concurrency of the per-call figures (default 64)")
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--large", type=int, default=12000)
    ap.add_argument("--repeat", type=int, default=3, help="runs per side of the batch figures (median)")
    ap.add_argument("--starts", type=int, default=5, help="runs per side of the start-up figures (median)")
    ap.add_argument("--routed-repeat", type=int, default=5)
    ap.add_argument("--rss-lanes", type=int, default=1_000_000, help="lanes of the large streamed run")
    ap.add_argument("--quick", action="store_true", help="200k lanes for the streamed RSS figure, fewer repeats")
    opts = ap.parse_args()
    if opts.quick:
        opts.rss_lanes = min(opts.rss_lanes, 200_000)
        opts.repeat = 1
        opts.routed_repeat = 3
    wanted = opts.only or FIGURES
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp), opts)
        steps = {"async": lambda: bench.per_call("noop_async", "async"),
                 "thread": lambda: bench.per_call("noop", "thread"),
                 "fanout": bench.fan_out, "rss": bench.rss, "startup": bench.start_up,
                 "validate": bench.validate, "routed": bench.routed, "sandbox": bench.sandbox}
        for name in FIGURES:
            if name not in wanted:
                continue
            row = steps[name]()
            rows.append(row)
            print(f"  {row.name}: {fmt(row.measured)} against {fmt(row.baseline)} ({row.note})"
                  + (f", ratio {row.ratio:.2f}" if row.ratio is not None else ""), flush=True)
    print()
    head = f"{'figure':<78} {'measured':>9} {'baseline':>9} {'ratio':>7} {'bar':>9} {'aim':>9}  met"
    print(head)
    print("-" * len(head))
    for r in rows:
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
        print(f"{r.name:<78} {fmt(r.measured):>9} {fmt(r.baseline):>9} {ratio:>7} {r.bar:>9} {r.aim:>9}  "
              f"{'-' if r.met is None else 'yes' if r.met else 'NO'}")
    if "rss" not in wanted:
        print("(peak RSS streaming 1M lanes: not measured in this run; --only rss measures it)")


if __name__ == "__main__":
    main()
