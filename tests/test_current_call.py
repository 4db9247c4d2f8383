"""current_call(): the running call's identity in sync, trio, asyncio and retried calls, with an
idempotency key that is the same on every attempt and after a resume."""

from __future__ import annotations

import pytest

from test_calls_common import admitted, run_plan
from toolloop_cli import current_call
from toolloop_cli.engine.identity import idempotency_key


def itool(fn: str, **extra) -> dict:
    return {"callable": f"testapp.identity_tools:{fn}", "description": fn, "input_schema": {}, "output_schema": {},
            **extra}


def test_outside_a_call_it_says_so():
    with pytest.raises(LookupError):
        current_call()


@pytest.mark.parametrize("fn", ["who_sync", "who_trio", "who_asyncio"])
def test_every_worker_kind_sees_its_call(tmp_path, fn):
    plan = admitted(tmp_path, {"w": itool(fn)},
                    lanes=[{"item_key": "doc-1", "calls": [{"call_key": "first", "tool": "w", "args": {}}]}])
    got, _, _ = run_plan(plan, mock=False)
    result = got[0]["result"]
    assert result == {"run_id": "run-test", "seq": 0, "item_key": "doc-1", "call_key": "first", "attempt": 1,
                      "labels": {}, "idempotency_key": idempotency_key("run-test", 0)}


def test_the_key_is_the_same_on_every_attempt(tmp_path):
    from testapp import identity_tools

    identity_tools.SEEN.clear()
    tools = {"w": itool("who_sync", retry={"max_attempts": 2, "backoff_s": 0, "on": ["error"]})}
    plan = admitted(tmp_path, tools, calls=[{"tool": "w", "args": {"fail_first": True}}])
    got, _, _ = run_plan(plan, mock=False)
    assert got[0]["status"] == "ok" and got[0]["attempts"] == 2
    assert [s["attempt"] for s in identity_tools.SEEN] == [1, 2]
    assert len({s["idempotency_key"] for s in identity_tools.SEEN}) == 1
    assert idempotency_key("run-a", 3) != idempotency_key("run-a", 4) != idempotency_key("run-b", 4)
