"""Per-call cost of `toolloop run` against a bare trio worker pool, measured side by side.

Both sides run as subprocesses of the same Python. The cost per call is the slope between a
small and a large batch (lanes fed with --lanes), so start-up cancels out:

    slope = (t(large) - t(small)) / (large - small)

The bare pool: k workers pulling items from a trio memory channel, calling a no-op function and
writing one JSON line each (orjson) to standard output. toolloop: a no-op tool with input and
output schemas, receipts, the journal and JSON Lines output on.

Usage: python bench/bench_batch.py [--small 2000] [--large 12000] [--repeat 3] [-j 4]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BARE = textwrap.dedent(
    """
    import sys, orjson, trio

    def noop():
        return {}

    async def main(n, k):
        send, recv = trio.open_memory_channel(k * 2)
        out = sys.stdout.buffer

        async def worker(recv):
            async with recv:
                async for i in recv:
                    result = noop()
                    out.write(orjson.dumps({"type": "receipt", "seq": i, "status": "ok", "result": result}) + b"\\n")
                    out.flush()

        async with trio.open_nursery() as nursery:
            for _ in range(k):
                nursery.start_soon(worker, recv.clone())
            recv.close()
            async with send:
                for i in range(n):
                    await send.send(i)

    trio.run(main, int(sys.argv[1]), int(sys.argv[2]))
    """
)


def timed(cmd: list[str], cwd: Path | None = None) -> float:
    # standard output goes to a pipe that this process drains, as with `| jq`
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr.decode()[-2000:]}")
    return elapsed


def write_lanes(path: Path, n: int, tool: str) -> None:
    with open(path, "w") as fh:
        for i in range(n):
            fh.write(f'{{"item_key": "i{i}", "calls": [{{"tool": "{tool}", "args": {{}}}}]}}\n')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--large", type=int, default=12000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("-j", "--max-concurrency", type=int, default=4)
    ap.add_argument("--tool", default="noop_async", help="noop_async (event loop) or noop (worker thread)")
    opts = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        bare = tmp / "bare.py"
        bare.write_text(BARE)
        plan = tmp / "plan.yml"
        plan.write_text(
            f"version: 1\nregistry: {ROOT / 'registries' / 'demo.yml'}\nsubagent: worker-a\n"
            f"mode: parallel\nmax_concurrency: {opts.max_concurrency}\nlanes: []\n"
        )
        sizes = (opts.small, opts.large)
        for n in sizes:
            write_lanes(tmp / f"lanes{n}.jsonl", n, opts.tool)
        results: dict[str, dict[int, list[float]]] = {"bare": {n: [] for n in sizes}, "toolloop": {n: [] for n in sizes}}
        for r in range(opts.repeat):
            for n in sizes:
                results["bare"][n].append(timed([sys.executable, str(bare), str(n), str(opts.max_concurrency)]))
                state = tmp / f"state{r}-{n}"
                results["toolloop"][n].append(timed(
                    [sys.executable, "-m", "toolloop_cli", "run", str(plan), "--lanes", str(tmp / f"lanes{n}.jsonl"),
                     "--format", "jsonl", "--state-dir", str(state)],
                    cwd=tmp,
                ))
        slope = {}
        for name, by_n in results.items():
            small, large = (statistics.median(by_n[n]) for n in sizes)
            slope[name] = (large - small) / (sizes[1] - sizes[0]) * 1e6
            print(f"{name:9s} t({sizes[0]})={small:.3f}s t({sizes[1]})={large:.3f}s  per call {slope[name]:.1f} us")
        print(f"ratio toolloop/bare: {slope['toolloop'] / slope['bare']:.2f}x  (goal <= 2.5x; tool={opts.tool}, "
              f"-j {opts.max_concurrency}, median of {opts.repeat})")


if __name__ == "__main__":
    main()
