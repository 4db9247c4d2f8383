"""A lane's call goes through as few coroutines as its governance needs: the gates answer without
one unless a person may have to, a plain call's first try is awaited by the call itself (the retry
loop only for a try that did not succeed), and the base executor's empty ``prepare`` is not
awaited. What that must keep: the same tries, at the same (mock-clock) times, the same receipts
and the same identity as the general path, which a run with an audit stream still takes; the
gates' answers; an executor's own ``prepare``."""

from __future__ import annotations

import random

import pytest
import trio

from test_calls_common import admitted, run_plan, tool
from test_calls_retry import TIMEOUT, base_delay, expected, random_case
from toolloop_cli.engine.executors import Executor
from toolloop_cli.engine.executors.process import ProcessExecutor
from toolloop_cli.engine.executors.sandbox import SandboxExecutor
from toolloop_cli.engine.executors.trio_loop import TrioExecutor
from toolloop_cli.engine.gates import Go, Refuse, check_call, check_lane_call

VARYING = ("receipt_id", "started_at", "finished_at", "duration_ms", "completion_seq")


@pytest.fixture(autouse=True)
def _reset():
    from testapp import identity_tools, tools

    tools.reset_governed()
    identity_tools.SEEN.clear()
    yield tools


def _steady(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k not in VARYING}


@pytest.mark.parametrize("seed", range(3))
def test_a_plain_call_tries_and_retries_as_the_general_path_does(tmp_path, seed, _reset):
    rng = random.Random(seed)
    tools, lanes, cases = {}, [], []
    for i in range(30):
        spec, call, case = random_case(rng, i)
        tools[f"t{i}"] = spec
        lanes.append({"item_key": str(i), "calls": [call]})
        cases.append(case)
    plan = admitted(tmp_path, tools, lanes=lanes, mc=30)
    audit: list = []
    general, _, _ = run_plan(plan, audit=audit, seed=seed)  # an audit stream: the general path
    general_tries = {k: len(v) for k, v in _reset.TRIES.items()}
    assert [e for e in audit if e["event"] == "retried"], "the cases retry something"
    _reset.reset_governed()
    plain, _, _ = run_plan(plan, seed=seed)  # no audit, no limits: the first try awaited by the call
    assert [_steady(r) for r in plain] == [_steady(r) for r in general]
    assert {k: len(v) for k, v in _reset.TRIES.items()} == general_tries
    for i, (r, case) in enumerate(zip(plain, cases)):
        assert (r["status"], r["attempts"]) == expected(case), case
        tries = _reset.TRIES[f"k{i}"]
        for n in range(1, len(tries)):  # each try after the timeout (if it hung) and its backoff
            base = base_delay(case["policy"], n)
            gap = tries[n] - tries[n - 1] - (TIMEOUT if case["mode"] == "timeout" else 0)
            assert base / 2 - 1e-6 <= gap <= base + 1e-6, (case, n, gap)


def test_a_plain_calls_identity_names_each_try(tmp_path, _reset):
    from testapp import identity_tools

    spec = tool("who_sync", retry={"max_attempts": 3, "backoff_s": 0.001, "on": ["error"]})
    spec["callable"] = "testapp.identity_tools:who_sync"
    plan = admitted(tmp_path, {"w": spec}, lanes=[{"item_key": "a", "calls": [
        {"tool": "w", "call_key": "c", "args": {"fail_first": True}}]}], mc=1)
    got, _, _ = run_plan(plan, mock=False)  # a thread call: a mock clock would jump past its timeout
    assert [(r["status"], r["attempts"]) for r in got] == [("ok", 2)]
    assert [(s["seq"], s["item_key"], s["call_key"], s["attempt"]) for s in identity_tools.SEEN] == [
        (0, "a", "c", 1), (0, "a", "c", 2)]
    assert identity_tools.SEEN[0]["idempotency_key"] == identity_tools.SEEN[1]["idempotency_key"]
    assert got[0]["result"]["attempt"] == 2


def test_only_an_executor_with_a_prepare_of_its_own_is_said_to_prepare():
    assert not Executor.prepares and not TrioExecutor.prepares
    assert ProcessExecutor.prepares and SandboxExecutor.prepares  # inherited from the process executor

    class Own(Executor):
        async def prepare(self, tool, args):
            return "ready"

    class Plain(Executor):
        pass

    assert Own.prepares and not Plain.prepares


class _Recording(TrioExecutor):
    """The trio executor with a prepare step of its own, which says what it did."""

    def __init__(self, fail: bool = False):
        self.log: list = []
        self.fail = fail

    async def prepare(self, tool, args):
        self.log.append(("prepare", trio.current_time()))
        await trio.sleep(2)  # before the deadline: not the call's time
        if self.fail:
            raise OSError("no room")
        return "ready"

    async def run(self, tool, args, prepared, slot):
        self.log.append(("run", prepared))
        return await super().run(tool, args, prepared, slot)


@pytest.mark.parametrize("fail", [False, True])
def test_an_executors_own_prepare_is_awaited_before_the_deadline(tmp_path, fail):
    from toolloop_cli.engine import RunContext, run_lanes

    plan = admitted(tmp_path, {"f": tool("flaky_async")},
                    lanes=[{"item_key": "a", "calls": [{"tool": "f", "args": {"key": "p"}}]}], mc=1, timeout=1)
    ctx = RunContext("run-test", plan.contract)
    executor = _Recording(fail)
    ctx.services.executors.install("trio", executor)  # type: ignore[union-attr]
    got: list = []

    async def main():
        await run_lanes(ctx, plan.lanes, 1, got.append)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    if fail:
        assert executor.log == [("prepare", 0)]
        assert (got[0].status, got[0].error["kind"]) == ("error", "worker_start")
    else:  # two seconds of prepare do not count against the one-second timeout
        assert executor.log == [("prepare", 0), ("run", "ready")]
        assert (got[0].status, got[0].result) == ("ok", {"key": "p"})


def test_a_lane_calls_gates_answer_as_check_call_does(tmp_path):
    tools = {
        "open": tool("echo"),
        "typed": tool("echo", input_schema={"type": "object", "required": ["n"],
                                            "properties": {"n": {"type": "integer"}}}),
        "gated": tool("echo", effect="write", approval="required"),
        "gated_typed": tool("echo", effect="write", approval="required",
                            input_schema={"type": "object", "properties": {"n": {"type": "integer"}}}),
    }
    plan = admitted(tmp_path, tools, lanes=[{"item_key": "a", "calls": [{"tool": t, "args": {"n": 1}}
                                                                       for t in tools]}], mc=1)
    from toolloop_cli.engine import RunContext

    specs = plan.contract.subagents["g"].tools
    answered = 0
    for approve in ("all", "none"):
        ctx = RunContext("run-test", plan.contract, approve=approve)
        for name in tools:
            for args in ({"n": 1}, {"n": "x"}, {}):
                for source in ("admitted", "payload"):
                    quick = check_lane_call(specs[name], args, source=source)
                    full = trio.run(lambda: check_call(ctx, specs[name], args, source=source, item_key="a",
                                                       call_key=name))
                    if quick is None:  # left to check_call: only a call a gate covers
                        assert specs[name].approval is not None
                        continue
                    answered += 1
                    assert isinstance(quick, (Go, Refuse)) and quick == full, (name, args, source)
    assert answered >= 16


def test_a_receipts_duration_is_rounded_as_round_does():
    import math

    from toolloop_cli.receipts import millis3

    rng = random.Random(3)
    values = [rng.random() * rng.choice([1e-3, 1, 10, 1e3, 1e5, 1e7]) for _ in range(200_000)]
    for _ in range(20_000):  # halves of a microsecond, and their neighbours
        half = (rng.randrange(10**7) + 0.5) / 1000
        values += [half, math.nextafter(half, 0), math.nextafter(half, math.inf)]
    values += [0.0, 1e-9, 999_999.9995, 1e7, 1e12 + 0.0005, 1e20]
    assert [millis3(v) for v in values] == [round(v, 3) for v in values]
