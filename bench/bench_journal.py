"""Per-call cost of the journal: the same run with the SQLite state store and with a store that
keeps nothing, side by side in one process.

Both sides call ``execute_plan`` on the same admitted plan (one no-op call per lane, lanes fed
as with --lanes), with the same JSON Lines output to /dev/null. The "journal" side journals the
run, its lanes and calls, commits every receipt (batched, on the journal thread) before it is
written, and for at-most-once writes commits a start marker before each call. The "no journal"
side has the same methods doing nothing. Cost per call is the slope between a small and a large
run, so fixed costs cancel out:

    slope = (t(large) - t(small)) / (large - small)

Usage: python bench/bench_journal.py [--small 2000] [--large 20000] [--repeat 5] [-j 4]
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
        description: Do nothing (async); a read.
        input_schema: {{type: object, additionalProperties: false}}
        output_schema: {{type: object}}
      write:
        callable: demo_app.tools:noop_async
        description: Do nothing (async); a write, so its start is committed before it runs.
        effect: write
        input_schema: {{type: object, additionalProperties: false}}
        output_schema: {{type: object}}
"""


class NullStore:
    """The Store's methods the engine calls, keeping nothing."""

    def create_run(self, run: dict) -> None: ...
    def journal_calls(self, run_id: str, lanes, calls) -> None:
        for _ in lanes:
            pass
        for _ in calls:
            pass
    def reopen_run(self, run_id: str) -> None: ...
    def finish_run(self, *args, **kw) -> None: ...
    def mark_started(self, run_id: str, seq: int) -> None: ...
    def put_receipts(self, records: list[dict]) -> None: ...
    def controls_after(self, run_id: str, n: int) -> list:
        return []
    def get_run(self, run_id: str) -> None:
        return None
    def describe_run(self, run_id: str, labels, contract) -> None: ...
    def chain_head(self, run_id: str) -> None:
        return None
    def get(self, key: str) -> None:
        return None
    def put(self, key: str, tool: str, result) -> None: ...


def plan_for(folder: Path, n: int, tool: str, mc: int):
    plan = folder / "plan.yml"
    lanes = "".join(json.dumps({"item_key": f"i{i}", "calls": [{"tool": tool, "args": {}}]}) + "\n" for i in range(n))
    return admit_plan(plan, lanes=io.BytesIO(lanes.encode()), max_concurrency=mc)


def timed(plan, store, out) -> float:
    def emit(record: dict) -> None:
        out.write(orjson.dumps(record) + b"\n")

    t0 = time.perf_counter()
    result = execute_plan(plan, store, emit, RunOptions(handle_signals=False))
    elapsed = time.perf_counter() - t0
    assert result.summary["status"] == "ok", result.summary
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--large", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("-j", "--max-concurrency", type=int, default=4)
    opts = ap.parse_args()
    sizes = (opts.small, opts.large)
    with tempfile.TemporaryDirectory() as tmp, open(os.devnull, "wb") as out:
        folder = Path(tmp)
        (folder / "reg.yml").write_text(REGISTRY.format(app_root=ROOT / "registries"))
        (folder / "plan.yml").write_text(f"version: 1\nregistry: reg.yml\nsubagent: b\nmode: parallel\n"
                                         f"max_concurrency: {opts.max_concurrency}\nlanes: []\n")
        for tool in ("read", "write"):
            plans = {n: plan_for(folder, n, tool, opts.max_concurrency) for n in sizes}
            times: dict[str, dict[int, list[float]]] = {"no journal": {n: [] for n in sizes},
                                                        "journal": {n: [] for n in sizes}}
            for r in range(opts.repeat):  # interleaved, so drift hits both sides alike
                for n in sizes:
                    times["no journal"][n].append(timed(plans[n], NullStore(), out))
                    store = Store(folder / f"state-{tool}-{r}-{n}")
                    try:
                        times["journal"][n].append(timed(plans[n], store, out))
                    finally:
                        store.close()
            slope = {}
            for name, by_n in times.items():
                small, large = (statistics.median(by_n[n]) for n in sizes)
                slope[name] = (large - small) / (sizes[1] - sizes[0]) * 1e6
                print(f"{tool:5s} {name:10s} t({sizes[0]})={small:.3f}s t({sizes[1]})={large:.3f}s"
                      f"  per call {slope[name]:.1f} us")
            print(f"{tool:5s} journal/no journal per call: {slope['journal'] / slope['no journal']:.2f}x"
                  f"  (+{slope['journal'] - slope['no journal']:.1f} us per call; -j {opts.max_concurrency},"
                  f" median of {opts.repeat})")


if __name__ == "__main__":
    main()
