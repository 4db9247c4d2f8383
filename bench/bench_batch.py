#!/usr/bin/env python3
"""Batches: toolloop's cost per call against bare event-loop pools, measured side by side in one run.

Every side is a whole process of this same Python, the sides alternating round by round so drift
on a busy machine hits them alike; medians are reported.

  per call (CPU)  the slope of CPU time (user + system, from wait4) between --small and --large
                  lanes of a no-op tool at -j K (default 64), so start-up cancels out:
                      slope = (cpu(large) - cpu(small)) / (large - small)
                  toolloop: ``toolloop run plan.yml --lanes FILE --format jsonl`` with input and
                  output schemas, argument hashing, receipts, the journal and JSON Lines output
                  to a drained pipe; bare: K trio tasks pulling items from a memory channel,
                  awaiting the same function (or calling it through ``trio.to_thread.run_sync``
                  with a limiter of K) and writing one JSON line each; and ``asyncio.gather`` of
                  one task per item under a semaphore of K
  IO fan-out      wall time, as the figure is about waiting: extra = wall(1,000 calls of 50 ms)
                  - wall(64 calls) at -j 64, and the fraction of ideal = 15 x 50 ms / extra, for
                  toolloop and for both bare loops
  fan-out probe   (--only fanprobe) where the bare trio pool's own fan-out goes: the same pool of
                  1,000 x 50 ms at -j 64, each worker timing how late each sleep of its own ends
                  (past its 50 ms) and the time between its sleeps (its share of the loop's work);
                  a worker's chain is 16 sleeps, so 15 x (late + between) is what the figure loses
  streamed RSS    peak RSS (ru_maxrss) of ``toolloop run --lanes - --stream`` of 1M lanes
                  against 10k lanes (--rss-lanes to change the large count)

Usage: python bench/bench_batch.py [--only async thread fanout fanprobe rss] [--small 2000] [--large 12000]
       [--repeat 5] [-k 64] [--editable]
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _install import Install  # noqa: E402
from _measure import Row, load_text, median, ratio_row, run_child  # noqa: E402

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

TRIO_POOL = textwrap.dedent(
    """
    import sys, orjson, trio
    sys.path.insert(0, sys.argv[4])
    from benchapp import noop, noop_async, sleep_async

    async def main(n, k, kind, ms):
        send, recv = trio.open_memory_channel(k * 2)
        out = sys.stdout.buffer
        limiter = trio.CapacityLimiter(k)

        async def worker(recv):
            async with recv:
                async for i in recv:
                    if kind == "thread":
                        result = await trio.to_thread.run_sync(noop, limiter=limiter)
                    elif kind == "sleep":
                        result = await sleep_async(ms)
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

    trio.run(main, int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[5]))
    """
)

ASYNCIO_GATHER = textwrap.dedent(
    """
    import asyncio, sys, orjson
    sys.path.insert(0, sys.argv[4])
    from benchapp import noop_async

    async def main(n, k, kind, ms):
        sem = asyncio.Semaphore(k)
        out = sys.stdout.buffer

        async def one(i):
            async with sem:
                if kind == "sleep":
                    await asyncio.sleep(ms / 1000)
                    result = {}
                else:
                    result = await noop_async()
                out.write(orjson.dumps({"type": "receipt", "seq": i, "status": "ok", "result": result}) + b"\\n")
                out.flush()

        await asyncio.gather(*(one(i) for i in range(n)))

    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[5])))
    """
)


FAN_PROBE = textwrap.dedent(
    """
    import statistics, sys, time, trio

    async def main(n, k, ms):
        send, recv = trio.open_memory_channel(k * 2)
        late, between = [], []
        out = sys.stdout.buffer

        async def worker(recv):
            ended = None
            async with recv:
                async for i in recv:
                    t0 = time.perf_counter()
                    if ended is not None:
                        between.append(t0 - ended)
                    await trio.sleep(ms / 1000)
                    late.append(time.perf_counter() - t0 - ms / 1000)
                    out.write(b'{"type": "receipt", "seq": %d}\\n' % i)
                    out.flush()
                    ended = time.perf_counter()

        t = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(k):
                nursery.start_soon(worker, recv.clone())
            recv.close()
            async with send:
                for i in range(n):
                    await send.send(i)
        print(time.perf_counter() - t, statistics.mean(late), statistics.mean(between), file=sys.stderr)

    trio.run(main, int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
    """
)


def registry_text(app_root: Path) -> str:
    tool = ("        callable: benchapp:{fn}\n        description: {fn}\n"
            "        input_schema: {{type: object, additionalProperties: false{props}}}\n"
            "        output_schema: {{type: object}}\n")
    return (
        f"version: 1\napp_root: {app_root}\nsubagents:\n  b:\n"
        "    runner_defaults: {tool_timeout_s: 30, max_calls: 100000000}\n"
        "    tools:\n"
        "      noop_async:\n" + tool.format(fn="noop_async", props="") +
        "      noop:\n" + tool.format(fn="noop", props="") +
        "      sleep_async:\n" + tool.format(fn="sleep_async", props=", properties: {ms: {type: integer}}")
    )


class Batch:
    """The files of the batch figures in ``folder``, and the figures."""

    FAN_CALLS, FAN_MS, FAN_K = 1000, 50, 64

    def __init__(self, folder: Path, install: Install, k: int = 64):
        self.dir = folder
        self.install = install
        self.k = k
        (folder / "benchapp.py").write_text(APP)
        (folder / "reg.yml").write_text(registry_text(folder))
        (folder / "trio_pool.py").write_text(TRIO_POOL)
        (folder / "asyncio_gather.py").write_text(ASYNCIO_GATHER)
        for name, j in (("parallel", k), ("fan", self.FAN_K)):
            (folder / f"{name}.yml").write_text(
                f"version: 1\nregistry: reg.yml\nsubagent: b\nmode: parallel\nmax_concurrency: {j}\nlanes: []\n")
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

    def toolloop(self, plan: str, n: int, tool: str, args: str = "{}"):
        return run_child(self.install.toolloop("run", plan, "--lanes", str(self.lanes(n, tool, args)),
                                               "--format", "jsonl", "--state-dir", self.state()),
                         self.dir, env=self.install.env)

    def bare(self, script: str, n: int, k: int, kind: str, ms: int = 0):
        return run_child([sys.executable, script, str(n), str(k), kind, str(self.dir), str(ms)], self.dir)

    # -- figures ------------------------------------------------------------------------------

    def per_call(self, kind: str, small: int, large: int, repeat: int) -> list[Row]:
        """CPU per call (slope), toolloop against the bare pools, interleaved."""
        tool = "noop_async" if kind == "async" else "noop"
        sides = {"toolloop": lambda n: self.toolloop("parallel.yml", n, tool),
                 "trio": lambda n: self.bare("trio_pool.py", n, self.k, kind)}
        if kind == "async":
            sides["asyncio"] = lambda n: self.bare("asyncio_gather.py", n, self.k, kind)
        cpu = {s: {small: [], large: []} for s in sides}
        wall = {s: {small: [], large: []} for s in sides}
        for _ in range(repeat):
            for n in (small, large):
                for side, go in sides.items():
                    u = go(n)
                    cpu[side][n].append(u.cpu)
                    wall[side][n].append(u.wall)

        def slope(by_n: dict) -> float:
            return (median(by_n[large]) - median(by_n[small])) / (large - small) * 1e6

        c = {s: slope(cpu[s]) for s in sides}
        w = {s: slope(wall[s]) for s in sides}

        def spread(side: str) -> str:
            # the ratio of each round's own slopes: how far one round can be trusted on this machine
            each = sorted((cpu["toolloop"][large][r] - cpu["toolloop"][small][r]) / (cpu[side][large][r] - cpu[side][small][r])
                          for r in range(repeat))
            return f"rounds {each[0]:.2f}-{each[-1]:.2f}x"

        calls = f"{large - small:,} calls at -j {self.k}, slope {small}..{large} lanes, median of {repeat}"
        if kind == "async":
            rows = [ratio_row("CPU per no-op call / bare trio pool", c["toolloop"], c["trio"], 2.5, 1.5, "µs",
                              f"{calls} ({spread('trio')}); wall per call {w['toolloop']:.1f} against {w['trio']:.1f} µs",
                              "python bench/run_all.py --only async")]
            rows.append(Row("  for scale: CPU per no-op call / asyncio.gather", c["toolloop"], c["asyncio"],
                            c["toolloop"] / c["asyncio"], "-", "-", None, "µs",
                            f"asyncio.gather under a semaphore of {self.k} ({spread('asyncio')}); wall {w['asyncio']:.1f} µs",
                            "python bench/run_all.py --only async"))
        else:
            rows = [ratio_row("CPU per thread-pool call / bare trio.to_thread", c["toolloop"], c["trio"], 1.5, 1.2,
                              "µs", f"{calls} ({spread('trio')}); wall per call {w['toolloop']:.1f} against {w['trio']:.1f} µs",
                              "python bench/run_all.py --only thread")]
        return rows

    def fan_out(self, repeat: int) -> list[Row]:
        """Wall time: the figure is about waiting. Start-up cancels out in extra = wall(1000) - wall(64)."""
        calls, ms, k = self.FAN_CALLS, self.FAN_MS, self.FAN_K
        args = f'{{"ms": {ms}}}'
        sides = {"toolloop": lambda n: self.toolloop("fan.yml", n, "sleep_async", args),
                 "trio": lambda n: self.bare("trio_pool.py", n, k, "sleep", ms),
                 "asyncio": lambda n: self.bare("asyncio_gather.py", n, k, "sleep", ms)}
        walls = {s: {k: [], calls: []} for s in sides}
        for _ in range(repeat):
            for n in (k, calls):
                for side, go in sides.items():
                    walls[side][n].append(go(n).wall)
        ideal = (-(-calls // k) - 1) * ms / 1000
        frac = {s: ideal / (median(walls[s][calls]) - median(walls[s][k])) for s in sides}
        extra = median(walls["toolloop"][calls]) - median(walls["toolloop"][k])
        return [Row("IO fan-out 1,000 x 50 ms at -j 64, fraction of ideal", frac["toolloop"], None, frac["toolloop"],
                    ">= 0.95", ">= 0.98", frac["toolloop"] >= 0.95, "",
                    f"wall: extra {extra:.3f} s over 64 calls, ideal {ideal:.2f} s; bare trio pool "
                    f"{frac['trio']:.2f}, asyncio.gather {frac['asyncio']:.2f} (same run); median of {repeat}",
                    "python bench/run_all.py --only fanout")]

    def fan_probe(self, repeat: int) -> list[Row]:
        """Why the bare trio pool itself falls short of ideal: how late its sleeps end, and the
        time between a worker's sleeps."""
        import subprocess

        calls, ms, k = self.FAN_CALLS, self.FAN_MS, self.FAN_K
        (self.dir / "fan_probe.py").write_text(FAN_PROBE)
        runs = []
        for _ in range(repeat):
            done = subprocess.run([sys.executable, str(self.dir / "fan_probe.py"), str(calls), str(k), str(ms)],
                                  cwd=self.dir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  check=True)
            runs.append([float(x) for x in done.stderr.split()])
        wall, late, between = (median([r[i] for r in runs]) for i in range(3))
        chain = -(-calls // k) - 1
        ideal = chain * ms / 1000
        lost = chain * (late + between)
        return [Row("  bare trio pool's own fan-out: lost per sleep (late + between)", (late + between) * 1000, None,
                    ideal / (ideal + lost), "-", "-", None, "ms",
                    f"a sleep ends {late * 1000:.2f} ms late, {between * 1000:.2f} ms between a worker's sleeps; "
                    f"x {chain} = {lost * 1000:.0f} ms lost, fraction of ideal {ideal / (ideal + lost):.2f} "
                    f"(whole run {wall:.3f} s); median of {repeat}", "python bench/bench_batch.py --only fanprobe")]

    def rss(self, large: int) -> list[Row]:
        small = 10_000

        def peak(n: int):
            with open(self.lanes(n, "noop_async"), "rb") as stdin:
                return run_child(self.install.toolloop("run", "parallel.yml", "--lanes", "-", "--stream",
                                                       "--format", "jsonl", "--state-dir", self.state()),
                                 self.dir, stdin=stdin, env=self.install.env)

        big = peak(large)
        base = peak(small)
        label = f"{large // 1_000_000}M" if large % 1_000_000 == 0 else f"{large // 1000}k"
        return [Row(f"peak RSS {label} streamed lanes / 10k", big.rss_mib, base.rss_mib, big.rss_mib / base.rss_mib,
                    "<= 1.1x", "kept", big.rss_mib / base.rss_mib <= 1.1, "MiB",
                    f"ru_maxrss of `run --lanes - --stream`; the {label} run took {big.wall:.0f} s",
                    "python bench/run_all.py --only rss")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=("async", "thread", "fanout", "fanprobe", "rss"), default=["async", "thread"])
    ap.add_argument("-k", type=int, default=64, help="max_concurrency of the per-call figures (default 64)")
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--large", type=int, default=12000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rss-lanes", type=int, default=1_000_000)
    ap.add_argument("--editable", action="store_true", help="run this checkout instead of its wheel")
    opts = ap.parse_args()
    print(load_text(), flush=True)
    with Install(editable=opts.editable) as install:
        batch = Batch(install.tmp, install, opts.k)
        t0 = time.perf_counter()
        for name in opts.only:
            rows = (batch.per_call(name, opts.small, opts.large, opts.repeat) if name in ("async", "thread")
                    else batch.fan_out(opts.repeat) if name == "fanout"
                    else batch.fan_probe(opts.repeat) if name == "fanprobe" else batch.rss(opts.rss_lanes))
            for r in rows:
                ratio = f" = {r.ratio:.2f}" if r.ratio is not None else ""
                base = f" / {r.baseline:.2f}" if r.baseline is not None else ""
                print(f"{r.name}: {r.measured:.2f}{base} {r.unit}{ratio} (bar {r.bar}, aim {r.aim}) [{r.note}]",
                      flush=True)
        print(f"{load_text()}; took {time.perf_counter() - t0:.0f} s ({install.what})")


if __name__ == "__main__":
    main()
