"""Redaction canaries: a secret given to tools with ``redact`` pointers or
``writeOnly`` properties reaches the callable, and no byte the command writes holds it:
standard output and error, the state store (and its write-ahead log), the audit file, the
evidence hook's records, error messages and tracebacks — whatever the tool does with it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from conftest import jsonl
from test_calls_common import admitted, plan_file, run_plan, tool

CANARY = "CANARY-7f3a9c1e-pw"
# quotes, a backslash and a non-ASCII letter: found again only when every escaped spelling is scrubbed
ODD = 'k3y"Q\\z-é-CANARY2'
SECRET_IN = {"type": "object", "required": ["user", "password"],
             "properties": {"user": {"type": "string"}, "password": {"type": "string", "writeOnly": True}}}
SECRET_OUT = {"type": "object", "properties": {"token": {"type": "string", "writeOnly": True}}}
TOOLS = {
    # writeOnly in the schemas, no redact list
    "write_only": tool("secret_echo", input_schema=SECRET_IN, output_schema=SECRET_OUT),
    "digest": tool("secret_digest", input_schema=SECRET_IN),
    # redact pointers into args and result
    "pointer": tool("secret_echo", redact=["/password", "/token"]),
    # only the argument is declared; the result quotes it inside another string
    "quoting": tool("secret_echo", redact=["/password"]),
    "raises": tool("secret_raise", redact=["/password"], retry={"max_attempts": 2, "backoff_s": 0.01, "on": ["error"]}),
    "raises_process": tool("secret_raise", redact=["/password"], isolation="process"),
    "result": tool("secret_result", redact=["/password", "/token"], cacheable=True),
    # the router's own result holds the child's token, which only the child declares redacted:
    # values a child redacts are hidden in its parent's receipt too
    "router": tool("route_sync", redact=["/args/password"], dispatch=["pointer", "raises"]),
    "closed": tool("secret_digest", input_schema={**SECRET_IN, "additionalProperties": False}),
}


def forms(secret: str) -> list[bytes]:
    """Every spelling of the secret a writer might produce."""
    out = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], repr(secret)[1:-1]}
    return [f.encode() for f in out]


def calls_for(secret: str, tag: str) -> list[dict]:
    login = {"user": "ada", "password": secret}
    fail = {"user": "ada", "password": "fail-" + secret}
    return [
        {"call_key": f"{tag}-wo", "tool": "write_only", "args": login},
        {"call_key": f"{tag}-wo-fail", "tool": "write_only", "args": fail},
        {"call_key": f"{tag}-digest", "tool": "digest", "args": login},
        {"call_key": f"{tag}-ptr", "tool": "pointer", "args": login},
        {"call_key": f"{tag}-raise", "tool": "raises", "args": login},
        {"call_key": f"{tag}-raise-proc", "tool": "raises_process", "args": login},
        {"call_key": f"{tag}-result", "tool": "result", "args": login},
        {"call_key": f"{tag}-result-again", "tool": "result", "args": login},
        {"call_key": f"{tag}-route", "tool": "router", "args": {"target": "pointer", "args": login}},
        {"call_key": f"{tag}-route-fail", "tool": "router", "args": {"target": "raises", "args": login, "catch": True}},
        {"call_key": f"{tag}-quote", "tool": "quoting", "args": login},
    ]


def lanes() -> list[dict]:
    out = []
    for secret, tag in ((CANARY, "c"), (ODD, "o")):
        out += [{"item_key": f"{tag}{i}", "calls": [c]} for i, c in enumerate(calls_for(secret, tag))]
    return out


def payload_lanes() -> list[dict]:
    # secrets that come from the lane payload (projected onto a closed schema)
    return [{"item_key": f"{tag}-payload", "payload": {"user": "ada", "password": secret},
             "calls": [{"call_key": "p", "tool": "closed"}]} for secret, tag in ((CANARY, "c"), (ODD, "o"))]


def all_bytes(*paths: Path) -> dict[str, bytes]:
    found = {}
    for p in paths:
        if p.is_dir():
            for f in sorted(p.rglob("*")):
                if f.is_file():
                    found[str(f)] = f.read_bytes()
        elif p.exists():
            found[str(p)] = p.read_bytes()
    return found


def assert_no_canary(blobs: dict[str, bytes]) -> None:
    for secret in (CANARY, ODD):
        for form in forms(secret):
            for where, data in blobs.items():
                assert form not in data, f"{form!r} leaked into {where}"
    for where, data in blobs.items():  # and no fragment of either
        assert b"7f3a9c1e" not in data and b"CANARY2" not in data, where


def test_no_byte_written_holds_a_redacted_value(tmp_path, cli):
    plan = plan_file(tmp_path, TOOLS, lanes=lanes(), mc=8, evidence="testapp.tools:evidence_to_file")
    state, audit, evidence = tmp_path / "state", tmp_path / "audit.jsonl", tmp_path / "evidence.jsonl"
    proc = cli("run", str(plan), "--format", "jsonl", "--state-dir", str(state), "--audit", str(audit),
               env={"TOOLLOOP_TEST_EVIDENCE": str(evidence)})
    recs = jsonl(proc.stdout)
    receipts = {(r["item_key"], r["call_key"]): r for r in recs if r["type"] == "receipt" and r["parent_receipt_id"] is None}
    assert len(receipts) == 22, proc.stderr.decode()

    # the callables got the real values
    for secret, tag in ((CANARY, "c"), (ODD, "o")):
        digest = hashlib.sha256(secret.encode()).hexdigest()
        assert receipts[(f"{tag}2", f"{tag}-digest")]["result"]["sha256"] == digest
        assert receipts[(f"{tag}0", f"{tag}-wo")]["result"] == {"user": "ada", "token": "[REDACTED]"}
        assert receipts[(f"{tag}0", f"{tag}-wo")]["args"] == {"user": "ada", "password": "[REDACTED]"}
        # the exception quoting the secret, in every spelling, is scrubbed
        raised = receipts[(f"{tag}4", f"{tag}-raise")]
        assert raised["status"] == "error" and raised["attempts"] == 2
        assert raised["error"]["message"].startswith("login failed for ada with password [REDACTED] (repr '[REDACTED]'")
        assert receipts[(f"{tag}5", f"{tag}-raise-proc")]["error"]["message"] == raised["error"]["message"]
        assert receipts[(f"{tag}1", f"{tag}-wo-fail")]["error"] == {
            "kind": "PermissionError", "message": "bad password [REDACTED] for ada"}
        assert receipts[(f"{tag}10", f"{tag}-quote")]["result"] == {"user": "ada", "token": "tok-[REDACTED]"}
        # a result holding a secret is never cached, so it runs again
        assert receipts[(f"{tag}7", f"{tag}-result-again")]["cache"] == "miss"
    assert json.loads(evidence.read_text().splitlines()[0])["type"] == "receipt"
    assert any(json.loads(line)["event"] == "retried" for line in audit.read_text().splitlines())

    blobs = {"stdout": proc.stdout, "stderr": proc.stderr, **all_bytes(state, audit, evidence)}
    assert any(k.endswith("state.db") for k in blobs)
    assert_no_canary(blobs)


def test_a_secret_in_a_lane_payload_stays_out_of_the_state_store(tmp_path, cli):
    plan = plan_file(tmp_path, TOOLS, lanes=payload_lanes(), mc=2)
    state = tmp_path / "state"
    proc = cli("run", str(plan), "--format", "jsonl", "--state-dir", str(state))
    recs = [r for r in jsonl(proc.stdout) if r["type"] == "receipt"]
    assert [r["result"]["sha256"] for r in recs] == [hashlib.sha256(s.encode()).hexdigest() for s in (CANARY, ODD)]
    assert_no_canary({"stdout": proc.stdout, "stderr": proc.stderr, **all_bytes(state)})


def test_the_callable_receives_the_real_value_and_the_receipt_never_does(tmp_path):
    plan = admitted(tmp_path, TOOLS, calls=[{"tool": "digest", "args": {"user": "ada", "password": CANARY}},
                                            {"tool": "pointer", "args": {"user": "ada", "password": CANARY}}])
    audit: list = []
    got, _, _ = run_plan(plan, mock=False, audit=audit)
    assert got[0]["result"]["sha256"] == hashlib.sha256(CANARY.encode()).hexdigest()
    assert got[1]["args"]["password"] == "[REDACTED]" and got[1]["result"]["token"] == "[REDACTED]"
    assert CANARY not in json.dumps(got) + json.dumps(audit)


@pytest.mark.parametrize("secret", [CANARY, ODD, "short"])
def test_scrub_removes_every_spelling(secret):
    from toolloop_cli.engine.redact import scrub

    text = f"a {secret} b {secret!r} c {json.dumps(secret)} d {json.dumps({'p': secret}, ensure_ascii=False)}"
    out = scrub(text, [secret])
    for form in forms(secret):
        assert form.decode() not in out
