#!/usr/bin/env python3
"""Profile one benchmark run with py-spy and summarise where its CPU went (bench/profile_summary.py).

  batch    ``toolloop run`` of N lanes of a no-op async tool at -j K (the per-call figure's run)
  routed   ``toolloop run`` of an N-turn routed plan against the loopback model server
           (the routed figure's run)

py-spy samples the thread holding the GIL (``--gil``: where the interpreter's time goes; with
--all-threads every thread it sees running), at --rate samples a second, in raw (collapsed stack)
form. The summary is printed for the samples under the part that matters (``--under``: the lane
workers for a batch, a routed turn for the routed run), then the share of each thread.

Usage: python bench/profile_run.py batch|routed [--out prof.txt] [--lanes 12000] [-k 64] [--turns 300]
       [--rate 250] [--under FUNCTION]
Needs py-spy (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _install import ROOT, Install  # noqa: E402


def record(out: Path, cmd: list[str], cwd: Path, env: dict, rate: int, gil: bool) -> None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    flags = ["--gil"] if gil else []
    proc = subprocess.run([spy, "record", "-r", str(rate), "-f", "raw", "--threads", *flags, "-o", str(out), "--", *cmd],
                          cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        sys.exit(f"py-spy failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}")


def by_thread(out: Path) -> None:
    """Share of the samples per thread (py-spy's --threads puts the thread first on each stack)."""
    counts: Counter[str] = Counter()
    with open(out) as fh:
        for line in fh:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            counts[stack.split(";", 1)[0]] += int(n)
    total = sum(counts.values())
    print(f"\nsamples by thread ({total}):")
    for thread, n in counts.most_common(8):
        print(f"  {100 * n / total:5.1f} %  {thread}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("batch", "routed"))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--lanes", type=int, default=12000)
    ap.add_argument("-k", type=int, default=64)
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--rate", type=int, default=250)
    ap.add_argument("--under", help="summarise the samples under this function (default: per kind)")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--all-threads", action="store_true",
                    help="sample every running thread, not only the one holding the GIL (py-spy --gil, the default)")
    ap.add_argument("--editable", action="store_true")
    a = ap.parse_args()
    out = (a.out or Path(f"prof-{a.what}.txt")).resolve()
    with Install(editable=a.editable) as install:
        tmp = install.tmp
        if a.what == "batch":
            from bench_batch import Batch

            batch = Batch(tmp, install, a.k)
            cmd = install.toolloop("run", "parallel.yml", "--lanes", str(batch.lanes(a.lanes, "noop_async")),
                                   "--format", "jsonl", "--state-dir", str(tmp / "state"))
            record(out, cmd, tmp, install.env, a.rate, not a.all_threads)
            under = a.under or "_Feeder.worker"
        else:
            from bench_routed import write_files
            from loopback import Loopback

            with Loopback() as server:
                write_files(tmp, server.base, [a.turns])
                shutil.copy(tmp / f"plan{a.turns}.yml", tmp / "plan.yml")
                server.script("text", a.turns)
                env = {**install.env, "BENCH_KEY": "bench-key"}
                cmd = install.toolloop("run", "plan.yml", "--format", "jsonl", "--state-dir", str(tmp / "state"))
                record(out, cmd, tmp, env, a.rate, not a.all_threads)
                server.check("text", a.turns, "toolloop")
            under = a.under or "RoutedRunner._turn"
    print(f"profile: {out} ({install.what}; load average {os.getloadavg()[0]:.1f})")
    # imports are start-up (the first request imports the HTTP client): left out of a turn's share
    subprocess.run([sys.executable, str(HERE / "profile_summary.py"), str(out), "--under", under, "--top", str(a.top),
                    "--skip", "_find_and_load"], check=True, cwd=ROOT)
    by_thread(out)


if __name__ == "__main__":
    main()
