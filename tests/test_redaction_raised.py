"""Redaction canaries for tools that raise ``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``
or a bare ``BaseException`` quoting a redacted argument, in each place a callable runs (worker
thread, trio task, asyncio loop, worker process): each call is an ``error`` receipt naming the
kind, the run goes on, ``resume --retry-failed`` runs them again without a crash, and no byte
either command writes holds the secret."""

from __future__ import annotations

from conftest import jsonl
from test_calls_common import plan_file, tool
from test_redaction import CANARY, ODD, all_bytes, assert_no_canary

KINDS = ["SystemExit", "KeyboardInterrupt", "GeneratorExit", "BaseException"]
TOOLS = {
    "thread": tool("secret_exit", redact=["/password"], retry={"max_attempts": 2, "backoff_s": 0.01, "on": ["error"]}),
    "trio": tool("secret_exit_trio", redact=["/password"]),
    "asyncio": tool("secret_exit_asyncio", redact=["/password"]),
    "process": tool("secret_exit", redact=["/password"], isolation="process"),
    "echo": tool("echo"),
}


def lanes() -> list[dict]:
    out = []
    for secret, tag in ((CANARY, "c"), (ODD, "o")):
        for where in ("thread", "trio", "asyncio", "process"):
            for kind in KINDS:
                out.append({"item_key": f"{tag}-{where}-{kind}", "calls": [
                    {"tool": where, "args": {"user": "ada", "password": secret, "kind": kind}}]})
    return out + [{"item_key": "after", "calls": [{"tool": "echo", "args": {"still": "running"}}]}]


def receipts_of(stdout: bytes) -> dict[str, dict]:
    return {r["item_key"]: r for r in jsonl(stdout) if r["type"] == "receipt"}


def assert_receipts(got: dict[str, dict]) -> None:
    assert len(got) == 33
    for tag in ("c", "o"):
        for where in ("thread", "trio", "asyncio", "process"):
            for kind in KINDS:
                r = got[f"{tag}-{where}-{kind}"]
                assert (r["status"], r["error"]["kind"]) == ("error", kind), (where, r["error"])
                assert r["error"]["message"] == "login failed for ada with password [REDACTED] (repr '[REDACTED]')"
                assert r["args"]["password"] == "[REDACTED]"
                assert r["attempts"] == (2 if where == "thread" else 1)
    assert got["after"]["result"] == {"received": {"still": "running"}}


def test_base_exceptions_quoting_a_secret_in_every_worker_kind_never_write_it(tmp_path, cli):
    plan = plan_file(tmp_path, TOOLS, lanes=lanes(), mc=4)
    state, audit = tmp_path / "state", tmp_path / "audit.jsonl"
    proc = cli("run", str(plan), "--format", "jsonl", "--state-dir", str(state), "--audit", str(audit))
    assert proc.returncode == 1, proc.stderr.decode()
    assert b"Traceback" not in proc.stderr
    got = receipts_of(proc.stdout)
    assert_receipts(got)
    assert jsonl(proc.stdout)[-1]["counts"]["error"] == 32

    resumed = cli("resume", got["after"]["run_id"], "--retry-failed", "--format", "jsonl", "--state-dir", str(state))
    assert resumed.returncode == 1, resumed.stderr.decode()
    assert b"Traceback" not in resumed.stderr
    assert_receipts(receipts_of(resumed.stdout))

    blobs = {"stdout": proc.stdout, "stderr": proc.stderr, "resume stdout": resumed.stdout,
             "resume stderr": resumed.stderr, **all_bytes(state, audit)}
    assert any(k.endswith("state.db") for k in blobs)
    assert sum(line.count(b'"retried"') for line in audit.read_bytes().splitlines()) == 2 * len(KINDS)  # the thread tool, once per secret and kind
    assert_no_canary(blobs)
