#!/usr/bin/env python3
"""An A/B of two source trees on the routed figure: ``bench_routed.py --turns ... --repeat 1
--json`` (this tree's script, so both sides are measured alike) run in a fresh process with the
old tree's package, then the new one's, alternating which goes first, round after round; the
medians of the rounds' own CPU per turn, and of the per-round ratio new/old.

Both trees run from source in this Python, which needs their dependencies; an editable install
of either is bypassed.

With ``--instructions`` it counts instructions instead (valgrind's callgrind, every thread of the
process; the loopback server, a child process, is not counted): one routed run of each tree at
--small and --large turns (``bench_routed.py --one toolloop``), and the bare httpx loop at both,
and prints the instructions per turn of each (the slope, so start-up and a run's fixed cost cancel
out) and toolloop's own per turn (its slope less the bare loop's). Unlike CPU time, the count
does not swell with the machine's load.

Usage: python bench/ab_routed.py --old /path/to/old/tree [--new .] [--turns 20 100 300] [--rounds 5]
       python bench/ab_routed.py --old /path/to/old/tree --instructions [--small 20] [--large 120]
       (an old tree: ``git archive main | tar -x -C /tmp/old``)
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

LAUNCH = """
import runpy, sys
tree = sys.argv.pop(1)
# an editable install's finder would import the installed checkout instead of this tree
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__
                    and "editable" not in getattr(f, "__name__", "")]
sys.path.insert(0, tree)
import toolloop_cli
assert toolloop_cli.__file__.startswith(tree), toolloop_cli.__file__
sys.argv[0] = sys.argv[1]
del sys.argv[1]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def one(tree: str, turns: list[int]) -> dict:
    cmd = [sys.executable, "-c", LAUNCH, tree, str(HERE / "bench_routed.py"), "--turns", *map(str, turns),
           "--repeat", "1", "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def count_instructions(trees: dict[str, str], small: int, large: int) -> None:
    """Instructions per turn of each tree's routed run and of the bare loop under callgrind (two
    runs at a time), the slope between ``small`` and ``large`` turns."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}

    def start(side: str, n: int) -> subprocess.Popen:
        tree = trees["new" if side == "bare" else side]
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", LAUNCH, tree,
               str(HERE / "bench_routed.py"), "--one", "bare" if side == "bare" else "toolloop", "--turns", str(n)]
        return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    counts: dict[tuple[str, int], int] = {}
    jobs = [(side, n) for n in (small, large) for side in ("old", "new", "bare")]
    for i in range(0, len(jobs), 2):
        procs = {job: start(*job) for job in jobs[i:i + 2]}
        for (side, n), proc in procs.items():
            _out, err = proc.communicate()
            found = re.findall(r"I\s+refs:\s+([\d,]+)", err)
            if proc.returncode != 0 or not found:
                sys.exit(f"{side} at {n} turns failed ({proc.returncode}): {err[-2000:]}")
            counts[(side, n)] = int(found[0].replace(",", ""))
            print(f"{side} at {n} turns: {counts[(side, n)]:,} instructions (load {os.getloadavg()[0]:.1f})",
                  flush=True)
    per = {side: (counts[(side, large)] - counts[(side, small)]) / (large - small) for side in ("old", "new", "bare")}
    print(f"instructions per turn ({small}..{large} turns): old {per['old']:,.0f}, new {per['new']:,.0f}"
          f" (new/old {per['new'] / per['old']:.3f}); bare httpx loop {per['bare']:,.0f}")
    print(f"toolloop's own instructions per turn (less the bare loop's): old {per['old'] - per['bare']:,.0f},"
          f" new {per['new'] - per['bare']:,.0f} (new/old {(per['new'] - per['bare']) / (per['old'] - per['bare']):.3f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", default=str(HERE.parent))
    ap.add_argument("--turns", type=int, nargs="+", default=[20, 100, 300])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--instructions", action="store_true", help="count instructions under callgrind instead")
    ap.add_argument("--small", type=int, default=20, help="the smaller run of --instructions (turns)")
    ap.add_argument("--large", type=int, default=120, help="the larger run of --instructions (turns)")
    opts = ap.parse_args()
    trees = {"old": str(Path(opts.old).resolve()), "new": str(Path(opts.new).resolve())}
    for tree in trees.values():
        compileall.compile_dir(str(Path(tree) / "toolloop_cli"), quiet=1)
    if opts.instructions:
        return count_instructions(trees, opts.small, opts.large)
    own: dict[str, dict[int, list[float]]] = {s: {n: [] for n in opts.turns} for s in trees}
    whole: dict[str, dict[int, list[float]]] = {s: {n: [] for n in opts.turns} for s in trees}
    cpu: dict[str, dict[int, list[float]]] = {s: {n: [] for n in opts.turns} for s in trees}
    loads = [os.getloadavg()[0]]
    for r in range(opts.rounds):
        for side in (["old", "new"] if r % 2 == 0 else ["new", "old"]):
            got = one(trees[side], opts.turns)
            for n in opts.turns:
                row = got["turns"][str(n)]
                own[side][n].append(row["own_cpu_ms"])
                whole[side][n].append(row["toolloop_cpu_ms"] / row["bare_cpu_ms"])
                cpu[side][n].append(row["toolloop_cpu_ms"])
        loads.append(os.getloadavg()[0])
        print(f"round {r + 1}: " + "; ".join(
            f"{n} turns own cpu/turn old {own['old'][n][-1]:.3f} new {own['new'][n][-1]:.3f} ms"
            for n in opts.turns) + f" (load {loads[-1]:.1f})", flush=True)
    print(f"load average {min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} CPUs; medians of {opts.rounds} rounds")
    for n in opts.turns:
        o, w = statistics.median(own["old"][n]), statistics.median(own["new"][n])
        print(f"{n:>4} turns: own CPU per turn old {o:.3f} ms, new {w:.3f} ms;"
              f" whole run / bare loop old {statistics.median(whole['old'][n]):.2f}x,"
              f" new {statistics.median(whole['new'][n]):.2f}x")
        ratios = sorted(b / a for a, b in zip(cpu["old"][n], cpu["new"][n]))
        print(f"      toolloop's CPU of the whole run, new/old per round: median {statistics.median(ratios):.3f}"
              f" (range {ratios[0]:.2f}-{ratios[-1]:.2f}); per turn old {statistics.median(cpu['old'][n]) / n:.3f} ms,"
              f" new {statistics.median(cpu['new'][n]) / n:.3f} ms")
    hi, lo = max(opts.turns), min(opts.turns)
    for side in trees:
        g = [a / b for a, b in zip(own[side][hi], own[side][lo]) if b > 0]
        if g:
            print(f"{side}: own per turn at {hi} / at {lo}: median {statistics.median(g):.2f}x")


if __name__ == "__main__":
    main()
