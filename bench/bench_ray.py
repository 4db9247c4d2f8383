"""Calls through Ray (--executor ray) against bare Ray in the same run, and a CPU-bound tool on one
and two Ray workers against --executor local with process isolation.

For each cluster (a local Ray started here with ``num_cpus`` pinned to 1, then to 2), this process
connects once, shipping the bench App, and runs in that one job:

  per call   N calls of a no-op, one after the other: a bare ``ray.get(f.remote())`` loop, then a
             sequential plan of the same calls through toolloop (gates, limits, the task's start
             report, the journal, receipts); the ratio is toolloop's time per call over bare Ray's
  CPU-bound  M calls of a tool that burns about ``--burn`` seconds of CPU: bare Ray with every call
             submitted at once, then a parallel plan of M lanes with ``-j`` = 2 x CPUs through
             toolloop, and the same plan with ``isolation: process`` (a worker process per call)

Then the same CPU-bound plan with ``--executor local`` and ``isolation: process`` (warm worker
processes of the head, -j 2), and the head's peak memory for a streamed plan of ``--lanes`` and
4 x ``--lanes`` no-op lanes (``run --lanes FILE --stream``, measured by wait4), through Ray and locally.
Ratios are against the bare figure measured in the same run.

With --per-call-only, only the per-call figure: CPU time of the whole local cluster (the driver and
every process under it: GCS, raylet, workers) and wall time, for --rounds alternating rounds.

Usage: python bench/bench_ray.py [--calls 300] [--cpu-calls 24] [--burn 0.2] [--lanes 1000]
       python bench/bench_ray.py --per-call-only [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

APP = textwrap.dedent(
    """
    import hashlib, time

    def noop():
        return {}

    def burn(seconds):
        # CPU-bound: hash for about ``seconds`` of one core's time
        end = time.process_time() + seconds
        h = b"x"
        n = 0
        while time.process_time() < end:
            h = hashlib.sha256(h).digest()
            n += 1
        return {"rounds": n}
    """
)


def bare_call(ref: str, kwargs: dict) -> dict:
    import importlib

    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)(**kwargs)


def write_files(root: Path, burn: float, calls: int, cpu_calls: int, lanes: int) -> dict:
    app = root / "app"
    (app / "benchapp").mkdir(parents=True)
    (app / "benchapp" / "__init__.py").write_text("")
    (app / "benchapp" / "tools.py").write_text(APP)

    def registry(name: str, isolation: str) -> Path:
        tools = {
            "noop": {"callable": "benchapp.tools:noop", "description": "no-op", "isolation": isolation,
                     "input_schema": {"type": "object"}, "output_schema": {"type": "object"}},
            "burn": {"callable": "benchapp.tools:burn", "description": "CPU-bound", "isolation": isolation,
                     "input_schema": {"type": "object"}, "output_schema": {"type": "object"}},
        }
        body = {"version": 1, "app_root": str(app),
                "subagents": {"b": {"runner_defaults": {"tool_timeout_s": 600}, "tools": tools}}}
        path = root / f"{name}.yml"
        path.write_text(json.dumps(body))
        return path

    def plan(name: str, reg: Path, body: dict) -> Path:
        path = root / f"{name}.plan.yml"
        path.write_text(json.dumps({"version": 1, "registry": str(reg), "subagent": "b", **body}))
        return path

    shared, isolated = registry("shared", "thread"), registry("isolated", "process")
    cpu_lanes = [{"item_key": str(i), "calls": [{"tool": "burn", "args": {"seconds": burn}}]} for i in range(cpu_calls)]
    files = {
        "app": app,
        "noop": plan("noop", shared, {"mode": "sequential", "calls": [{"tool": "noop", "args": {}}] * calls}),
        "warm": plan("warm", shared, {"mode": "parallel", "max_concurrency": 4, "lanes": [
            {"item_key": str(i), "calls": [{"tool": "noop", "args": {}}]} for i in range(8)]}),
        "cpu": lambda j: plan(f"cpu{j}", shared, {"mode": "parallel", "max_concurrency": j, "lanes": cpu_lanes}),
        "cpu_iso": lambda j: plan(f"cpu_iso{j}", isolated, {"mode": "parallel", "max_concurrency": j,
                                                            "lanes": cpu_lanes}),
        "stream": plan("stream", shared, {"mode": "parallel", "max_concurrency": 8, "lanes": []}),
    }
    for n in (lanes, 4 * lanes):
        with open(root / f"lanes{n}.jsonl", "w") as fh:
            for i in range(n):
                fh.write(json.dumps({"item_key": f"l{i}", "calls": [{"tool": "noop", "args": {}}]}) + "\n")
    return files


def cluster_cpu() -> float:
    """CPU seconds (user + system) so far of this process and every process under it: the local
    Ray cluster this driver started (GCS, raylet, workers) included."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.Error:  # a process that ended in between
            continue
        total += t.user + t.system
    return total


def run_plan(path: Path, state: Path, cpu: list | None = None, **options) -> tuple[float, dict]:
    """Wall time of one run of an admitted plan (admission not counted), and its summary; with
    ``cpu``, the cluster's CPU time over the same span is appended to it."""
    from toolloop_cli.engine.run import RunOptions, execute_plan
    from toolloop_cli.plan.admit import admit_plan
    from toolloop_cli.store import Store

    plan = admit_plan(path)
    store = Store(state)
    got: list = []
    c0 = cluster_cpu() if cpu is not None else 0.0
    t0 = time.perf_counter()
    execute_plan(plan, store, got.append, RunOptions(handle_signals=False, **options))
    elapsed = time.perf_counter() - t0
    if cpu is not None:
        cpu.append(cluster_cpu() - c0)
    store.close()
    summary = got[-1]
    if summary["status"] != "ok":
        raise SystemExit(f"bench plan {path.name} did not succeed: {summary['counts']}")
    return elapsed, summary


def on_cluster(cpus: int, files: dict, args: argparse.Namespace, state: Path) -> dict:
    import ray

    ray.init(address="local", num_cpus=cpus, include_dashboard=False, logging_level=logging.ERROR,
             runtime_env={"working_dir": str(files["app"])})
    try:
        out: dict = {}
        f = ray.remote(max_retries=0)(bare_call)
        ray.get([f.remote("benchapp.tools:noop", {}) for _ in range(8)])  # workers up
        run_plan(files["warm"], state / f"warm{cpus}", executor="ray")  # toolloop's functions exported
        if cpus == 1:
            t0 = time.perf_counter()
            for _ in range(args.calls):
                ray.get(f.remote("benchapp.tools:noop", {}))
            out["bare_call_ms"] = (time.perf_counter() - t0) / args.calls * 1000
            elapsed, _ = run_plan(files["noop"], state / "noop", executor="ray")
            out["toolloop_call_ms"] = elapsed / args.calls * 1000
        t0 = time.perf_counter()
        ray.get([f.remote("benchapp.tools:burn", {"seconds": args.burn}) for _ in range(args.cpu_calls)])
        out["bare_cpu"] = args.cpu_calls / (time.perf_counter() - t0)
        elapsed, _ = run_plan(files["cpu"](2 * cpus), state / f"cpu{cpus}", executor="ray")
        out["toolloop_cpu"] = args.cpu_calls / elapsed
        elapsed, _ = run_plan(files["cpu_iso"](2 * cpus), state / f"cpu_iso{cpus}", executor="ray")
        out["toolloop_cpu_iso"] = args.cpu_calls / elapsed
        if cpus == 2:
            out["address"] = ray.get_runtime_context().gcs_address
            out["memory"] = {n: peak_rss(files, state / f"stream{n}", n, out["address"]) for n in
                             (args.lanes, 4 * args.lanes)}
            out["memory_local"] = {n: peak_rss(files, state / f"stream_local{n}", n, None) for n in
                                   (args.lanes, 4 * args.lanes)}
        return out
    finally:
        ray.shutdown()


def peak_rss(files: dict, state: Path, lanes: int, address: str | None) -> tuple[float, float]:
    """Peak resident memory (MB) of ``toolloop run --lanes FILE --stream`` on the Ray cluster at
    ``address`` (None: ``--executor local``) and its wall time (s)."""
    lanes_file = files["stream"].parent / f"lanes{lanes}.jsonl"
    cmd = [sys.executable, "-m", "toolloop_cli", "run", str(files["stream"]), "--lanes", str(lanes_file), "--stream",
           "--format", "jsonl", "--state-dir", str(state)]
    if address is not None:
        cmd += ["--executor", "ray", "--ray-address", address]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"streamed run of {lanes} lanes exited {proc.returncode}")
    return usage.ru_maxrss / 1024, time.perf_counter() - t0


def per_call_only(files: dict, args: argparse.Namespace, state: Path) -> dict:
    """The per-call figure alone, in CPU time of the whole cluster and in wall time: a bare
    ``ray.get(f.remote())`` loop and a sequential plan of the same calls, alternating, medians."""
    import statistics

    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level=logging.ERROR,
             runtime_env={"working_dir": str(files["app"])})
    try:
        f = ray.remote(max_retries=0)(bare_call)
        ray.get([f.remote("benchapp.tools:noop", {}) for _ in range(8)])  # workers up
        run_plan(files["warm"], state / "warm", executor="ray")  # toolloop's functions exported
        bare_wall, bare_cpu, ours_wall, ours_cpu = [], [], [], []
        for r in range(args.rounds):
            c0, t0 = cluster_cpu(), time.perf_counter()
            for _ in range(args.calls):
                ray.get(f.remote("benchapp.tools:noop", {}))
            bare_wall.append(time.perf_counter() - t0)
            bare_cpu.append(cluster_cpu() - c0)
            elapsed, _ = run_plan(files["noop"], state / f"noop{r}", cpu=ours_cpu, executor="ray")
            ours_wall.append(elapsed)
    finally:
        ray.shutdown()
    per = lambda xs: statistics.median(xs) / args.calls * 1000  # noqa: E731
    return {"calls": args.calls, "rounds": args.rounds, "bare_ms": per(bare_wall), "toolloop_ms": per(ours_wall),
            "bare_cpu_ms": per(bare_cpu), "toolloop_cpu_ms": per(ours_cpu), "ray": ray.__version__}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--cpu-calls", type=int, default=24)
    ap.add_argument("--burn", type=float, default=0.2)
    ap.add_argument("--lanes", type=int, default=1000)
    ap.add_argument("--per-call-only", action="store_true",
                    help="only the per-call figure, in CPU time of the cluster (and wall), --rounds rounds")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="with --per-call-only: also print it as one JSON line")
    args = ap.parse_args()
    import ray

    if args.per_call_only:
        with tempfile.TemporaryDirectory() as tmp:
            files = write_files(Path(tmp), args.burn, args.calls, args.cpu_calls, 10)
            got = per_call_only(files, args, Path(tmp) / "state")
        print(f"{args.calls} no-op calls one at a time, median of {args.rounds} rounds, Ray {got['ray']}")
        print(f"  bare Ray task  {got['bare_cpu_ms']:.3f} ms CPU  {got['bare_ms']:.3f} ms wall")
        print(f"  toolloop       {got['toolloop_cpu_ms']:.3f} ms CPU  {got['toolloop_ms']:.3f} ms wall")
        print(f"  ratio          {got['toolloop_cpu_ms'] / got['bare_cpu_ms']:.2f}x CPU"
              f"  {got['toolloop_ms'] / got['bare_ms']:.2f}x wall  (bar <= 1.3x, aim <= 1.1x)")
        if args.json:
            print(json.dumps(got))
        return

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = write_files(root, args.burn, args.calls, args.cpu_calls, args.lanes)
        one = on_cluster(1, files, args, root / "state")
        two = on_cluster(2, files, args, root / "state")
        elapsed, _ = run_plan(files["cpu_iso"](2), root / "state" / "local", executor="local")
        local = args.cpu_calls / elapsed

    print(f"machine: {platform.node()}, {os.cpu_count()} cores, {platform.machine()}, "
          f"Python {platform.python_version()}, Ray {ray.__version__}")
    print(f"{args.calls} no-op calls one at a time; {args.cpu_calls} calls burning {args.burn:g} s of CPU each\n")
    print(f"{'measure':<56} {'bare Ray':>12} {'toolloop':>12} {'ratio':>7}")

    def row(name: str, bare: float | None, ours: float, unit: str, lower_is_better: bool = False) -> None:
        b = f"{bare:.2f} {unit}" if bare is not None else "-"
        ratio = f"{ours / bare:.2f}" if bare else "-"
        print(f"{name:<56} {b:>12} {ours:>8.2f} {unit:<3} {ratio:>7}")

    row("per call, no-op, one at a time (ms)", one["bare_call_ms"], one["toolloop_call_ms"], "ms")
    row("CPU-bound, 1 Ray worker (num_cpus=1, -j 2), calls/s", one["bare_cpu"], one["toolloop_cpu"], "/s")
    row("CPU-bound, 2 Ray workers (num_cpus=2, -j 4), calls/s", two["bare_cpu"], two["toolloop_cpu"], "/s")
    row("  the same, isolation: process (a worker per call)", two["bare_cpu"], two["toolloop_cpu_iso"], "/s")
    row("  1 Ray worker, isolation: process", one["bare_cpu"], one["toolloop_cpu_iso"], "/s")
    row("CPU-bound, --executor local, isolation: process, -j 2", two["bare_cpu"], local, "/s")
    print("\nhead peak memory, streamed no-op lanes (run --lanes FILE --stream, -j 8):")
    for name, key in (("--executor ray", "memory"), ("--executor local", "memory_local")):
        (small_mb, small_s), (big_mb, big_s) = two[key][args.lanes], two[key][4 * args.lanes]
        print(f"  {name:<17} {args.lanes} lanes {small_mb:.0f} MB ({small_s:.1f} s), {4 * args.lanes} lanes"
              f" {big_mb:.0f} MB ({big_s:.1f} s): {(big_mb - small_mb) * 1024 / (3 * args.lanes):.2f} KB a lane")


if __name__ == "__main__":
    main()
