"""The routed loop's own time per turn, against a bare loop written directly with httpx, side by side.

Both drive the same scripted model server on 127.0.0.1 (tests/modelserver.py) through N turns:
N-1 tool calls (a no-op sync tool) and a final answer. A loop's *own* time is its wall time minus
the time spent waiting for the model and running the tool:

- toolloop: ``toolloop run`` of a routed plan in this process (``execute_plan``: admission aside,
  with the journal, receipts, redaction, budgets and the JSON Lines records); the waits are the
  decisions' and the final answer's ``duration_ms`` and the receipts' ``duration_ms``;
- bare: an httpx client posting the same number of Chat Completions requests, parsing each reply
  as a decision and calling the tool function directly; the waits are timed around each request
  and each call.

Usage: python bench/bench_routed.py [--turns 20] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from modelserver import ModelServer  # noqa: E402

REGISTRY = """
version: 1
app_root: {app}
subagents:
  b:
    runner_defaults: {{tool_timeout_s: 10}}
    tools:
      noop:
        callable: testapp.tools:echo
        description: Returns its arguments.
        input_schema: {{type: object}}
        output_schema: {{}}
"""

PLAN = """
version: 1
registry: reg.yml
subagent: b
mode: routed
goal: Call noop as often as told, then finish.
router_profile: {{provider: openai, model: m, base_url: '{base}', api_key_env: BENCH_KEY}}
final_profile: {{provider: openai, model: m, base_url: '{base}', api_key_env: BENCH_KEY}}
budget: {{max_iterations: {turns}, max_tokens: 100000000, max_tool_calls: {turns}, timeout_s: 600}}
final_schema: {{type: object, required: [answer]}}
"""


def script(server: ModelServer, turns: int) -> None:
    calls = [json.dumps({"action": "call", "tool": "noop", "args": {"i": i}, "reason": "go"}) for i in range(turns - 1)]
    server.script(*calls, '{"action": "final", "reason": "done"}', '{"answer": 1}')


def toolloop_own(server: ModelServer, folder: Path, turns: int) -> tuple[float, float]:
    from toolloop_cli.engine.run import RunOptions, execute_plan
    from toolloop_cli.plan.admit import admit_plan
    from toolloop_cli.store import Store

    plan = admit_plan(folder / "plan.yml")
    store = Store(folder / f"state-{time.monotonic_ns()}")
    got: list = []
    script(server, turns)
    t0 = time.perf_counter()
    result = execute_plan(plan, store, got.append, RunOptions(handle_signals=False))
    wall = time.perf_counter() - t0
    store.close()
    assert result.summary["outcome"] == "final", result.summary
    answers = store_answers(folder, result.summary["run_id"])
    waits = sum(a["duration_ms"] for a in answers) + sum(r["duration_ms"] for r in got if r["type"] == "receipt")
    return wall, waits / 1000


def store_answers(folder: Path, run_id: str) -> list[dict]:
    from toolloop_cli.store import Store

    out = []
    for state in folder.glob("state-*"):
        store = Store(state, create=False)
        out.extend(store.model_answers_of(run_id))
        store.close()
    return out


def bare_own(server: ModelServer, turns: int) -> tuple[float, float]:
    import httpx

    sys.path.insert(0, str(ROOT / "tests" / "app"))
    from testapp.tools import echo

    script(server, turns)
    waits = 0.0
    messages = [{"role": "system", "content": "You pick tools."}, {"role": "user", "content": "Go."}]
    t0 = time.perf_counter()
    with httpx.Client(base_url=server.openai_base, headers={"Authorization": "Bearer k"}) as client:
        for _ in range(turns + 1):
            w = time.perf_counter()
            reply = client.post("/chat/completions", json={"model": "m", "messages": messages,
                                                            "response_format": {"type": "json_object"}})
            waits += time.perf_counter() - w
            text = reply.json()["choices"][0]["message"]["content"]
            decision = json.loads(text)
            if decision.get("action") == "call":
                w = time.perf_counter()
                result = echo(**decision["args"])
                waits += time.perf_counter() - w
                messages.append({"role": "user", "content": json.dumps(result)})
    return time.perf_counter() - t0, waits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="also print the two figures as one JSON line")
    a = ap.parse_args()
    os.environ["BENCH_KEY"] = "bench-key"
    server = ModelServer().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "reg.yml").write_text(REGISTRY.format(app=ROOT / "tests" / "app"))
            (folder / "plan.yml").write_text(PLAN.format(base=server.openai_base, turns=a.turns))
            toolloop_own(server, folder, a.turns)  # warm up imports
            ours, bare = [], []
            for _ in range(a.repeat):
                wall, waits = toolloop_own(server, folder, a.turns)
                ours.append((wall - waits) / a.turns)
                wall, waits = bare_own(server, a.turns)
                bare.append((wall - waits) / a.turns)
    finally:
        server.stop()
    o, b = statistics.median(ours) * 1000, statistics.median(bare) * 1000
    print(f"bare httpx loop  own time per turn {b:.3f} ms")
    print(f"toolloop routed  own time per turn {o:.3f} ms  (whole run: journal, receipts, budgets, records)")
    print(f"extra per turn: {o - b:.3f} ms  (goal <= 2 ms, aim <= 0.5 ms; {a.turns} turns, median of {a.repeat})")
    if a.json:
        print(json.dumps({"toolloop_ms": o, "bare_ms": b, "turns": a.turns, "repeat": a.repeat}))


if __name__ == "__main__":
    main()
