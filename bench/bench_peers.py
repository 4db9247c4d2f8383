#!/usr/bin/env python3
"""The routed loop against agent frameworks, all driving the same loopback model server.

Each side runs N turns against bench/loopback.py (one server, in a process of its own): N-1
calls of the same no-op tool (it returns its arguments, ``{"i": i}``) and a final answer.

  toolloop run    the CLI, as a user runs it: ``toolloop run plan.yml --format jsonl`` of a routed
                  plan (admission, the journal in SQLite, receipts, budgets, JSON Lines output)
  toolloop        the same plan through ``execute_plan`` in a small driver, so that the loop
                  alone can be timed apart from start-up and admission
  bare (text)     a loop written directly with httpx, speaking toolloop's protocol
  bare (tools)    the same loop speaking native tool calling
  agents-sdk      the OpenAI Agents SDK: ``Agent`` + ``Runner.run`` over ``OpenAIChatCompletionsModel``
  pydantic-ai     Pydantic AI: ``Agent`` over ``OpenAIChatModel``, ``run_sync``
  langgraph       LangGraph's prebuilt ReAct agent (``create_react_agent``) over ``ChatOpenAI``

toolloop's routed loop uses its own protocol: the assistant's text is one JSON decision, and
when the router says ``final`` a second request writes the answer (N+1 requests). The
frameworks use native tool calling: the server answers them with ``tool_calls`` entries, then a
text answer (N requests). The server's replies are encoded in advance either way, so a turn
costs it the same small work whichever client asks.

Every side is a process of its own, started fresh each round; the sides alternate in a rotating
order, and medians over rounds are reported. Per side: the whole process (wall time; CPU time,
user + system; peak RSS, from wait4) and the loop alone (wall and ``time.process_time()`` around
the run, measured inside the process after imports and set-up). A side's own CPU per turn is its
loop's CPU time minus the bare loop's of the same protocol, over N.

Usage: python bench/bench_peers.py [--turns 100] [--rounds 5] [--only toolloop langgraph ...]
       [--json] [--editable]
Needs the ``bench`` extra: pip install -e '.[bench]'
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

GOAL = "Call noop as often as told, then finish."

# name -> (protocol, module that must be importable, in-loop timing available)
SIDES = {
    "toolloop run": ("text", "toolloop_cli", False),
    "toolloop": ("text", "toolloop_cli", True),
    "bare (text)": ("text", "httpx", True),
    "bare (tools)": ("tools", "httpx", True),
    "agents-sdk": ("tools", "agents", True),
    "pydantic-ai": ("tools", "pydantic_ai", True),
    "langgraph": ("tools", "langgraph", True),
}
PEERS = ("agents-sdk", "pydantic-ai", "langgraph")


# -- the children: one run each, the loop timed from inside --------------------------------------


def noop(i: int) -> dict:
    """Do nothing; return the arguments."""
    return {"i": i}


class Timer:
    def __enter__(self) -> "Timer":
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall, self.cpu = time.perf_counter() - self.t0, time.process_time() - self.c0


def child_toolloop(base: str, turns: int, folder: Path) -> tuple[Timer, object]:
    import orjson

    from toolloop_cli.engine.run import RunOptions, execute_plan
    from toolloop_cli.plan.admit import admit_plan
    from toolloop_cli.store import Store

    plan = admit_plan(folder / "plan.yml")
    store = Store(folder / "state")
    out = sys.stdout.buffer

    def emit(record: dict) -> None:
        out.write(orjson.dumps(record) + b"\n")

    with Timer() as t:
        result = execute_plan(plan, store, emit, RunOptions(handle_signals=False))
    store.close()
    if result.summary["outcome"] != "final":
        raise SystemExit(f"toolloop's routed run did not end final: {result.summary}")
    return t, "final: 1"


def child_bare(base: str, turns: int, protocol: str) -> tuple[Timer, object]:
    import httpx

    messages: list[dict] = [{"role": "system", "content": GOAL}, {"role": "user", "content": "Go."}]
    tools = [{"type": "function", "function": {"name": "noop", "description": "Do nothing.", "parameters": {
        "type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]}}}]
    answer = None
    client = httpx.Client(base_url=base, headers={"Authorization": "Bearer k"})  # set-up, as the peers' clients
    with Timer() as t, client:
        for _ in range(turns + 1):
            if protocol == "text":
                reply = client.post("/chat/completions", json={"model": "m", "messages": messages,
                                                                "response_format": {"type": "json_object"}})
                decision = json.loads(reply.json()["choices"][0]["message"]["content"])
                if decision.get("action") == "call":
                    messages.append({"role": "user", "content": json.dumps(noop(**decision["args"]))})
                elif decision.get("action") != "final":
                    answer = decision
                    break
            else:
                reply = client.post("/chat/completions", json={"model": "m", "messages": messages, "tools": tools})
                message = reply.json()["choices"][0]["message"]
                if not message.get("tool_calls"):
                    answer = message["content"]
                    break
                messages.append(message)
                for call in message["tool_calls"]:
                    result = noop(**json.loads(call["function"]["arguments"]))
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)})
    return t, answer


def child_agents_sdk(base: str, turns: int) -> tuple[Timer, object]:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # nothing leaves 127.0.0.1
    model = OpenAIChatCompletionsModel(model="m", openai_client=AsyncOpenAI(base_url=base, api_key="k"))
    agent = Agent(name="bench", instructions=GOAL, tools=[function_tool(noop)], model=model)
    with Timer() as t:
        result = asyncio.run(Runner.run(agent, "Go.", max_turns=turns + 5))
    return t, result.final_output


def child_pydantic_ai(base: str, turns: int) -> tuple[Timer, object]:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    model = OpenAIChatModel("m", provider=OpenAIProvider(base_url=base, api_key="k"))
    agent = Agent(model, instructions=GOAL, tools=[noop])
    with Timer() as t:
        result = agent.run_sync("Go.", usage_limits=UsageLimits(request_limit=turns + 5))
    return t, result.output


def child_langgraph(base: str, turns: int) -> tuple[Timer, object]:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    llm = ChatOpenAI(model="m", base_url=base, api_key="k")
    agent = create_react_agent(llm, [tool(noop)], prompt=GOAL)
    with Timer() as t:
        state = agent.invoke({"messages": [("user", "Go.")]}, config={"recursion_limit": 2 * turns + 10})
    return t, state["messages"][-1].content


def child(name: str, base: str, turns: int, folder: Path, report: Path) -> None:
    runs = {
        "toolloop": lambda: child_toolloop(base, turns, folder),
        "bare (text)": lambda: child_bare(base, turns, "text"),
        "bare (tools)": lambda: child_bare(base, turns, "tools"),
        "agents-sdk": lambda: child_agents_sdk(base, turns),
        "pydantic-ai": lambda: child_pydantic_ai(base, turns),
        "langgraph": lambda: child_langgraph(base, turns),
    }
    t, answer = runs[name]()
    report.write_text(json.dumps({"loop_wall": t.wall, "loop_cpu": t.cpu, "answer": str(answer)}))


# -- the parent -------------------------------------------------------------------------------


def available(names: list[str]) -> tuple[list[str], list[str]]:
    have, missing = [], []
    for n in names:
        (have if importlib.util.find_spec(SIDES[n][1]) is not None else missing).append(n)
    return have, missing


def measure(names: list[str], turns: int, rounds: int, install, folder: Path) -> dict:
    from _measure import median, run_child
    from bench_routed import PLAN, REGISTRY
    from loopback import Loopback

    env = {**install.env, "BENCH_KEY": "bench-key", "OPENAI_API_KEY": "k", "OPENAI_AGENTS_DISABLE_TRACING": "1",
           "LANGSMITH_TRACING": "false", "LANGCHAIN_TRACING_V2": "false", "PYTHONPATH": os.pathsep.join(
               p for p in (install.env.get("PYTHONPATH"), str(ROOT / "tests" / "app")) if p)}
    got: dict[str, list[dict]] = {n: [] for n in names}
    with Loopback() as server:
        (folder / "reg.yml").write_text(REGISTRY.format(app=ROOT / "tests" / "app"))
        (folder / "plan.yml").write_text(PLAN.format(base=server.base, turns=turns))
        run_no = 0
        for r in range(-1, rounds):  # round -1 warms the page cache and is not counted
            order = names[r % len(names):] + names[:r % len(names)] if r >= 0 else names
            for name in order:
                run_no += 1
                protocol = SIDES[name][0]
                server.script(protocol, turns)
                report = folder / f"report-{run_no}.json"
                if name == "toolloop run":
                    cmd = install.toolloop("run", "plan.yml", "--format", "jsonl", "--state-dir",
                                           str(folder / f"state-{run_no}"))
                else:
                    work = folder / f"run-{run_no}"
                    work.mkdir()
                    (work / "plan.yml").write_text((folder / "plan.yml").read_text())
                    (work / "reg.yml").write_text((folder / "reg.yml").read_text())
                    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--base", server.base,
                           "--turns", str(turns), "--folder", str(work), "--report", str(report)]
                usage = run_child(cmd, folder, env=env)
                server.check(protocol, turns, name)
                row = {"wall": usage.wall, "cpu": usage.cpu, "rss_mib": usage.rss_mib}
                if report.exists():
                    inner = json.loads(report.read_text())
                    if "1" not in inner["answer"]:
                        raise SystemExit(f"{name} ended without the scripted answer: {inner['answer']!r}")
                    row.update(loop_wall=inner["loop_wall"], loop_cpu=inner["loop_cpu"])
                if r >= 0:
                    got[name].append(row)
    out: dict = {"turns": turns, "rounds": rounds, "sides": {}}
    for name, rows in got.items():
        out["sides"][name] = {k: median([row[k] for row in rows]) for k in rows[0]}
    for name, side in out["sides"].items():
        bare = out["sides"].get(f"bare ({SIDES[name][0]})")
        if bare and "loop_cpu" in side and not name.startswith("bare"):
            side["own_cpu_per_turn_ms"] = (side["loop_cpu"] - bare["loop_cpu"]) / turns * 1000
            side["own_wall_per_turn_ms"] = (side["loop_wall"] - bare["loop_wall"]) / turns * 1000
    peers = [n for n in PEERS if n in out["sides"]]
    if peers:
        ratios = {}
        for ours, key in (("toolloop run", "wall"), ("toolloop run", "cpu"), ("toolloop run", "rss_mib"),
                          ("toolloop", "loop_wall"), ("toolloop", "loop_cpu")):
            if ours in out["sides"]:
                fastest = min(peers, key=lambda p: out["sides"][p][key])
                ratios[f"{ours}: {key}"] = {"ratio": out["sides"][ours][key] / out["sides"][fastest][key],
                                            "fastest": fastest}
        out["ratios"] = ratios
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", nargs="*", choices=list(SIDES), help="these sides only (default: all installed)")
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    ap.add_argument("--editable", action="store_true", help="run this checkout instead of its wheel")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--base", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--report", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.base, a.turns, Path(a.folder), Path(a.report))
        return

    from _install import Install
    from _measure import load_text

    names, missing = available(a.only or list(SIDES))
    if missing:
        print(f"not installed, left out: {', '.join(missing)} (pip install -e '.[bench]')", file=sys.stderr)
    before = load_text()
    with Install(editable=a.editable) as install:
        got = measure(names, a.turns, a.rounds, install, install.tmp)
        got["toolloop_install"] = install.what
    got["load"] = f"{before} -> {load_text()}"
    print(f"{a.turns} turns, median of {a.rounds} rounds; {got['load']}; toolloop: {got['toolloop_install']}")
    print(f"{'side':<14} {'wall s':>7} {'CPU s':>7} {'RSS MiB':>8} {'loop wall s':>12} {'loop CPU s':>11}"
          f" {'own CPU/turn ms':>16} {'own wall/turn ms':>17}")
    for name, s in got["sides"].items():
        def f(key: str, fmt: str, s: dict = s) -> str:
            return format(s[key], fmt) if key in s else "-"
        print(f"{name:<14} {f('wall', '7.3f')} {f('cpu', '7.3f')} {f('rss_mib', '8.1f')} {f('loop_wall', '12.3f')}"
              f" {f('loop_cpu', '11.3f')} {f('own_cpu_per_turn_ms', '16.2f')} {f('own_wall_per_turn_ms', '17.2f')}")
    for what, r in got.get("ratios", {}).items():
        print(f"{what} / fastest peer ({r['fastest']}): {r['ratio']:.3f}")
    if a.json:
        print(json.dumps(got))


if __name__ == "__main__":
    main()
