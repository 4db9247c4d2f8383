"""Per-call cost of OpenTelemetry: the same run with traces exported and without, side by side in
one process.

Both sides call ``execute_plan`` on the same admitted plan (one no-op call per lane, lanes fed as
with --lanes) with the SQLite journal and JSON Lines output to /dev/null. The "telemetry" side has
``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at a loopback OTLP/HTTP collector in its own process
(tests/otlp_collector.py, which decodes every request), so each call also gets its
``execute_tool`` span, batched, encoded and exported on the SDK's own thread; the queue is made
large enough that no span is dropped, and the collector's count of spans received is checked. Cost
per call is the slope between a small and a large run, so fixed costs (the SDK's start, the last
export at the end) cancel out:

    slope = (t(large) - t(small)) / (large - small)

Usage: python bench/bench_telemetry.py [--small 1000] [--large 6000] [--repeat 5] [-j 4]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import orjson  # noqa: E402

from toolloop_cli.engine.run import RunOptions, execute_plan  # noqa: E402
from toolloop_cli.plan.admit import admit_plan  # noqa: E402
from toolloop_cli.store import Store  # noqa: E402

REGISTRY = """
version: 1
app_root: {app_root}
subagents:
  b:
    runner_defaults: {{tool_timeout_s: 30, max_calls: 10000000}}
    tools:
      read:
        callable: demo_app.tools:noop_async
        description: Do nothing (async).
        input_schema: {{type: object, additionalProperties: false}}
        output_schema: {{type: object}}
"""


def plan_for(folder: Path, n: int, mc: int):
    lanes = "".join(json.dumps({"item_key": f"i{i}", "calls": [{"tool": "read", "args": {}}]}) + "\n"
                    for i in range(n))
    return admit_plan(folder / "plan.yml", lanes=io.BytesIO(lanes.encode()), max_concurrency=mc)


def timed(plan, store, out, env: dict[str, str]) -> float:
    def emit(record: dict) -> None:
        out.write(orjson.dumps(record) + b"\n")

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        t0 = time.perf_counter()
        result = execute_plan(plan, store, emit, RunOptions(handle_signals=False, labels={"bench": "telemetry"}))
        elapsed = time.perf_counter() - t0
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert result.summary["status"] == "ok", result.summary
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--large", type=int, default=6000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("-j", "--max-concurrency", type=int, default=4)
    opts = ap.parse_args()
    sizes = (opts.small, opts.large)
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        os.environ.pop(var, None)
    import subprocess
    import urllib.request

    collector = subprocess.Popen([sys.executable, str(ROOT / "tests" / "otlp_collector.py")], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
    endpoint = collector.stdout.readline().strip()  # type: ignore[union-attr]

    def received() -> int:
        with urllib.request.urlopen(endpoint + "/count") as answer:
            return int(answer.read())

    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_MAX_QUEUE_SIZE": str(4 * opts.large)}
    try:
        with tempfile.TemporaryDirectory() as tmp, open(os.devnull, "wb") as out:
            folder = Path(tmp)
            (folder / "reg.yml").write_text(REGISTRY.format(app_root=ROOT / "registries"))
            (folder / "plan.yml").write_text(f"version: 1\nregistry: reg.yml\nsubagent: b\nmode: parallel\n"
                                             f"max_concurrency: {opts.max_concurrency}\nlanes: []\n")
            plans = {n: plan_for(folder, n, opts.max_concurrency) for n in sizes}
            times: dict[str, dict[int, list[float]]] = {"off": {n: [] for n in sizes}, "on": {n: [] for n in sizes}}
            exported = 0
            for r in range(opts.repeat):  # interleaved, so drift hits both sides alike
                for n in sizes:
                    for side, env in (("off", {}), ("on", on)):
                        store = Store(folder / f"state-{side}-{r}-{n}")
                        try:
                            before = received()
                            times[side][n].append(timed(plans[n], store, out, env))
                            if side == "on":
                                exported += received() - before - 1  # the run's own span
                        finally:
                            store.close()
            slope = {}
            for side, by_n in times.items():
                small, large = (statistics.median(by_n[n]) for n in sizes)
                slope[side] = (large - small) / (sizes[1] - sizes[0]) * 1e6
                print(f"telemetry {side:3s} t({sizes[0]})={small:.3f}s t({sizes[1]})={large:.3f}s"
                      f"  per call {slope[side]:.1f} us")
            expected = opts.repeat * sum(sizes)
            print(f"telemetry on/off per call: {slope['on'] / slope['off']:.2f}x"
                  f"  (+{slope['on'] - slope['off']:.1f} us per call; -j {opts.max_concurrency},"
                  f" median of {opts.repeat}; {exported} of {expected} execute_tool spans received)")
    finally:
        collector.stdin.close()  # type: ignore[union-attr]
        collector.wait()


if __name__ == "__main__":
    main()
