"""Retries: bounded attempts, exponential backoff with jitter, capped; only the
outcomes a tool's policy names are retried; schema failures never. Randomised over policies and
failure counts, under trio's mock clock: no wall time."""

from __future__ import annotations

import random

import pytest

from test_calls_common import admitted, run_plan, tool
from toolloop_cli.contract.compiled import RetryPolicy

TIMEOUT = 1.0


@pytest.fixture(autouse=True)
def _reset():
    from testapp import tools

    tools.reset_governed()
    yield tools


def random_case(rng: random.Random, i: int) -> tuple[dict, dict, dict]:
    backoff = round(rng.uniform(0.001, 2.0), 3)
    policy = {"max_attempts": rng.randint(1, 6), "backoff_s": backoff,
              "on": rng.choice([["error"], ["timeout"], ["error", "timeout"]])}
    if rng.random() < 0.6:
        policy["max_backoff_s"] = round(backoff * rng.uniform(1, 8), 3)
    mode = rng.choice(["error", "timeout"])
    failures = rng.randint(0, 7)
    spec = tool("flaky_async", timeout_s=TIMEOUT, retry=policy)
    call = {"tool": f"t{i}", "args": {"key": f"k{i}", "failures": failures, "hang": mode == "timeout"}}
    return spec, call, {"policy": policy, "mode": mode, "failures": failures}


def expected(case: dict) -> tuple[str, int]:
    p, mode, f = case["policy"], case["mode"], case["failures"]
    if mode in p["on"]:
        attempts = min(f + 1, p["max_attempts"])
        return ("ok" if f < p["max_attempts"] else mode), attempts
    return ("ok" if f == 0 else mode), 1


def base_delay(p: dict, attempt: int) -> float:
    base = p["backoff_s"] * 2 ** (attempt - 1)
    return min(base, p["max_backoff_s"]) if "max_backoff_s" in p else base


@pytest.mark.parametrize("seed", range(4))
def test_attempts_and_backoff_follow_random_policies(tmp_path, seed, _reset):
    rng = random.Random(seed)
    tools, calls, cases = {}, [], []
    for i in range(40):
        spec, call, case = random_case(rng, i)
        tools[f"t{i}"] = spec
        calls.append(call)
        cases.append(case)
    plan = admitted(tmp_path, tools, lanes=[{"item_key": str(i), "calls": [c]} for i, c in enumerate(calls)], mc=40)
    audit: list = []
    got, _, _ = run_plan(plan, audit=audit, seed=seed)  # mock clock: hours of backoff in no time
    retried = [e for e in audit if e["event"] == "retried"]
    for i, (r, case) in enumerate(zip(got, cases)):
        status, attempts = expected(case)
        assert (r["status"], r["attempts"]) == (status, attempts), case
        tries = _reset.TRIES[f"k{i}"]
        assert len(tries) == attempts
        delays = [e["retry_in_s"] for e in retried if e["seq"] == r["seq"]]
        assert len(delays) == attempts - 1
        for n, delay in enumerate(delays, start=1):
            base = base_delay(case["policy"], n)
            assert base / 2 - 1e-6 <= delay <= base + 1e-6, (case, n, delay)
            # the next try starts exactly one timeout (if it hung) plus the backoff later
            gap = tries[n] - tries[n - 1] - (TIMEOUT if case["mode"] == "timeout" else 0)
            assert gap == pytest.approx(delay, abs=1e-5)


def test_backoff_is_exponential_with_jitter_and_capped():
    rng = random.Random(7)
    for _ in range(2000):
        p = RetryPolicy(max_attempts=10, backoff_s=rng.uniform(0, 3), max_backoff_s=rng.choice([None, rng.uniform(0, 10)]),
                        on=frozenset({"error"}))
        attempt = rng.randint(1, 12)
        base = p.backoff_s * 2 ** (attempt - 1)
        if p.max_backoff_s is not None:
            base = min(base, p.max_backoff_s)
        d = p.delay(attempt, rng.random())
        assert base / 2 <= d <= base
        assert p.delay(attempt, 0.0) == pytest.approx(base / 2) and p.delay(attempt, 1.0) == pytest.approx(base)


def test_schema_failures_are_never_retried(tmp_path):
    spec = tool("stamp", retry={"max_attempts": 5, "backoff_s": 0.1, "on": ["error", "timeout"]},
                output_schema={"type": "object", "required": ["missing"]})
    plan = admitted(tmp_path, {"wrong": spec}, calls=[{"tool": "wrong", "args": {"key": "x"}}])
    audit: list = []
    got, _, _ = run_plan(plan, audit=audit)
    assert [(r["status"], r["attempts"]) for r in got] == [("invalid_output", 1)]
    assert not [e for e in audit if e["event"] == "retried"]


def test_an_error_is_not_retried_when_the_policy_names_only_timeouts(tmp_path, _reset):
    spec = tool("flaky_async", retry={"max_attempts": 4, "backoff_s": 1, "on": ["timeout"]})
    plan = admitted(tmp_path, {"f": spec}, calls=[{"tool": "f", "args": {"key": "x", "failures": 2}}])
    got, _, _ = run_plan(plan)
    assert (got[0]["status"], got[0]["attempts"]) == ("error", 1)
    assert got[0]["error"] == {"kind": "RuntimeError", "message": "planned failure of x"}
