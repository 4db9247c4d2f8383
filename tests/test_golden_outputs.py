"""What the command line prints, pinned byte for byte apart from times, ids and completion order.

Each scenario runs the real command in a subprocess and keeps its exit code, standard output
(JSON Lines) and standard error, with run ids, receipt ids, batch ids, times and durations replaced
by placeholders. A change to any other byte of what users see fails here.
"""

from __future__ import annotations

import json
import re

from conftest import APP, ROOT, write

REG = APP / "registry.yml"
_VOLATILE_KEYS = {"run_id", "receipt_id", "parallel_batch_id", "parent_receipt_id", "started_at", "finished_at", "chain_sha256",
                  "duration_ms", "completion_seq", "chain_sha256"}
_RUN_ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{8}")


def _normal_record(rec: dict) -> dict:
    out = {k: (f"<{k}>" if k in _VOLATILE_KEYS and v is not None else v) for k, v in rec.items()}
    if isinstance(out.get("approval"), dict):
        by = out["approval"]["by"]
        out["approval"] = {**out["approval"], "at": "<at>", "by": by if by in ("flag", "engine") else "<person>"}
    return out


def _normal(proc) -> dict:
    lines = [json.dumps(_normal_record(json.loads(line)), sort_keys=False)
             for line in proc.stdout.decode().splitlines() if line.strip()]
    return {"exit": proc.returncode, "stdout": lines, "stderr": _RUN_ID.sub("<run_id>", proc.stderr.decode())}


def _run_id(proc) -> str:
    return json.loads(proc.stdout.decode().splitlines()[-1])["run_id"]


def _plan(tmp_path, body: dict, name: str = "plan.yml"):
    return write(tmp_path / name, json.dumps({"version": 1, "registry": str(REG), "subagent": "t", **body}))


def test_example_plans_print_what_they_printed(cli, snapshot):
    seq = cli("run", str(ROOT / "plans" / "sequential.yml"))
    par = cli("run", str(ROOT / "plans" / "parallel.yml"), "-j", "2")
    shown = cli("runs", "show", _run_id(seq), "--format", "jsonl")
    one = cli("call", str(ROOT / "registries" / "demo.yml"), "worker-a", "transform", "--args", '{"text": "hi"}')
    dry = cli("run", str(ROOT / "plans" / "parallel.yml"), "--dry-run", "--format", "jsonl")
    assert [_normal(p) for p in (seq, par, shown, one, dry)] == snapshot


def test_failures_halts_and_approvals_print_what_they_printed(cli, tmp_path, snapshot):
    failing = _plan(tmp_path, {"mode": "parallel", "max_concurrency": 1, "lanes": [
        {"item_key": "a", "calls": [{"tool": "echo", "args": {"n": 1}}, {"tool": "boom", "args": {"message": "no"}},
                                    {"tool": "echo", "args": {}}]},
        {"item_key": "b", "calls": [{"tool": "boom", "args": {}}]},
        {"item_key": "c", "calls": [{"tool": "echo", "args": {}}]}]}, "failing.yml")
    plain = cli("run", str(failing))
    halted = cli("run", str(failing), "--halt", "soon,fail=1")
    gated = _plan(tmp_path, {"mode": "parallel", "max_concurrency": 1, "lanes": [
        {"item_key": "small", "calls": [{"tool": "pay", "args": {"amount": 50}}]},
        {"item_key": "big", "calls": [{"tool": "pay", "call_key": "pay", "args": {"amount": 500}},
                                      {"tool": "echo", "args": {"after": True}}]}]}, "gated.yml")
    paused = cli("run", str(gated))
    rid = _run_id(paused)
    answered = cli("approve", rid, "pay", "--item", "big", "--approve", "--args", '{"amount": 450}')
    resumed = cli("resume", rid)
    denied = cli("run", str(gated), "--approve", "none")
    assert [_normal(p) for p in (plain, halted, paused, answered, resumed, denied)] == snapshot
