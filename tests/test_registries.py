"""The open registries: providers, executors and supervisor rules are each read from one table,
so a backend registered there reaches admission, the run and the docs with no other change.

This module doubles as the backends it registers (its ``KIND`` is a provider, its ``make`` an
executor), the way a new backend module would."""

from __future__ import annotations

import json
import typing

import pytest

from conftest import ROOT, write
from test_calls_common import tool
from test_routed_loop import ANSWER, CALL_ECHO, FINAL, REG, kinds, run
from toolloop_cli.engine.executors import EXECUTORS, Executor
from toolloop_cli.errors import ConfigError
from toolloop_cli.plan.admit import admit_plan
from toolloop_cli.plan.models import RuleDecl
from toolloop_cli.providers import PROVIDERS, ModelReply, ModelRequest, Profile, ProviderKind, provider_kind
from toolloop_cli.providers.scripted import ScriptedProvider
from toolloop_cli.router.supervisor import RULES

# ---------------------------------------------------------------------------------------------
# providers


class _Echo:
    """An in-process provider: scripted replies, charged 3 and 2 tokens each."""

    def __init__(self, replies: list[str]):
        self.replies = replies

    async def complete(self, request: ModelRequest, timeout_s: float) -> ModelReply:
        return ModelReply(self.replies.pop(0), 3, 2, request.model or "echo")

    async def aclose(self) -> None:
        return None


MADE: list[Profile] = []
REPLIES: list[str] = []  # shared by the providers of every role, answered in turn


def _make(profile: Profile, *, env, **_) -> _Echo:
    MADE.append(profile)
    return _Echo(REPLIES)


def _check(profile: Profile, at: tuple, admission) -> Profile | None:
    if profile.model != "echo-1":
        admission.add("TL410", "the echo provider answers as model echo-1 only", at + ("model",), "set model: echo-1")
        return None
    return profile


KIND = ProviderKind(make=_make, check=_check)


def echo_plan(tmp_path, model: str) -> str:
    profile = f"{{provider: echo, model: {model}}}"
    return str(write(tmp_path / "plan.yml", f"""
        version: 1
        registry: {REG}
        subagent: t
        mode: routed
        goal: Find x.
        allowed_tools: [echo]
        router_profile: {profile}
        final_profile: {profile}
        budget: {{max_iterations: 4, max_tokens: 1000, max_tool_calls: 2, timeout_s: 30}}
        final_schema: {{type: object, required: [answer]}}
    """))


def test_a_provider_registered_in_the_table_is_admitted_checked_and_drives_a_run(tmp_path, monkeypatch):
    monkeypatch.setitem(PROVIDERS, "echo", __name__)
    with pytest.raises(ConfigError) as refused:  # its own profile check, reached through the table
        admit_plan(echo_plan(tmp_path, "other"))
    assert [(p.code, p.message) for p in refused.value.problems] == [
        ("TL410", "the echo provider answers as model echo-1 only")] * 2
    MADE.clear()
    REPLIES[:] = [CALL_ECHO, FINAL, ANSWER]
    records, summary = run(tmp_path, echo_plan(tmp_path, "echo-1"))
    assert [p.provider for p in MADE] == ["echo", "echo"]  # one per role, made by its factory
    assert kinds(records) == [("decision", None), ("receipt", "ok"), ("decision", None), ("summary", "ok")]
    assert summary["final"] == {"answer": 1} and summary["loop"]["tokens"] == {"input": 9, "output": 6}


def test_a_name_outside_the_table_is_refused_with_the_names_it_holds(tmp_path):
    with pytest.raises(ConfigError) as refused:
        admit_plan(echo_plan(tmp_path, "echo-1"))
    (problem, _) = refused.value.problems
    assert (problem.code, problem.message, problem.hint) == (
        "TL410", "unknown provider 'echo'", f"use one of: {', '.join(PROVIDERS)}")
    assert list(PROVIDERS)[:3] == ["openai", "anthropic", "replay"]
    with pytest.raises(ValueError, match="unknown provider 'echo'"):
        provider_kind("echo")


def test_an_instance_on_the_run_options_answers_every_profile_naming_it(tmp_path):
    provider = ScriptedProvider([CALL_ECHO, FINAL, ANSWER])
    path = str(write(tmp_path / "plan.yml", f"""
        version: 1
        registry: {REG}
        subagent: t
        mode: routed
        goal: Find x.
        allowed_tools: [echo]
        router_profile: {{provider: anthropic, model: m, max_output_tokens: 10}}
        final_profile: {{provider: anthropic, model: m, max_output_tokens: 10}}
        budget: {{max_iterations: 4, max_tokens: 1000, max_tool_calls: 2, timeout_s: 30}}
        final_schema: {{type: object, required: [answer]}}
    """))
    records, summary = run(tmp_path, path, providers={"anthropic": provider})
    assert summary["outcome"] == "final" and [r.role for r in provider.requests] == ["router", "router", "final"]
    assert all(r.max_tokens == 10 for r in provider.requests)  # the profile's settings reach the instance


# ---------------------------------------------------------------------------------------------
# executors


class _Recorder(Executor):
    """Named like the executor it replaces, with traits of its own: the call path must act on the
    traits, never on the name."""

    name = "process"  # a worker process copies arguments, but this executor says it does not
    abandons = True
    holds_slot = False
    seen: list = []

    async def run(self, tool, args, prepared, slot):
        _Recorder.seen.append((args, slot))
        return tool.fn(**args)


def make(run) -> _Recorder:
    return _Recorder()


def test_the_call_path_acts_on_an_executors_traits_not_its_name(tmp_path, monkeypatch):
    from test_calls_common import admitted, run_plan

    monkeypatch.setitem(EXECUTORS, "thread", __name__)  # sync callables now run on _Recorder
    _Recorder.seen = []
    plan = admitted(tmp_path, {"e": tool("echo", concurrency={"max_in_flight": 1})},
                    calls=[{"tool": "e", "args": {"n": {"inner": [1, 2]}}}])
    records, _ctx, _state = run_plan(plan)
    assert [r["status"] for r in records] == ["ok"]
    ((args, slot),) = _Recorder.seen
    given = plan.lanes[0].calls[0].args
    assert args == given and args["n"] is not given["n"]  # copied: it does not say it copies
    assert slot is None  # it abandons, but holds no slot: the call path gives the slot back itself


def test_every_executor_kind_in_the_table_makes_an_executor_with_its_traits():
    import importlib

    for kind, module in EXECUTORS.items():
        made = importlib.import_module(module, "toolloop_cli.engine.executors").make
        assert callable(made), kind
    from toolloop_cli.engine.executors.process import ProcessExecutor
    from toolloop_cli.engine.executors.thread import ThreadExecutor
    from toolloop_cli.engine.executors.trio_loop import TrioExecutor

    assert (ThreadExecutor.abandons, ThreadExecutor.holds_slot, ThreadExecutor.copies_arguments) == (True, True, False)
    assert (ProcessExecutor.abandons, ProcessExecutor.copies_arguments) == (False, True)
    assert TrioExecutor.in_calling_task and not ThreadExecutor.in_calling_task


def test_no_module_of_the_call_path_tests_an_executors_name():
    import re

    engine = ROOT / "toolloop_cli" / "engine"
    found = []
    for path in [*engine.glob("*.py"), *(ROOT / "toolloop_cli" / "contract").glob("*.py")]:
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            if re.search(r"\.name\s*(==|!=|not in|in)\s*[\"'(]", line) and "executor" in line.lower():
                found.append(f"{path.name}:{n}: {line.strip()}")
    assert found == []


# ---------------------------------------------------------------------------------------------
# supervisor rules


def test_the_plan_model_the_schema_and_the_docs_list_every_rule_kind():
    assert typing.get_args(RuleDecl.model_fields["when"].annotation) == tuple(RULES)
    schema = json.loads((ROOT / "docs" / "schemas" / "plan.schema.json").read_text())
    enums = [d["properties"]["when"]["enum"] for d in schema.get("$defs", {}).values()
             if "when" in d.get("properties", {}) and "enum" in d["properties"]["when"]]
    assert enums == [list(RULES)]
    people = (ROOT / "docs" / "people.md").read_text()
    for name, kind in RULES.items():
        assert f"`{name} {kind.signature()}`" in people, name


def test_admission_takes_each_rules_fields_and_check_from_the_table(tmp_path, monkeypatch):
    from toolloop_cli.router.supervisor import RuleKind

    def refuse_big(rule):
        return ("gte", "gte must stay below 100", "use a smaller number") if (rule.gte or 0) >= 100 else None

    monkeypatch.setitem(RULES, "iteration_reached", RuleKind(("gte",), ("tool",), RULES["iteration_reached"].reason,
                                                             doc="", check=refuse_big))
    path = str(write(tmp_path / "plan.yml", f"""
        version: 1
        registry: {REG}
        subagent: t
        mode: routed
        goal: Find x.
        router_profile: {{provider: openai, model: m}}
        final_profile: {{provider: openai, model: m}}
        budget: {{max_iterations: 4, max_tokens: 1000, max_tool_calls: 2, timeout_s: 30}}
        supervisor:
          on_violation: abort
          rules:
            - {{when: iteration_reached, gte: 100, tool: echo}}
    """))
    with pytest.raises(ConfigError) as refused:
        admit_plan(path)
    assert [(p.code, p.message) for p in refused.value.problems] == [("TL420", "gte must stay below 100")]
