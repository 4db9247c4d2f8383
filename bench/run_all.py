#!/usr/bin/env python3
"""Every performance figure of toolloop against its bare baseline, measured side by side in one run.

Each line: the figure, toolloop's measurement, the baseline measured in the same run, the ratio,
the bar and the aim (docs/performance.md), whether the bar is met, and the command that
reproduces the figure alone. Each side runs fresh, alternating with its baseline round by round
so drift on a busy machine hits both alike; medians are reported.

The figures compare CPU time (user + system of the whole process, from wait4; or
``time.process_time()`` around a run in one process), never wall time, because the machine may
be shared: a process waiting for a core does not accumulate CPU time, while its wall time
swells with everything else that runs. Wall time is the figure only where the figure is about
waiting (IO fan-out, and the comparison with agent frameworks as the issue states it); it is
printed beside the CPU figures as a note.

  async      CPU per no-op call, 10k calls at -j 64 / a bare trio pool (and asyncio.gather)
  thread     CPU per sync no-op call in threads / a bare trio.to_thread pool
  fanout     IO fan-out, 1,000 calls of 50 ms at -j 64, as a fraction of ideal (wall)
  routed     the routed loop's own CPU per turn over a bare httpx loop at 20, 100, 300 turns
  startup    CPU of a one-call plan / python -c 'import trio, sqlite3, json'
  validate   CPU of `toolloop validate` of 500 tools / loading the file with the YAML C loader
  rss        peak RSS streaming 1M lanes / 10k lanes (opt-in: minutes)
  peers      routed loop, 100 turns / the fastest of three agent frameworks (opt-in; the bench extra)
  ray        --executor ray no-op call / a bare Ray task on the same local cluster (opt-in)
  sandbox    per call, isolation: sandbox / isolation: process on warm workers (bench_sandbox.py,
             wall time of the calls: a sandbox's cost is in its processes; needs bwrap)

Subprocess figures run toolloop built from this checkout as a wheel, installed with compiled
bytecode in a scratch folder (--editable: the checkout itself).

Usage: python bench/run_all.py [--all] [--only NAME ...] [--quick] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _install import ROOT, Install  # noqa: E402
from _measure import Row, load_text, median, ratio_row, reference_ms, run_child  # noqa: E402
from bench_batch import Batch  # noqa: E402

DEFAULT = ("async", "thread", "fanout", "routed", "startup", "validate", "sandbox")
OPT_IN = ("rss", "peers", "ray")
FIGURES = DEFAULT + OPT_IN


def sub_json(script: str, *args: str) -> dict:
    """Run another bench script with --json; its last line is the figures."""
    proc = subprocess.run([sys.executable, str(HERE / script), *args, "--json"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, cwd=ROOT)
    if proc.returncode != 0:
        sys.exit(f"{script} failed ({proc.returncode}):\n{proc.stderr.decode()[-3000:]}")
    print("\n".join("    " + line for line in proc.stdout.decode().splitlines()[:-1]), flush=True)
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


class Figures:
    def __init__(self, install: Install, opts: argparse.Namespace):
        self.install = install
        self.opts = opts
        self.batch = Batch(install.tmp, install, opts.k)

    def alternate(self, ours: list[str], bare: list[str], cwd: Path, n: int) -> tuple[list, list]:
        run_child(ours, cwd, env=self.install.env)  # warm: the page cache, the state folder
        run_child(bare, cwd)
        o, b = [], []
        for _ in range(n):
            b.append(run_child(bare, cwd))
            o.append(run_child(ours, cwd, env=self.install.env))
        return o, b

    def startup(self) -> list[Row]:
        d = self.install.tmp
        (d / "one.yml").write_text(
            "version: 1\nregistry: reg.yml\nsubagent: b\nmode: sequential\ncalls:\n  - {tool: noop_async, args: {}}\n")
        ours = self.install.toolloop("run", "one.yml", "--format", "jsonl", "--state-dir", str(d / "state-one"))
        o, b = self.alternate(ours, [sys.executable, "-c", "import trio, sqlite3, json"], d, self.opts.starts)
        oc, bc = median([u.cpu for u in o]) * 1000, median([u.cpu for u in b]) * 1000
        ow, bw = median([u.wall for u in o]) * 1000, median([u.wall for u in b]) * 1000
        return [ratio_row("one-call plan / bare imports (CPU)", oc, bc, 2, 1.5, "ms",
                          f"wall {ow:.0f} against {bw:.0f} ms; {self.install.what}; median of {self.opts.starts}",
                          "python bench/run_all.py --only startup")]

    def validate(self) -> list[Row]:
        from bench_validate import write_big_registry

        folder = self.install.tmp / "big"
        folder.mkdir(exist_ok=True)
        reg = folder / "registry.yml"
        write_big_registry(reg, folder, 500)
        bare = [sys.executable, "-c", "import sys, yaml; yaml.load(open(sys.argv[1], 'rb'), Loader=yaml.CSafeLoader)",
                str(reg)]
        o, b = self.alternate(self.install.toolloop("validate", str(reg)), bare, folder, self.opts.starts)
        oc, bc = median([u.cpu for u in o]) * 1000, median([u.cpu for u in b]) * 1000
        ow, bw = median([u.wall for u in o]) * 1000, median([u.wall for u in b]) * 1000
        return [ratio_row("`validate` 500 tools / YAML C loader (CPU)", oc, bc, 2, 1.5, "ms",
                          f"wall {ow:.0f} against {bw:.0f} ms; whole processes; median of {self.opts.starts}",
                          "python bench/run_all.py --only validate")]

    def routed(self) -> list[Row]:
        got = sub_json("bench_routed.py", "--turns", "20", "100", "300", "--repeat", str(self.opts.routed_repeat))
        t = {int(k): v for k, v in got["turns"].items()}
        rows = []
        for n in (20, 100, 300):
            own = t[n]["own_cpu_ms"]
            bar, aim = (0.5, 0.3) if n == 100 else (None, None)
            rows.append(Row(f"routed loop's own CPU per turn, {n} turns", own, t[n]["bare_cpu_ms"] / n, None,
                            f"<= {bar} ms" if bar else "-", f"<= {aim} ms" if aim else "-",
                            own <= bar if bar else None, "ms",
                            f"wall {t[n]['own_wall_ms']:.2f} ms; whole run incl. its fixed cost "
                            f"{t[n]['own_cpu_avg_ms']:.2f} ms; baseline: the bare loop's whole CPU per turn",
                            "python bench/bench_routed.py --turns 20 100 300"))
        g = got["growth"]
        rows.append(Row("routed own CPU per turn, 300 turns / 20 turns", t[300]["own_cpu_ms"], t[20]["own_cpu_ms"],
                        g["cpu"], "<= 1.1x", "flat", g["cpu"] <= 1.1, "ms", f"wall {g['wall']:.2f}x",
                        "python bench/bench_routed.py --turns 20 100 300"))
        return rows

    def peers(self) -> list[Row]:
        args = ["--turns", "100", "--rounds", str(self.opts.peer_rounds)] + (["--editable"] if self.opts.editable else [])
        got = sub_json("bench_peers.py", *args)
        rows = []
        for key, label, bar in (("toolloop run: wall", "wall", 0.2), ("toolloop run: cpu", "CPU", None),
                                ("toolloop run: rss_mib", "peak RSS", None)):
            r = got.get("ratios", {}).get(key)
            if r is None:
                continue
            sides = got["sides"]
            k = key.split(": ")[1]
            rows.append(Row(f"routed {label}, 100 turns / fastest peer", sides["toolloop run"][k], sides[r["fastest"]][k],
                            r["ratio"], f"<= {bar}" if bar else "-", "kept" if bar else "-",
                            r["ratio"] <= bar if bar else None, "s" if k != "rss_mib" else "MiB",
                            f"whole processes; fastest: {r['fastest']}", "python bench/bench_peers.py --turns 100"))
        return rows

    def sandbox(self) -> list[Row]:
        name = "per call, isolation: sandbox / isolation: process, warm"
        command = "python bench/bench_sandbox.py"
        proc = subprocess.run([sys.executable, str(HERE / "bench_sandbox.py"), "--json", "--cold", str(self.opts.starts)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        if proc.returncode != 0:  # no bwrap here: say so, and measure the rest
            why = (proc.stderr.decode().strip().splitlines() or ["bench_sandbox.py failed"])[-1]
            return [Row(name, float("nan"), None, None, "<= 1.5x", "<= 1.1x", None, "", f"not measured: {why}", command)]
        got = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        return [ratio_row(name, got["warm_sandbox_us"], got["warm_process_us"], 1.5, 1.1, "us",
                          f"first call of a run {got['cold_sandbox_ms']:.0f} ms against {got['cold_process_ms']:.0f} ms"
                          f" ({got['cold_ratio']:.2f}x)", command)]

    def ray(self) -> list[Row]:
        got = sub_json("bench_ray.py", "--per-call-only", "--calls", str(self.opts.ray_calls))
        return [ratio_row("`--executor ray` no-op call / bare Ray task (CPU)", got["toolloop_cpu_ms"],
                          got["bare_cpu_ms"], 1.3, 1.1, "ms",
                          f"CPU of the driver and the cluster's processes; wall {got['toolloop_ms']:.2f} against "
                          f"{got['bare_ms']:.2f} ms ({got['toolloop_ms'] / got['bare_ms']:.2f}x)",
                          "python bench/bench_ray.py --per-call-only")]


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=FIGURES, help="measure only these figures")
    ap.add_argument("--all", action="store_true", help="also the opt-in figures: " + ", ".join(OPT_IN))
    ap.add_argument("-k", type=int, default=64, help="max_concurrency of the per-call figures (default 64)")
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--large", type=int, default=12000)
    ap.add_argument("--repeat", type=int, default=5, help="rounds of the batch figures (median)")
    ap.add_argument("--starts", type=int, default=9, help="runs per side of the start-up figures (median)")
    ap.add_argument("--routed-repeat", type=int, default=5)
    ap.add_argument("--peer-rounds", type=int, default=5)
    ap.add_argument("--ray-calls", type=int, default=300)
    ap.add_argument("--rss-lanes", type=int, default=1_000_000, help="lanes of the large streamed run")
    ap.add_argument("--quick", action="store_true", help="fewer rounds, 200k lanes for the streamed RSS figure")
    ap.add_argument("--editable", action="store_true", help="run this checkout instead of its wheel")
    ap.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    opts = ap.parse_args()
    if opts.quick:
        opts.rss_lanes = min(opts.rss_lanes, 200_000)
        opts.repeat = opts.routed_repeat = opts.peer_rounds = 3
        opts.starts = 5
    wanted = opts.only or (FIGURES if opts.all else DEFAULT)
    print(f"python {sys.version.split()[0]}, {load_text()}; reference loop {reference_ms():.0f} ms CPU "
          "(a million additions in pure Python, best of 3)", flush=True)
    rows: list[Row] = []
    t0 = time.perf_counter()
    with Install(editable=opts.editable) as install:
        print(f"toolloop: {install.what}", flush=True)
        fig = Figures(install, opts)
        b = fig.batch
        steps = {"async": lambda: b.per_call("async", opts.small, opts.large, opts.repeat),
                 "thread": lambda: b.per_call("thread", opts.small, opts.large, opts.repeat),
                 "fanout": lambda: b.fan_out(opts.repeat), "rss": lambda: b.rss(opts.rss_lanes),
                 "startup": fig.startup, "validate": fig.validate, "routed": fig.routed, "peers": fig.peers,
                 "ray": fig.ray, "sandbox": fig.sandbox}
        for name in FIGURES:
            if name not in wanted:
                continue
            for row in steps[name]():
                rows.append(row)
                ratio = f", ratio {row.ratio:.2f}" if row.ratio is not None else ""
                print(f"  {row.name}: {fmt(row.measured)} against {fmt(row.baseline)} {row.unit}{ratio} "
                      f"[{row.note}] ({load_text()})", flush=True)
    print(f"\n{load_text()} at the end; took {time.perf_counter() - t0:.0f} s\n")
    head = f"{'figure':<52} {'toolloop':>9} {'baseline':>9} {'ratio':>7} {'bar':>10} {'aim':>10}  met"
    print(head)
    print("-" * len(head))
    for r in rows:
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
        met = "-" if r.met is None else "yes" if r.met else "NO"
        print(f"{r.name:<52} {fmt(r.measured):>9} {fmt(r.baseline):>9} {ratio:>7} {r.bar:>10} {r.aim:>10}  {met}")
    left = [n for n in OPT_IN if n not in wanted]
    if left:
        print(f"(not measured in this run: {', '.join(left)}; --all or --only NAME measures them)")
    if opts.markdown:
        print("\n| figure | toolloop | baseline (same run) | ratio | bar | aim | met | command |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            ratio = f"{r.ratio:.2f}" if r.ratio is not None else "—"
            met = "—" if r.met is None else "yes" if r.met else "**no**"
            base = f"{fmt(r.baseline)} {r.unit}" if r.baseline is not None else "—"
            print(f"| {r.name} | {fmt(r.measured)} {r.unit} | {base} | {ratio} | {r.bar} | {r.aim} | {met} | "
                  f"`{r.command}` |")


if __name__ == "__main__":
    main()
