"""A fork (``replay --from N``) or a resume of a routed run checks a tool's ``max_calls`` and the
run's ``max_tool_calls`` again against the calls the recording made, rather than taking the
recorded refusal or forgetting the recorded calls: with the same caps the call the recorded run
refused for budget is refused again (in a recorded turn and in a live one), with bigger ones it is
admitted. In process through ``engine/launch.py`` with a scripted provider and a real state database."""

from __future__ import annotations

import json

import pytest

from conftest import APP, write
from regkit import RecordSink as Sink
from toolloop_cli.engine.launch import Launch, RunOptions
from toolloop_cli.providers.scripted import ScriptedProvider

FINAL = '{"action": "final", "reason": "enough"}'
ANSWER = '{"answer": "done"}'


def call(x: int) -> str:
    return json.dumps({"action": "call", "tool": "limited", "args": {"x": x}, "reason": "r"})


def plan_file(tmp_path, name: str, *, max_calls: int = 2, max_tool_calls: int = 10, extra: str = "") -> str:
    write(tmp_path / f"{name}.reg.yml", f"""
        version: 1
        app_root: {APP}
        subagents:
          t:
            runner_defaults: {{tool_timeout_s: 10}}
            tools:
              limited:
                callable: testapp.tools:echo
                description: At most a few calls per run.
                max_calls: {max_calls}
                input_schema: {{type: object}}
                output_schema: {{}}
    """)
    return str(write(tmp_path / f"{name}.yml", f"""
        version: 1
        registry: {name}.reg.yml
        subagent: t
        mode: routed
        goal: Find x.
        allowed_tools: [limited]
        router_profile: {{provider: openai, model: m}}
        final_profile: {{provider: openai, model: m}}
        budget: {{max_iterations: 6, max_tokens: 100000, max_tool_calls: {max_tool_calls}, timeout_s: 30{extra}}}
        final_schema: {{type: object, required: [answer]}}
    """))



def start(launch: Launch, prepared, *replies: str) -> list[dict]:
    sink = Sink()
    launch.start(prepared, sink, handle_signals=False, providers={"openai": ScriptedProvider(list(replies))})
    return sink.got


def turns(records: list[dict]) -> list[tuple]:
    """Each call decision's turn, whether it was rejected, and its receipt's status."""
    status = {r["iteration"]: r["status"] for r in records if r["type"] == "receipt"}
    return [(r["iteration"], r["rejected"], status.get(r["iteration"])) for r in records
            if r["type"] == "decision" and r["action"] == "call"]


def recorded(tmp_path, **caps: int) -> str:
    """A run whose third call of ``limited`` was refused for budget at turn 3."""
    launch = Launch(tmp_path / "state")
    records = start(launch, launch.admit(plan_file(tmp_path, "plan", **caps), RunOptions()),
                    call(1), call(2), call(3), FINAL, ANSWER)
    assert turns(records) == [(1, None, "ok"), (2, None, "ok"), (3, "over_budget", None)]
    return records[-1]["run_id"]


@pytest.mark.parametrize("caps", [{"max_calls": 2}, {"max_calls": 5, "max_tool_calls": 2}])
def test_a_fork_with_the_same_caps_refuses_the_refused_call_again(tmp_path, caps):
    run_id = recorded(tmp_path, **caps)
    launch = Launch(tmp_path / "state")
    # turn 3 recorded: checked again against the two recorded calls
    records = start(launch, launch.fork(run_id, 4), FINAL, ANSWER)
    assert turns(records) == [(1, None, "ok"), (2, None, "ok"), (3, "over_budget", None)]
    # turn 3 live: the model proposes the call again
    records = start(launch, launch.fork(run_id, 3), call(3), FINAL, ANSWER)
    assert turns(records) == [(1, None, "ok"), (2, None, "ok"), (3, "over_budget", None)]


@pytest.mark.parametrize("caps, bigger", [({"max_calls": 2}, {"max_calls": 3}),
                                          ({"max_calls": 5, "max_tool_calls": 2}, {"max_calls": 5, "max_tool_calls": 3})])
def test_a_fork_with_bigger_caps_admits_the_call_the_recording_refused(tmp_path, caps, bigger):
    run_id = recorded(tmp_path, **caps)
    launch = Launch(tmp_path / "state")
    records = start(launch, launch.fork(run_id, 3, plan=plan_file(tmp_path, "bigger", **bigger)), call(3), FINAL, ANSWER)
    assert turns(records) == [(1, None, "ok"), (2, None, "ok"), (3, None, "ok")]


def test_a_resumed_run_counts_its_recorded_calls_toward_max_calls(tmp_path):
    launch = Launch(tmp_path / "state")
    path = plan_file(tmp_path, "plan", extra=", on_exceeded: pause")
    text = open(path).read().replace("max_iterations: 6", "max_iterations: 2")
    open(path, "w").write(text)
    records = start(launch, launch.admit(path, RunOptions()), call(1), call(2))
    assert records[-1]["outcome"] == "paused" and turns(records) == [(1, None, "ok"), (2, None, "ok")]
    launch = Launch(tmp_path / "state")
    records = start(launch, launch.resume(records[-1]["run_id"], raises={"max_iterations": 5}), call(3), FINAL, ANSWER)
    assert turns(records) == [(1, None, "ok"), (2, None, "ok"), (3, "over_budget", None)]
