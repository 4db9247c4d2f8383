"""How redaction treats values and text: values at pointers replaced, keys and other values left
as they are, whole secrets scrubbed from text (short ones only as whole tokens); the credential
inside ``Bearer TOKEN``; values a model proposes and values an approver types never stored; the
pointer check against ``patternProperties`` in bounded time; a file that is not a registry
quoted nowhere."""

from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import APP, jsonl, write
from test_calls_common import plan_file, tool

from toolloop_cli._secrets import Scrubber, credential_parts

LOGIN = {"type": "object", "required": ["user", "password"],
         "properties": {"user": {"type": "string"}, "password": {"type": "string"}}}


# -- values at pointers, whole secrets in text ----------------------------------------------------

def test_a_one_letter_secret_changes_no_key_and_no_other_value(tmp_path, cli):
    path = plan_file(tmp_path, {"login": tool("secret_echo", redact=["/password", "/token"], input_schema=LOGIN),
                                "quote": tool("secret_echo", redact=["/password"], input_schema=LOGIN)},
                     calls=[{"tool": "login", "args": {"user": "ada", "password": "a"}},
                            {"tool": "quote", "args": {"user": "ada", "password": "s3cr"}},
                            {"tool": "login", "args": {"user": "ada", "password": "fail-a"}}])
    proc = cli("run", str(path), "--format", "jsonl")
    ok, quoted, failed = jsonl(proc.stdout)[:3]
    assert ok["args"] == {"user": "ada", "password": "[REDACTED]"}
    assert ok["result"] == {"user": "ada", "token": "[REDACTED]"}
    assert failed["error"]["message"] == "bad password [REDACTED] for ada"
    # a secret of four characters or more is scrubbed wherever it occurs
    assert quoted["args"] == {"user": "ada", "password": "[REDACTED]"}
    assert quoted["result"] == {"user": "ada", "token": "tok-[REDACTED]"}


@pytest.mark.parametrize("text, secrets, expected", [
    ("password a for ada", ["a"], "password [REDACTED] for ada"),
    ('{"user": "ada", "password": "a"}', ["a"], '{"user": "ada", "password": "[REDACTED]"}'),
    ("pin 42, not 420 or x42", ["42"], "pin [REDACTED], not 420 or x42"),
    ("key=hunter22;", ["hunter22"], "key=[REDACTED];"),
    ("xxhunter22xx", ["hunter22"], "xx[REDACTED]xx"),
    ("abc abcd", ["abc", "abcd"], "[REDACTED] [REDACTED]"),
])
def test_text_is_scrubbed_of_whole_secrets_short_ones_only_as_tokens(text, secrets, expected):
    assert Scrubber(secrets).text(text) == expected


def test_the_keys_of_a_value_change_only_where_they_hold_a_whole_secret():
    scrub = Scrubber(["a", "sk-live-12345"])
    assert scrub.deep({"password": "a", "user": "ada", "sk-live-12345": ["a", "b a"]}) == {
        "password": "[REDACTED]", "user": "ada", "[REDACTED]": ["[REDACTED]", "b [REDACTED]"]}


@pytest.mark.parametrize("value, parts", [
    ("Bearer abc.def", ["Bearer abc.def", "abc.def"]),
    ("token  t0k3n ", ["token  t0k3n ", "t0k3n"]),
    ("Basic dXNlcjpwdw==", ["Basic dXNlcjpwdw==", "dXNlcjpwdw=="]),
    ("plain-key", ["plain-key"]),
])
def test_a_credential_is_hidden_whole_and_without_its_scheme(value, parts):
    assert credential_parts(value) == parts


def test_an_mcp_server_quoting_just_the_bearer_token_never_writes_it(tmp_path, cli):
    from test_mcp_http import TOKEN, Server, everything_written, plan

    server = Server()
    try:
        write(tmp_path / "reg.yml", f"""
            version: 1
            subagents:
              w:
                runner_defaults: {{tool_timeout_s: 10}}
                tools:
                  tickets:
                    mcp: {{url: "{server.url}", headers_env: {{Authorization: TICKETS_AUTH}},
                           allow: [whoami, fail_loudly], trusted: true}}
        """)
        ran = cli("run", str(plan(tmp_path, [{"tool": "tickets.whoami", "args": {}},
                                             {"tool": "tickets.fail_loudly", "args": {}}])),
                  "--format", "jsonl", "--audit", "audit.jsonl", env={"TICKETS_AUTH": f"Bearer {TOKEN}"})
    finally:
        server.stop()
    whoami, failed = jsonl(ran.stdout)[:2]
    assert whoami["status"] == "ok", ran.stderr.decode()
    assert json.loads(whoami["result"]["content"][0]["text"])["token"] == "[REDACTED]"
    assert failed["error"]["message"] == "Error executing tool fail_loudly: token [REDACTED] is not allowed here"
    assert TOKEN.encode() not in everything_written(tmp_path, ran)


# -- the model's key and the values it proposes ---------------------------------------------------

KEY = "sk-leak-rules-canary-61"
PIN = 90417  # a number: its marker must leave the journaled answer valid JSON
PASSWORD = "model-made-pw-4471"


def routed_files(tmp_path, server, provider: str) -> None:
    write(tmp_path / "reg.yml", json.dumps({"version": 1, "app_root": str(APP), "subagents": {"s": {
        "runner_defaults": {"tool_timeout_s": 10}, "tools": {
        "echo": tool("echo"),
        "unlock": tool("echo", effect="write", approval="required", redact=["/pin", "/password"],
                       input_schema={"type": "object", "required": ["pin", "password"],
                                     "properties": {"pin": {"type": "integer", "minimum": 10000},
                                                    "password": {"type": "string", "minLength": 12}}}),
    }}}}))
    base = server.openai_base if provider == "openai" else server.anthropic_base
    profile = f"{{provider: {provider}, model: m, base_url: '{base}', api_key_env: TL_RULES_KEY}}"
    write(tmp_path / "plan.yml", f"""
        version: 1
        registry: reg.yml
        subagent: s
        mode: routed
        goal: Unlock.
        allowed_tools: [echo, unlock]
        router_profile: {profile}
        final_profile: {profile}
        budget: {{max_iterations: 6, max_tokens: 100000, max_tool_calls: 4, timeout_s: 60}}
        final_schema: {{type: object, required: [answer], properties: {{answer: {{type: string}}}}}}
    """)


def everything(tmp_path, *procs) -> bytes:
    out = b"".join(p.stdout + p.stderr for p in procs)
    for path in (tmp_path / ".toolloop").iterdir():
        out += path.read_bytes()
    return out + (tmp_path / "audit.jsonl").read_bytes()


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_key_the_model_repeats_is_written_nowhere(tmp_path, model_server, cli, provider):
    routed_files(tmp_path, model_server, provider)
    model_server.script(
        json.dumps({"action": "call", "tool": "echo", "args": {"k": KEY, KEY: 1}, "reason": f"my key: {KEY}"}),
        json.dumps({"action": "final", "reason": f"the key {KEY} worked"}),
        json.dumps({"answer": f"use {KEY}"}))
    ran = cli("run", "plan.yml", "--format", "jsonl", "--audit", "audit.jsonl", env={"TL_RULES_KEY": KEY})
    assert ran.returncode == 0, ran.stderr.decode()
    decision, receipt = jsonl(ran.stdout)[:2]
    assert decision["reason"] == "my key: [REDACTED]"
    assert receipt["args"] == {"k": "[REDACTED]", "[REDACTED]": 1}
    assert receipt["result"] == {"received": {"k": "[REDACTED]", "[REDACTED]": 1}}
    assert jsonl(ran.stdout)[-1]["final"] == {"answer": "use [REDACTED]"}
    rid = jsonl(ran.stdout)[-1]["run_id"]
    shown = cli("runs", "show", rid)
    exported = cli("runs", "export", rid)
    assert KEY.encode() not in everything(tmp_path, ran, shown, exported)


def test_values_the_model_proposes_for_redacted_fields_are_never_journaled_and_not_rebuilt(
        tmp_path, model_server, cli):
    routed_files(tmp_path, model_server, "openai")
    env = {"TL_RULES_KEY": KEY}
    model_server.script(
        json.dumps({"action": "call", "tool": "unlock", "args": {"pin": PIN, "password": PASSWORD},
                    "reason": f"the password is {PASSWORD}"}),
    )
    paused = cli("run", "plan.yml", "--format", "jsonl", "--audit", "audit.jsonl", env=env)
    assert paused.returncode == 4, paused.stderr.decode()
    rid = jsonl(paused.stdout)[-1]["run_id"]
    approved = cli("approve", rid, "1", "--approve")
    assert approved.returncode == 0, approved.stderr.decode()
    exported = cli("runs", "export", rid)
    answer = next(r for r in jsonl(exported.stdout) if r["type"] == "model_answer")
    # the answer as journaled is still a decision, with the marker where the values were
    assert json.loads(answer["text"]) == {"action": "call", "tool": "unlock", "reason": "the password is [REDACTED]",
                                          "args": {"pin": "[REDACTED]", "password": "[REDACTED]"}}
    model_server.script(json.dumps({"action": "final", "reason": "cannot"}), json.dumps({"answer": "no"}))
    resumed = cli("resume", rid, "--format", "jsonl", env=env)
    records = jsonl(resumed.stdout)
    decision, receipt = records[0], records[1]
    # the recorded answer is reused, but its call cannot be rebuilt: interrupted, never run
    assert decision["rejected"] is None and receipt["type"] == "receipt"
    assert receipt["status"] == "interrupted" and receipt["attempts"] == 0
    assert "redacted field" in receipt["error"]["message"]
    assert records[-1]["outcome"] == "final"
    written = everything(tmp_path, paused, approved, exported, resumed)
    assert PASSWORD.encode() not in written and str(PIN).encode() not in written


# -- values an approver types ---------------------------------------------------------------------

def test_a_new_secret_typed_into_an_approval_edit_is_never_stored_and_the_call_asks_again(tmp_path, cli):
    path = plan_file(tmp_path, {"login": tool("secret_echo", effect="write", approval="required",
                                              redact=["/password", "/token"], input_schema=LOGIN)},
                     calls=[{"call_key": "in", "tool": "login", "args": {"user": "ada", "password": "from-the-plan"}}])
    paused = cli("run", str(path), "--format", "jsonl")
    assert paused.returncode == 4
    rid = jsonl(paused.stdout)[-1]["run_id"]
    typed = "typed-by-a-person-93"
    approved = cli("approve", rid, "in", "--approve", "--args", json.dumps({"user": "bob", "password": typed}))
    assert approved.returncode == 0, approved.stderr.decode()
    assert "/password" in approved.stderr.decode() and "never stored" in approved.stderr.decode()
    db = sqlite3.connect(tmp_path / ".toolloop" / "state.db")
    try:
        (stored,) = db.execute("SELECT args FROM approvals WHERE run_id=?", (rid,)).fetchone()
    finally:
        db.close()
    assert json.loads(stored) == {"user": "bob", "password": "[REDACTED]"}
    resumed = cli("resume", rid, "--format", "jsonl")
    receipt = jsonl(resumed.stdout)[0]
    # another process never had the value: the call is interrupted, not run with the plan's
    # password or with the marker
    assert receipt["status"] == "interrupted" and receipt["attempts"] == 0
    assert receipt["approval"]["decision"] == "edited" and "--retry-interrupted" in receipt["error"]["message"]
    again = cli("resume", rid, "--retry-interrupted", "--format", "jsonl")
    assert again.returncode == 4  # the answer was used up: the call waits for a person again
    for name in ("state.db", "state.db-wal"):
        f = tmp_path / ".toolloop" / name
        assert not f.exists() or typed.encode() not in f.read_bytes()
    assert typed.encode() not in b"".join(p.stdout + p.stderr for p in (paused, approved, resumed, again))


# -- registries: patterns and files that are not registries ---------------------------------------

def test_redact_pointers_are_checked_against_pattern_properties_in_bounded_time(tmp_path, cli):
    schema = {"type": "object", "patternProperties": {"^(a+)+$": {"type": "string"}}, "additionalProperties": False}
    never, fits = "/" + "a" * 60 + "!", "/" + "a" * 60
    write(tmp_path / "reg.yml", json.dumps({"version": 1, "app_root": str(APP), "subagents": {"s": {
        "runner_defaults": {"tool_timeout_s": 10}, "tools": {
        "never": tool("echo", input_schema=schema, output_schema=schema, redact=[never]),
        "fits": tool("echo", input_schema=schema, output_schema=schema, redact=[fits]),
    }}}}))
    # Python's re needs about 2**60 steps for the first pointer: the old check never ended
    proc = cli("validate", "reg.yml", "--format", "json", timeout=60)
    findings = json.loads(proc.stdout)["findings"] if proc.stdout.strip().startswith(b"{") else json.loads(proc.stdout)
    unmatched = [f["path"] for f in findings if f["code"] == "TL341"]
    assert len(unmatched) == 1 and "never" in unmatched[0], findings


@pytest.mark.parametrize("name, text", [
    ("shadow", "".join(f"user{i}:$6$salt{i}$hash-SECRET-{i}:19000:0:99999:7:::\n" for i in range(30))),
    ("env-colon", "API_KEY: sk-SECRET-1\nDB_PASSWORD: SECRET-2\n"),
    (".env", "API_KEY=sk-SECRET-1\nDB_PASSWORD=SECRET-2\n"),
])
def test_a_file_that_is_not_a_registry_gets_one_finding_quoting_none_of_it(tmp_path, cli, name, text):
    write(tmp_path / name, text)
    write(tmp_path / "plan.yml", f"version: 1\nregistry: {name}\nsubagent: t\nmode: sequential\ncalls: []\n")
    for args in (("validate", "plan.yml"), ("run", "plan.yml"), ("run", name)):
        proc = cli(*args)
        assert proc.returncode in (1, 3), proc.stderr.decode()
        lines = [line for line in (proc.stdout + proc.stderr).decode().splitlines() if " error TL" in line]
        assert len(lines) == 1 and "TL106" in lines[0], (args, lines)
        assert b"SECRET" not in proc.stdout + proc.stderr, args
