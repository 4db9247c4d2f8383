#!/usr/bin/env python3
"""An A/B of two source trees on the per-call figure's run: ``toolloop run parallel.yml --lanes
FILE --format jsonl`` of N lanes of the no-op async tool at -j K, the trees alternating round by
round (which goes first alternates too), CPU time of each whole process from wait4, medians and
the per-round ratio new/old. A bare trio pool of the same N items runs in each round as well, for
the ratio against it (whole processes, so start-up is in both sides of that one).

Both trees run from source with compiled bytecode (compiled here first), in this Python, which
needs their dependencies; an editable install of either is bypassed.

With ``--instructions`` it counts instructions instead (valgrind's callgrind, every thread of the
process): each tree once at ``--small`` lanes and once at ``--lanes`` (default 200 and 1,200 here,
as the run is about 50 times slower under valgrind), the two trees side by side, and prints the
instructions per lane of each (the slope, so start-up cancels out). Unlike CPU time, the count does
not depend on what else the machine runs (PYTHONHASHSEED is fixed; trio's scheduling order still
varies a little from run to run).

Usage: python bench/ab_batch.py --old /path/to/old/tree [--new .] [--lanes 12000] [-k 64] [--rounds 9]
       python bench/ab_batch.py --old /path/to/old/tree --instructions [--small 200] [--lanes 1200]
       (an old tree: ``git worktree add --detach /tmp/old main``)
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import subprocess
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _measure import load_text, run_child  # noqa: E402
from bench_batch import APP, TRIO_POOL, registry_text  # noqa: E402

LAUNCH = """
import sys
tree = sys.argv.pop(1)
# an editable install's finder would import the installed checkout instead of this tree
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__
                    and "editable" not in getattr(f, "__name__", "")]
sys.path.insert(0, tree)
import toolloop_cli
assert toolloop_cli.__file__.startswith(tree), toolloop_cli.__file__
from toolloop_cli.cli.app import main
main()
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", default=str(HERE.parent))
    ap.add_argument("--lanes", type=int, default=12000)
    ap.add_argument("-k", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--instructions", action="store_true", help="count instructions under callgrind instead")
    ap.add_argument("--small", type=int, default=200, help="the smaller run of --instructions")
    opts = ap.parse_args()
    if opts.instructions and opts.lanes == 12000:
        opts.lanes = 1200
    trees = {"old": str(Path(opts.old).resolve()), "new": str(Path(opts.new).resolve())}
    for tree in trees.values():
        compileall.compile_dir(str(Path(tree) / "toolloop_cli"), quiet=1)
    print(load_text(), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        if opts.instructions:
            write_lanes(d / f"lanes-{opts.small}.jsonl", opts.small)
        (d / "benchapp.py").write_text(APP)
        (d / "reg.yml").write_text(registry_text(d))
        (d / "trio_pool.py").write_text(TRIO_POOL)
        (d / "launch.py").write_text(LAUNCH)
        (d / "parallel.yml").write_text(f"version: 1\nregistry: reg.yml\nsubagent: b\nmode: parallel\n"
                                        f"max_concurrency: {opts.k}\nlanes: []\n")
        write_lanes(d / "lanes.jsonl", opts.lanes)
        if opts.instructions:
            return count_instructions(d, trees, opts.small, opts.lanes)
        cpu: dict[str, list[float]] = {"old": [], "new": [], "bare": []}
        for r in range(opts.rounds):
            order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
            for side in order:
                cmd = [sys.executable, str(d / "launch.py"), trees[side], "run", "parallel.yml", "--lanes",
                       "lanes.jsonl", "--format", "jsonl", "--state-dir", str(d / f"state-{side}-{r}")]
                cpu[side].append(run_child(cmd, d).cpu)
            cpu["bare"].append(run_child([sys.executable, str(d / "trio_pool.py"), str(opts.lanes), str(opts.k),
                                          "async", str(d), "0"], d).cpu)
            print(f"round {r + 1}: old {cpu['old'][-1]:.3f} s, new {cpu['new'][-1]:.3f} s, "
                  f"bare {cpu['bare'][-1]:.3f} s ({load_text()})", flush=True)
    med = {s: statistics.median(v) for s, v in cpu.items()}
    ratios = sorted(n / o for n, o in zip(cpu["new"], cpu["old"]))
    print(f"CPU of the whole {opts.lanes:,}-lane run at -j {opts.k} (median of {opts.rounds}): "
          f"old {med['old']:.3f} s, new {med['new']:.3f} s, bare trio pool {med['bare']:.3f} s")
    print(f"new/old per round: median {statistics.median(ratios):.3f} (range {ratios[0]:.2f}-{ratios[-1]:.2f}); "
          f"whole process / bare pool: old {med['old'] / med['bare']:.2f}x, new {med['new'] / med['bare']:.2f}x")
    print(load_text())


def write_lanes(path: Path, n: int) -> None:
    with open(path, "w") as fh:
        for i in range(n):
            fh.write(f'{{"item_key": "i{i}", "calls": [{{"tool": "noop_async", "args": {{}}}}]}}\n')


def count_instructions(d: Path, trees: dict[str, str], small: int, large: int) -> None:
    """Instructions per lane of each tree under callgrind: both sizes of both trees at once (two
    at a time), the slope between them."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}

    def start(side: str, n: int) -> subprocess.Popen:
        lanes = "lanes.jsonl" if n == large else f"lanes-{small}.jsonl"
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
               str(d / "launch.py"), trees[side], "run", "parallel.yml", "--lanes", lanes, "--format", "jsonl",
               "--state-dir", str(d / f"state-{side}-{n}")]
        return subprocess.Popen(cmd, cwd=d, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    counts: dict[tuple[str, int], int] = {}
    for n in (small, large):
        procs = {side: start(side, n) for side in ("old", "new")}
        for side, proc in procs.items():
            _out, err = proc.communicate()
            found = re.search(r"I\s+refs:\s+([\d,]+)", err)
            if proc.returncode != 0 or found is None:
                sys.exit(f"{side} at {n} lanes failed ({proc.returncode}): {err[-2000:]}")
            counts[(side, n)] = int(found.group(1).replace(",", ""))
            print(f"{side} at {n:,} lanes: {counts[(side, n)]:,} instructions ({load_text()})", flush=True)
    per = {side: (counts[(side, large)] - counts[(side, small)]) / (large - small) for side in ("old", "new")}
    print(f"instructions per lane ({small:,}..{large:,} lanes at the same -j): old {per['old']:,.0f}, "
          f"new {per['new']:,.0f}, new/old {per['new'] / per['old']:.3f}")


if __name__ == "__main__":
    main()
