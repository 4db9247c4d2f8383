#!/usr/bin/env python3
"""Instructions per admitted lane of ``--lanes FILE``: reading, checking, hashing and journaling
each lane (``admit_plan`` with the lane spool on a real state folder, as ``toolloop run --lanes``
admits before anything runs), for one or more source trees side by side.

Each tree is run once at --small and once at --large lanes under valgrind's callgrind (every
instruction of the process, PYTHONHASHSEED fixed); the figure is the slope, so start-up and
imports cancel out. Admission runs on one thread with nothing timed, so unlike the whole run's
count the figure repeats to within a few instructions a lane.

Usage: python bench/ab_admission.py TREE [TREE ...] [--small 1000] [--large 4000] [--args '{"ms": 50}']
       (an old tree: ``git worktree add --detach /tmp/old main``)
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_batch import APP, registry_text  # noqa: E402

ADMIT = """
import io, sys
tree, n, lanes = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__
                    and "editable" not in getattr(f, "__name__", "")]
sys.path.insert(0, tree)
import toolloop_cli
assert toolloop_cli.__file__.startswith(tree), toolloop_cli.__file__
from toolloop_cli.engine.spool import LaneSpool
from toolloop_cli.plan.admit import admit_plan
from toolloop_cli.store import Store
with open(lanes, "rb") as fh:
    data = b"".join(line for _, line in zip(range(n), fh))
store = Store(sys.argv[4], create=True)
plan = admit_plan("parallel.yml", lanes=io.BytesIO(data), spool=LaneSpool(store, "20261202T000000Z-00000000"),
                  servers={})
assert plan.lane_count == n, plan.lane_count
store.close()
"""


def count(cmd: list[str], cwd: Path) -> int:
    out = cwd / "callgrind.out"
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *cmd], cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONHASHSEED": "0"})
    found = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.M)
    assert found is not None
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="+")
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--large", type=int, default=4000)
    ap.add_argument("--args", default="{}", help="each call's arguments (the no-op tool takes none)")
    opts = ap.parse_args()
    tool = "noop_async" if opts.args == "{}" else "sleep_async"
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "benchapp.py").write_text(APP)
        (d / "reg.yml").write_text(registry_text(d))
        (d / "admit.py").write_text(ADMIT)
        (d / "parallel.yml").write_text("version: 1\nregistry: reg.yml\nsubagent: b\nmode: parallel\n"
                                        "max_concurrency: 64\nlanes: []\n")
        with open(d / "lanes.jsonl", "w") as fh:
            for i in range(opts.large):
                fh.write(f'{{"item_key": "i{i}", "calls": [{{"tool": "{tool}", "args": {opts.args}}}]}}\n')
        for i, tree in enumerate(opts.trees):
            tree = str(Path(tree).resolve())
            compileall.compile_dir(str(Path(tree) / "toolloop_cli"), quiet=1)
            runs = [count([sys.executable, "admit.py", tree, str(n), "lanes.jsonl", str(d / f"state-{i}-{n}")], d)
                    for n in (opts.small, opts.large)]
            print(f"{tree}: {(runs[1] - runs[0]) / (opts.large - opts.small):,.0f} instructions per admitted lane"
                  f" ({opts.small:,}..{opts.large:,} lanes, arguments {opts.args})", flush=True)


if __name__ == "__main__":
    main()
