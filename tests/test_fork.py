"""What a recording can and cannot give back: the manifest that starts ``runs export``, a replay
that runs out of recorded answers (``fixture exhausted at turn N``, never the network), and forks
of a recorded routed run (``replay --from N``: recorded turns before N, live from N with the plan
given, writes denied from N unless ``--execute-writes``). In process through ``engine/launch.py``
with a scripted provider, a real state database and the test App's real tools; a few CLI
subprocesses for what users see."""

from __future__ import annotations

import json

import jsonschema
import pytest

from conftest import APP, jsonl, write
from toolloop_cli.engine.launch import Launch, RunOptions
from toolloop_cli.engine.replay import export_records
from toolloop_cli.errors import ConfigError, UsageError
from toolloop_cli.providers.scripted import ScriptedProvider
from toolloop_cli.record_schema import receipt_schema
from toolloop_cli.store import Store

REG = APP / "registry.yml"
KEY = "sk-fork-canary-51c0"
FINAL = '{"action": "final", "reason": "enough"}'


def call(tool: str, args: dict, reason: str = "r") -> str:
    return json.dumps({"action": "call", "tool": tool, "args": args, "reason": reason})


def plan_file(tmp_path, name: str = "plan.yml", *, tools: str = "[echo, marker, secret_echo, log_run]",
              server=None, budget: str = "{max_iterations: 6, max_tokens: 100000, max_tool_calls: 5, timeout_s: 30}",
              extra: str = ""):
    if server is None:
        profile = "{provider: openai, model: m, api_key_env: TL_TEST_KEY}"
    else:
        profile = f"{{provider: openai, model: m, base_url: '{server.openai_base}', api_key_env: TL_TEST_KEY}}"
    return write(tmp_path / name, f"""
        version: 1
        registry: {REG}
        subagent: t
        mode: routed
        goal: Find x.
        allowed_tools: {tools}
        router_profile: {profile}
        final_profile: {profile}
        budget: {budget}
        final_schema: {{type: object, required: [answer]}}
        {extra}
    """)


class Records:
    def __init__(self) -> None:
        self.got: list[dict] = []

    def write(self, record: dict) -> None:
        self.got.append(record)

    def flush(self) -> None:
        pass


def state(tmp_path):
    return tmp_path / "state"


def run_live(tmp_path, plan, *replies, options: RunOptions | None = None) -> list[dict]:
    """A routed run of ``plan`` in process, its model answered by ``replies``."""
    launch = Launch(state(tmp_path))
    prepared = launch.admit(plan, options or RunOptions())
    sink = Records()
    launch.start(prepared, sink, handle_signals=False, providers={"openai": ScriptedProvider(list(replies))})
    return sink.got


def fork(tmp_path, run_id: str, turn: int, *replies, plan=None, execute_writes: bool = False,
         provider: ScriptedProvider | None = None) -> list[dict]:
    launch = Launch(state(tmp_path))
    prepared = launch.fork(run_id, turn, plan=plan, execute_writes=execute_writes)
    sink = Records()
    provider = provider or ScriptedProvider(list(replies))
    launch.start(prepared, sink, handle_signals=False, providers={"openai": provider})
    return sink.got


def exported(tmp_path, run_id: str) -> list[dict]:
    store = Store(state(tmp_path), create=False)
    try:
        return export_records(store, store.get_run(run_id))
    finally:
        store.close()


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("TL_TEST_KEY", KEY)


# --- the export's manifest ---------------------------------------------------------------------


def test_an_export_starts_with_a_manifest_naming_what_it_cannot_reproduce(tmp_path):
    plan = plan_file(tmp_path)
    records = run_live(tmp_path, plan, call("secret_echo", {"user": "ann", "password": "pw-0b7e"}),
                       call("echo", {"x": 1}), FINAL, '{"answer": "done"}')
    run_id = records[-1]["run_id"]
    lines = exported(tmp_path, run_id)
    manifest, body = lines[0], lines[1:]
    assert manifest["type"] == "manifest" and manifest["run_id"] == run_id
    assert manifest["plan"] == str(plan) and manifest["contract_sha256"] == records[-1]["contract_sha256"]
    assert isinstance(manifest["toolloop_version"], str) and manifest["toolloop_version"]
    answers = [r for r in body if r["type"] == "model_answer"]
    assert len(answers) == 4 and manifest["counts"] == {"records": len(body) - 4, "model_answers": 4}
    assert [r for r in body if r["type"] != "model_answer"] == records  # the records as the run printed them
    not_captured = manifest["not_captured"]
    assert not_captured["child_runs"] == [] and not_captured["env"] == ["TL_TEST_KEY"]
    # every redacted value is named by its line (0-based: the manifest is line 0) and pointer
    where = {(body[at["record"] - 1]["type"], at["pointer"]) for at in not_captured["redacted"]}
    assert ("model_answer", "/text") in where  # the proposal's password, replaced in the reply
    assert ("decision", "/args/password") in where
    assert ("receipt", "/args/password") in where and ("receipt", "/result/token") in where
    for at in not_captured["redacted"]:
        line = lines[at["record"]]
        value = line
        for token in at["pointer"][1:].split("/"):
            value = value[token]
        assert "[REDACTED]" in value
    assert "pw-0b7e" not in json.dumps(lines) and KEY not in json.dumps(lines)
    validator = jsonschema.Draft202012Validator(receipt_schema())
    for line in lines:
        validator.validate(line)


def test_a_manifest_names_the_child_runs_exported_on_their_own(tmp_path):
    write(tmp_path / "reg.yml", f"""
        version: 1
        app_root: {APP}
        subagents:
          t:
            runner_defaults: {{max_depth: 1, tool_timeout_s: 10}}
            tools:
              echo:
                callable: testapp.tools:echo
                description: Returns its arguments.
                input_schema: {{type: object}}
                output_schema: {{}}
              research:
                plan: research.yml
                description: Research one question.
    """)
    profile = "{provider: openai, model: m, api_key_env: CHILD_KEY}"
    write(tmp_path / "research.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Research one question.
        allowed_tools: [echo]
        router_profile: {profile}
        final_profile: {profile}
        budget: {{max_iterations: 3, max_tokens: 100000, max_tool_calls: 2, timeout_s: 30}}
        final_schema: {{type: object, required: [answer]}}
    """)
    parent = write(tmp_path / "plan.yml", json.dumps({
        "version": 1, "registry": "reg.yml", "subagent": "t", "mode": "sequential",
        "calls": [{"tool": "research", "args": {"q": 1}}, {"tool": "research", "args": {"q": 2}}]}))
    records = run_live(tmp_path, parent, FINAL, '{"answer": "a"}', FINAL, '{"answer": "b"}')
    children = [r["child_run_id"] for r in records if r["type"] == "receipt"]
    assert len(set(children)) == 2 and None not in children
    manifest = exported(tmp_path, records[-1]["run_id"])[0]
    assert manifest["not_captured"]["child_runs"] == children
    assert manifest["not_captured"]["env"] == []  # the parent read no key: its children did
    assert exported(tmp_path, children[0])[0]["not_captured"]["env"] == ["CHILD_KEY"]
