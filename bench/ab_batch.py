#!/usr/bin/env python3
"""An A/B of two source trees on the per-call figure's run: ``toolloop run parallel.yml --lanes
FILE --format jsonl`` of N lanes of the no-op async tool at -j K, the trees alternating round by
round (which goes first alternates too), CPU time of each whole process from wait4, medians and
the per-round ratio new/old. A bare trio pool of the same N items runs in each round as well, for
the ratio against it (whole processes, so start-up is in both sides of that one).

Both trees run from source with compiled bytecode (compiled here first), in this Python, which
needs their dependencies; an editable install of either is bypassed.

Usage: python bench/ab_batch.py --old /path/to/old/tree [--new .] [--lanes 12000] [-k 64] [--rounds 9]
       (an old tree: ``git worktree add --detach /tmp/old main``)
"""

from __future__ import annotations

import argparse
import compileall
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
    opts = ap.parse_args()
    trees = {"old": str(Path(opts.old).resolve()), "new": str(Path(opts.new).resolve())}
    for tree in trees.values():
        compileall.compile_dir(str(Path(tree) / "toolloop_cli"), quiet=1)
    print(load_text(), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "benchapp.py").write_text(APP)
        (d / "reg.yml").write_text(registry_text(d))
        (d / "trio_pool.py").write_text(TRIO_POOL)
        (d / "launch.py").write_text(LAUNCH)
        (d / "parallel.yml").write_text(f"version: 1\nregistry: reg.yml\nsubagent: b\nmode: parallel\n"
                                        f"max_concurrency: {opts.k}\nlanes: []\n")
        with open(d / "lanes.jsonl", "w") as fh:
            for i in range(opts.lanes):
                fh.write(f'{{"item_key": "i{i}", "calls": [{{"tool": "noop_async", "args": {{}}}}]}}\n')
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


if __name__ == "__main__":
    main()
