"""SIGINT and SIGTERM at any moment of a command that runs a plan: while the plan is admitted (the
App's module signals its own process as it is imported), while a call runs (the call signals),
once a receipt is committed (a thread of the call waits for the journal, then signals), and
after the run, while its summary is being written (standard output full, the test signals when
the journal says the run ended). Whatever the moment: every committed receipt and the summary
are printed, as one complete document, with no traceback; the exit code is the summary's (130
when the signal came before the run ended); and resume finishes the run.

Each moment is reached by an event (an import, a call, a commit, the journal's run status), not
by a delay."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import jsonl, write
from regkit import openai_profile
from test_resume import wait_for
from toolloop_cli.receipts import EXIT_CODES

APP_MODULE = '''
import os
import signal
import sqlite3
import threading
import time

import trio

AT = os.environ.get("SIGAPP_AT", "")
SIG = int(os.environ.get("SIGAPP_SIG", "2"))
MARK = os.environ.get("SIGAPP_MARK", "")
LOG = os.environ.get("SIGAPP_LOG", "")


def once() -> bool:
    """True the first time in a test (a marker file): a resume is not signalled again."""
    if not MARK or os.path.exists(MARK):
        return False
    open(MARK, "w").close()
    return True


if AT == "import" and once():
    os.kill(os.getpid(), SIG)


def _after_commit(db: str, receipts: int) -> None:
    while True:  # the journal thread commits the receipt soon after the call returns
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            try:
                if con.execute("SELECT count(*) FROM receipts").fetchone()[0] >= receipts:
                    break
            finally:
                con.close()
        except sqlite3.Error:
            pass
        time.sleep(0.001)
    os.kill(os.getpid(), SIG)


async def work(n: int, last: bool = False) -> dict:
    if LOG:
        with open(LOG, "a") as fh:
            fh.write(f"{n}\\n")
    if AT == "call" and n == 1 and once():
        os.kill(os.getpid(), SIG)
        await trio.sleep_forever()  # in flight until the signal cancels it
    if AT == "commit" and last and once():
        threading.Thread(target=_after_commit, args=(os.path.join(".toolloop", "state.db"), n + 1),
                         daemon=True).start()
    return {"n": n}
'''

CALLS = 3


def project(tmp_path: Path) -> Path:
    (tmp_path / "sigapp.py").write_text(APP_MODULE)
    write(tmp_path / "reg.yml", """
        version: 1
        subagents:
          w:
            runner_defaults: {tool_timeout_s: 30}
            tools:
              work:
                callable: sigapp:work
                description: Works, and signals its own process when the test asks.
                input_schema: {type: object}
                output_schema: {}
    """)
    calls = [{"call_key": f"c{n}", "tool": "work", "args": {"n": n, "last": n == CALLS - 1}} for n in range(CALLS)]
    return write(tmp_path / "plan.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "w",
                                                    "mode": "sequential", "calls": calls}))


def start(tmp_path: Path, at: str, sig: int, *args: str) -> subprocess.Popen:
    env = {**os.environ, "NO_COLOR": "1", "SIGAPP_AT": at, "SIGAPP_SIG": str(int(sig)),
           "SIGAPP_MARK": str(tmp_path / "signalled"), "SIGAPP_LOG": str(tmp_path / "ran.log")}
    env.pop("TOOLLOOP_STATE_DIR", None)
    return subprocess.Popen([sys.executable, "-m", "toolloop_cli", *args, "--format", "json"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def committed(tmp_path: Path) -> dict[int, dict]:
    con = sqlite3.connect(tmp_path / ".toolloop" / "state.db")
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return {seq: json.loads(rec) for seq, rec in con.execute("SELECT seq, record FROM receipts")}
    finally:
        con.close()


def run_status(tmp_path: Path) -> str | None:
    try:
        con = sqlite3.connect(f"file:{tmp_path / '.toolloop' / 'state.db'}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT status FROM runs").fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def check_ending(tmp_path: Path, proc: subprocess.Popen, out: bytes, err: bytes, *, before_the_end: bool) -> dict:
    """The ending every moment must have; returns the summary."""
    text = err.decode()
    assert "Traceback" not in text and "internal error" not in text and "Aborted" not in text, text
    records = json.loads(out)  # one complete JSON document: nothing cut off
    summary = records[-1]
    assert summary["type"] == "summary", records
    assert proc.returncode == EXIT_CODES[summary["status"]], (proc.returncode, summary["status"], text)
    if before_the_end:
        assert summary["status"] == "interrupted" and proc.returncode == 130, text
        assert text.endswith(f"toolloop: interrupted; resume with: toolloop resume {summary['run_id']}\n"), text
    receipts = records[:-1]
    assert {r["seq"]: r for r in receipts} == committed(tmp_path)  # printed exactly what was committed
    assert (tmp_path / "signalled").exists()  # the signal was sent
    return summary


def resume_finishes(cli, tmp_path: Path, summary: dict) -> None:
    if summary["status"] == "ok":
        return
    done = cli("resume", summary["run_id"], "--format", "jsonl", env={"SIGAPP_LOG": str(tmp_path / "ran.log")})
    assert done.returncode == 0, done.stderr
    assert [r["status"] for r in jsonl(done.stdout)[:-1]] == ["ok"] * CALLS
    ran = (tmp_path / "ran.log").read_text().split()
    assert sorted(set(ran)) == [str(n) for n in range(CALLS)]
    assert len(ran) == len(set(ran)) + ran.count("1") - 1  # only a cancelled call ran again


SIGNALS = pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])


@SIGNALS
@pytest.mark.parametrize("command", ["run", "call"])
def test_a_signal_while_the_plan_is_admitted_ends_with_an_interrupted_summary(cli, tmp_path, sig, command):
    plan = project(tmp_path)
    args = ["run", str(plan)] if command == "run" else ["call", "reg.yml", "w", "work", "--args", '{"n": 0}']
    proc = start(tmp_path, "import", sig, *args)
    out, err = proc.communicate(timeout=120)
    summary = check_ending(tmp_path, proc, out, err, before_the_end=True)
    assert summary["counts"]["ok"] == 0 and not (tmp_path / "ran.log").exists()  # nothing ran
    name = signal.Signals(sig).name
    assert f"toolloop: {name}: the run stops before its first call (send it again to stop at once)\n" in err.decode()
    if command == "run":
        resume_finishes(cli, tmp_path, summary)


@SIGNALS
def test_a_signal_while_a_call_runs_cancels_it_and_prints_what_was_committed(cli, tmp_path, sig):
    proc = start(tmp_path, "call", sig, "run", str(project(tmp_path)))
    out, err = proc.communicate(timeout=120)
    summary = check_ending(tmp_path, proc, out, err, before_the_end=True)
    assert [(r["args"]["n"], r["status"]) for r in json.loads(out)[:-1]] == [(0, "ok"), (1, "cancelled")]
    resume_finishes(cli, tmp_path, summary)


@SIGNALS
def test_a_signal_once_the_last_receipt_is_committed_changes_no_receipt(cli, tmp_path, sig):
    proc = start(tmp_path, "commit", sig, "run", str(project(tmp_path)))
    out, err = proc.communicate(timeout=120)
    summary = check_ending(tmp_path, proc, out, err, before_the_end=False)
    assert [r["status"] for r in json.loads(out)[:-1]] == ["ok"] * CALLS
    resume_finishes(cli, tmp_path, summary)


@SIGNALS
def test_a_signal_while_the_summary_is_written_leaves_it_whole(cli, tmp_path, sig):
    """Labels make the summary larger than a pipe holds; the test reads nothing until it has
    signalled, so the command is writing its summary, after the run, when the signal lands."""
    plan = project(tmp_path)
    labels = [f"--label=k{i}={'v' * 250}" for i in range(400)]
    proc = start(tmp_path, "", sig, "run", str(plan), *labels)
    try:
        wait_for(lambda: run_status(tmp_path) not in (None, "running"), "the run to end in the journal")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    (tmp_path / "signalled").touch()
    summary = check_ending(tmp_path, proc, out, err, before_the_end=False)
    assert summary["status"] == "ok" and len(summary["labels"]) == 400
    assert [r["status"] for r in json.loads(out)[:-1]] == ["ok"] * CALLS


def test_a_routed_run_signalled_while_it_is_admitted_asks_no_model(tmp_path, model_server, monkeypatch):
    project(tmp_path)
    profile = openai_profile(model_server.openai_base)
    plan = write(tmp_path / "routed.yml", f"""
        version: 1
        registry: reg.yml
        subagent: w
        mode: routed
        goal: Work.
        router_profile: {profile}
        final_profile: {profile}
        budget: {{max_iterations: 3, max_tokens: 10000, max_tool_calls: 2, timeout_s: 60}}
    """)
    model_server.script('{"action": "final", "reason": "done"}', '{"answer": 1}')
    monkeypatch.setenv("TL_TEST_KEY", "k")
    proc = start(tmp_path, "import", signal.SIGINT, "run", str(plan))
    out, err = proc.communicate(timeout=120)
    summary = check_ending(tmp_path, proc, out, err, before_the_end=True)
    assert summary["outcome"] is None and model_server.requests == []
