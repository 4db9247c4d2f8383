"""A batch receipt is scrubbed of the run's secrets once: the call path scrubs its arguments,
result and envelope as it builds it, and settling does not walk them again while the run's
secrets are still those it scrubbed them of (every other field of its record is still scrubbed,
and any other record goes through ``scrub_record`` whole). A secret the run learns in between
sends the record through the whole scrub. End to end, over the real command line, real SQLite
and a key variable (``TOOLLOOP_SERVE_TOKEN``, one of a run's credentials): the secret is in no
byte written (standard output and error, state.db and its WAL, the audit file, ``runs
export``), whether it came in arguments, a result, an error message or a redacted field."""

from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import APP, jsonl, state_bytes, write
from toolloop_cli.engine import redact
from toolloop_cli.engine.redact import REDACTED, RunSecrets, scrub_record
from toolloop_cli.engine.settle import Settlement
from toolloop_cli.receipts import Receipt

SECRET = "run-secret-ONCE-9c41e2"
LATER = "learned-later-ONCE-55ab"


def _receipt(**over) -> Receipt:
    base = dict(run_id="r1", seq=0, completion_seq=0, subagent="s", tool="t", parallel_batch_id=None,
                item_key="i", call_key="c", parent_receipt_id=None, iteration=None, receipt_id="rid", status="ok",
                abandoned=False, attempts=1, cache="off", args_sha256="0" * 64, args={}, result={},
                error=None, envelope=None, started_at=None, finished_at=None, duration_ms=1.0)
    return Receipt(**{**base, **over})


def test_the_shown_values_of_a_receipt_the_call_path_scrubbed_are_not_walked_again(monkeypatch):
    secrets = RunSecrets([SECRET])
    walked: list = []
    deep = redact.Scrubber.deep
    monkeypatch.setattr(redact.Scrubber, "deep", lambda self, v: walked.append(v) or deep(self, v))
    settlement = Settlement(secrets=secrets)
    # the values as the call path leaves them (scrubbed), and a field it does not scrub
    receipt = _receipt(args={"note": REDACTED}, result={"echo": [REDACTED]}, envelope={"status": "x"},
                       item_key=f"key {SECRET}", error={"kind": "error", "message": "m"})
    rec = settlement._record_of(receipt, secrets.scrubber)
    assert rec["item_key"] == f"key {REDACTED}"  # every other field is still scrubbed
    assert rec["args"] is receipt.args and rec["result"] is receipt.result and rec["envelope"] is receipt.envelope
    assert walked == [receipt.error]  # only the error (an App may word its kind) is walked
    walked.clear()
    rec = settlement._record_of(receipt)  # not said to be scrubbed: the whole record, as before
    assert walked == [receipt.args, receipt.result, receipt.error, receipt.envelope]
    assert rec == scrub_record(receipt.as_record(), secrets)


def test_a_secret_learned_after_the_call_path_scrubbed_is_scrubbed_when_settling():
    secrets = RunSecrets([SECRET])
    built_with = secrets.scrubber
    secrets.add([LATER])  # e.g. a token an MCP server's client credentials yield meanwhile
    settlement = Settlement(secrets=secrets)
    receipt = _receipt(args={"note": f"{LATER}!"}, result=[LATER])
    rec = settlement._record_of(receipt, built_with)
    assert rec["args"] == {"note": f"{REDACTED}!"} and rec["result"] == [REDACTED]


def test_a_run_without_secrets_hands_the_record_on_as_it_is():
    settlement = Settlement(secrets=RunSecrets())
    receipt = _receipt(args={"a": SECRET})
    assert settlement._record_of(receipt, None) == receipt.as_record()


REGISTRY = f"""
version: 1
app_root: {APP}
subagents:
  s:
    runner_defaults: {{tool_timeout_s: 30}}
    tools:
      echo:
        callable: testapp.tools:echo
        description: Returns the arguments it got.
        input_schema: {{type: object}}
        output_schema: {{type: object}}
      boom:
        callable: testapp.tools:boom
        description: Always raises.
        input_schema: {{type: object}}
        output_schema: {{}}
      vault:
        callable: testapp.tools:secret_result
        description: Returns its password; redacted everywhere.
        redact: [/password, /token]
        input_schema: {{type: object, required: [user, password], properties: {{user: {{type: string}}, password: {{type: string}}}}}}
        output_schema: {{}}
"""

REDACTED_PW = "vault-PW-ONCE-7d30aa"


@pytest.mark.parametrize("order", ["input", "completion"])
def test_no_byte_written_by_a_batch_holds_a_run_secret_or_a_redacted_value(tmp_path, cli, order):
    write(tmp_path / "reg.yml", REGISTRY)
    write(tmp_path / "plan.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "s",
                                             "mode": "parallel", "max_concurrency": 4, "lanes": []}))
    lanes = [
        {"item_key": "args", "calls": [{"tool": "echo", "args": {"note": f"use {SECRET} here", "deep": [{"k": SECRET}]}}]},
        {"item_key": "error", "calls": [{"tool": "boom", "args": {"message": f"failed with {SECRET}"}}]},
        {"item_key": "redacted", "calls": [{"tool": "vault", "args": {"user": "u", "password": REDACTED_PW}}]},
        {"item_key": "plain", "calls": [{"tool": "echo", "args": {"n": 1}}]},
    ]
    (tmp_path / "plain.jsonl").write_text(json.dumps(lanes[-1]) + "\n")
    (tmp_path / "lanes.jsonl").write_text("".join(json.dumps(lane) + "\n" for lane in lanes))
    env = {"TOOLLOOP_SERVE_TOKEN": SECRET}
    first = cli("run", "plan.yml", "--lanes", "plain.jsonl", "--format", "jsonl")  # makes the state database
    assert first.returncode == 0, first.stderr.decode()
    # a reader holding the database open keeps its write-ahead log on disk after the run, to be searched
    reader = sqlite3.connect(tmp_path / ".toolloop" / "state.db")
    assert reader.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    try:
        _batch(tmp_path, cli, order, env)
    finally:
        reader.close()


def _batch(tmp_path, cli, order, env) -> None:
    done = cli("run", "plan.yml", "--lanes", "lanes.jsonl", "--format", "jsonl", "--order", order,
               "--audit", "audit.jsonl", env=env)
    assert done.returncode == 1, done.stderr.decode()  # boom fails
    records = jsonl(done.stdout)
    receipts = {r["item_key"]: r for r in records if r["type"] == "receipt"}
    # scrubbed where they stood, not dropped: the call path's scrubbing reached the output
    assert receipts["args"]["args"] == {"note": f"use {REDACTED} here", "deep": [{"k": REDACTED}]}
    assert receipts["args"]["result"] == {"received": receipts["args"]["args"]}
    assert receipts["error"]["error"]["message"].endswith(f"failed with {REDACTED}")
    assert receipts["redacted"]["args"]["password"] == REDACTED and receipts["redacted"]["result"]["token"] == REDACTED
    assert receipts["plain"]["result"] == {"received": {"n": 1}}
    run_id = records[-1]["run_id"]
    export = cli("runs", "export", run_id, env=env)
    assert export.returncode == 0, export.stderr.decode()
    written = {"stdout": done.stdout, "stderr": done.stderr, "audit": (tmp_path / "audit.jsonl").read_bytes(),
               "export": export.stdout + export.stderr, "state": state_bytes(tmp_path / ".toolloop")}
    assert any(p.name.endswith("-wal") for p in (tmp_path / ".toolloop").rglob("*"))
    for secret in (SECRET, REDACTED_PW):
        for form in (secret.encode(), secret.encode("utf-16-le")):
            assert not [where for where, data in written.items() if form in data], (secret, form)
