"""How a routed run ends, and what it says about it: a call still running when the loop ends gets
its receipt (timeout, SIGINT, SIGTERM, an operator's abort); operators' controls reach the model or
are recorded as too late; every ending other than final or paused says why (the summary's
``error`` and one line on standard error); what providers send back never crashes the run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest
import trio
import trio.testing

from conftest import jsonl, write
from modelserver import Reply
from regkit import openai_profile, registry_yaml
from test_resume import wait_for
from toolloop_cli.engine.run import RunOptions, execute_plan
from toolloop_cli.plan.admit import admit_plan
from toolloop_cli.store import Store

KEY = "sk-endings-canary-5e1d"
FINAL = '{"action": "final", "reason": "enough"}'
ANSWER = '{"answer": 1}'


def call(tool: str, args: dict, reason: str = "r") -> str:
    return json.dumps({"action": "call", "tool": tool, "args": args, "reason": reason})


def registry(tmp_path):
    return write(tmp_path / "reg.yml", registry_yaml("slow_read", "slow_write", "echo", "write_file", tool_timeout_s=300))


profile = openai_profile


def plan(tmp_path, router: str, final: str | None = None, *, budget: str | None = None, extra: str = ""):
    registry(tmp_path)
    budget = budget or "{max_iterations: 6, max_tokens: 100000, max_tool_calls: 4, timeout_s: 120}"
    return write(tmp_path / "plan.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Do the thing.
        router_profile: {router}
        final_profile: {final or router}
        budget: {budget}
        final_schema: {{type: object, required: [answer]}}
        {extra}
    """)


def fixture(tmp_path, *texts: str):
    lines = [json.dumps({"type": "model_answer", "n": i, "role": "router", "model": "m", "text": t,
                         "input_tokens": 1, "output_tokens": 1}) for i, t in enumerate(texts, start=1)]
    (tmp_path / "answers.jsonl").write_text("\n".join(lines) + "\n")
    return "{provider: replay, fixture: answers.jsonl}"


def popen(tmp_path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "NO_COLOR": "1", "TL_TEST_KEY": KEY}
    env.pop("TOOLLOOP_STATE_DIR", None)
    return subprocess.Popen([sys.executable, "-m", "toolloop_cli", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def of_type(records, kind):
    return [r for r in records if r["type"] == kind]


def run_id(cli) -> str:
    return json.loads(cli("runs", "list", "--format", "jsonl").stdout.decode().splitlines()[0])["run_id"]


# ---------------------------------------------------------------------------------------------
# A call still running when the loop ends gets its receipt before the summary


@pytest.mark.parametrize("tool, status", [("slow_read", "cancelled"), ("slow_write", "interrupted")])
def test_the_time_budget_cancels_a_running_call_and_commits_its_receipt(tmp_path, tool, status):
    log = tmp_path / "log"
    router = fixture(tmp_path, call(tool, {"log": str(log), "key": "k", "seconds": 100}))
    path = plan(tmp_path, router, budget="{max_iterations: 4, max_tokens: 1000, max_tool_calls: 3, timeout_s: 5}")
    store = Store(tmp_path / "state")
    got: list = []
    try:
        result = execute_plan(admit_plan(str(path)), store, got.append,
                              RunOptions(handle_signals=False, clock=trio.testing.MockClock(autojump_threshold=0)))
        committed = store.receipts_of(result.summary["run_id"])
    finally:
        store.close()
    summary = got[-1]
    receipts = [r for r in got if r["type"] == "receipt"]
    assert [(r["tool"], r["status"], r["iteration"]) for r in receipts] == [(tool, status, 1)]
    assert [r["status"] for r in committed] == [status]  # in the journal, before the summary
    receipt = receipts[0]
    assert receipt["error"]["kind"] == status
    if status == "cancelled":
        assert receipt["error"]["message"] == ("the run's time budget (timeout_s 5 s) ran out while this call was"
                                               " running; it was cancelled")
    else:  # the write had started: it may or may not have happened
        assert receipt["error"]["message"].endswith("so it may or may not have happened; run it again on purpose"
                                                    " with --retry-interrupted")
        assert receipt["attempts"] == 1 and receipt["started_at"] is not None
    assert summary["outcome"] == "timeout" and summary["status"] == "failed"
    assert summary["counts"][status] == 1 and summary["loop"]["tool_calls"] == 1
    assert summary["error"] == {"kind": "timeout", "message": "the run's time budget (timeout_s 5 s) ran out while"
                                f" '{tool}' was running (its receipt is {status})"}
    assert open(log).read() == "k\n"


def signal_plan(tmp_path, model_server, tool: str):
    log = tmp_path / "log"
    model_server.script(call(tool, {"log": str(log), "key": "k", "seconds": 600}))
    return plan(tmp_path, profile(model_server.openai_base)), log


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("tool, status", [("slow_read", "cancelled"), ("slow_write", "interrupted")])
def test_a_signal_cancels_the_running_call_and_commits_its_receipt(tmp_path, model_server, cli, sig, tool, status):
    path, log = signal_plan(tmp_path, model_server, tool)
    proc = popen(tmp_path, "run", str(path), "--format", "jsonl")
    try:
        wait_for(lambda: log.exists() and log.read_text() == "k\n" or proc.poll() is not None, "the call to start")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err.decode()
    records = jsonl(out)
    (receipt,) = of_type(records, "receipt")
    assert (receipt["tool"], receipt["status"], receipt["iteration"]) == (tool, status, 1)
    assert "interrupted by a signal while this call was running" in receipt["error"]["message"]
    summary = records[-1]
    assert summary["status"] == "interrupted" and summary["outcome"] is None and summary["error"] is None
    assert summary["counts"][status] == 1
    db = Store(tmp_path / ".toolloop", create=False)
    try:
        assert [r["status"] for r in db.receipts_of(summary["run_id"])] == [status]
    finally:
        db.close()
    if status == "interrupted":  # resume keeps it: only --retry-interrupted runs the write again
        model_server.script(FINAL, ANSWER)
        done = cli("resume", summary["run_id"], "--format", "jsonl", env={"TL_TEST_KEY": KEY})
        assert done.returncode == 0, done.stderr.decode()
        assert [r["status"] for r in of_type(jsonl(done.stdout), "receipt")] == ["interrupted"]
        assert log.read_text() == "k\n"


def test_an_operator_abort_cancels_the_running_call_at_once(tmp_path, model_server, cli):
    path, log = signal_plan(tmp_path, model_server, "slow_read")
    proc = popen(tmp_path, "run", str(path), "--format", "jsonl")
    try:
        wait_for(lambda: log.exists() and log.read_text() == "k\n" or proc.poll() is not None, "the call to start")
        aborted = cli("abort", run_id(cli), "--message", "wrong ticket")
        assert aborted.returncode == 0, aborted.stderr.decode()
        out, err = proc.communicate(timeout=60)  # the call sleeps 600 s: only the abort ends it
    finally:
        proc.kill()
    assert proc.returncode == 1, err.decode()
    records = jsonl(out)
    (receipt,) = of_type(records, "receipt")
    assert receipt["status"] == "cancelled"
    assert receipt["error"]["message"] == "an operator aborted the run while this call was running; it was cancelled"
    (sup,) = of_type(records, "supervisor")
    assert (sup["rule"], sup["action"], sup["reason"], sup["iteration"]) == ("operator", "abort", "wrong ticket", 1)
    summary = records[-1]
    assert summary["outcome"] == "aborted" and summary["counts"]["cancelled"] == 1
    assert summary["error"] == {"kind": "aborted", "message": "aborted by an operator: wrong ticket"}
    assert f"toolloop: run {summary['run_id']} ended aborted: aborted by an operator: wrong ticket\n" in err.decode()


# ---------------------------------------------------------------------------------------------
# Operators: a steer to a paused run reaches the model; an abort during closeout is honoured or
# recorded as too late, and `toolloop abort` says which


def test_a_steer_sent_to_a_paused_run_is_shown_on_the_first_turn_after_resume(tmp_path, model_server, cli):
    target = str(tmp_path / "written.txt")
    path = plan(tmp_path, profile(model_server.openai_base))
    model_server.script(call("echo", {"a": 1}), call("write_file", {"path": target}))
    paused = cli("run", str(path), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert paused.returncode == 4, paused.stderr.decode()
    rid = jsonl(paused.stdout)[-1]["run_id"]
    steered = cli("steer", rid, "Prefer short answers.")
    assert steered.returncode == 0
    assert steered.stderr.decode() == (f"steer recorded for run {rid}: the run is paused; the model is shown it on the"
                                       f" first turn after toolloop resume {rid}\n")
    assert cli("approve", rid, "2", "--approve").returncode == 0
    model_server.script(FINAL, ANSWER)
    done = cli("resume", rid, "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    assert done.returncode == 0, done.stderr.decode()
    after_resume = json.dumps(model_server.requests[2].json["messages"])
    assert "Prefer short answers." in after_resume
    assert all("Prefer short answers." not in json.dumps(r.json["messages"]) for r in model_server.requests[:2])
    (sup,) = of_type(jsonl(done.stdout), "supervisor")
    assert (sup["action"], sup["iteration"], sup["reason"]) == ("steer", 3, "Prefer short answers.")


def held_run(tmp_path, model_server, script: list):
    """A run whose model request ``len(script)`` waits until the test releases it."""
    arrived, release = threading.Event(), threading.Event()
    *first, last = script

    def slow(_request):
        arrived.set()
        release.wait(60)
        return Reply(last)

    model_server.script(*first, Reply(handler=slow))
    proc = popen(tmp_path, "run", str(plan(tmp_path, profile(model_server.openai_base))), "--format", "jsonl")
    return proc, arrived, release


def test_an_abort_before_the_final_request_ends_the_run_aborted(tmp_path, model_server, cli):
    proc, arrived, release = held_run(tmp_path, model_server, [FINAL])  # the router's reply says final
    try:
        assert arrived.wait(60)
        aborted = cli("abort", run_id(cli), "--message", "stop")
    finally:
        release.set()
    out, err = proc.communicate(timeout=120)
    assert aborted.returncode == 0
    assert "reads it before its next model request" in aborted.stderr.decode()
    records = jsonl(out)
    assert proc.returncode == 1 and records[-1]["outcome"] == "aborted", err.decode()
    assert records[-1]["error"] == {"kind": "aborted", "message": "aborted by an operator: stop"}
    assert len(model_server.requests) == 1  # no final answer was asked for


def test_an_abort_while_the_final_answer_is_written_is_recorded_as_too_late(tmp_path, model_server, cli):
    proc, arrived, release = held_run(tmp_path, model_server, [FINAL, ANSWER])  # the final request waits
    try:
        assert arrived.wait(60)
        rid = run_id(cli)
        aborted = cli("abort", rid, "--message", "stop")
    finally:
        release.set()
    out, err = proc.communicate(timeout=120)
    assert aborted.returncode == 0
    said = aborted.stderr.decode()
    assert said.startswith(f"abort recorded for run {rid}: the running loop reads it before its next model request")
    assert "if the run has already made its last model request, it ends as it would have" in said
    records = jsonl(out)
    assert proc.returncode == 0 and records[-1]["outcome"] == "final" and records[-1]["error"] is None
    (sup,) = of_type(records, "supervisor")
    assert (sup["rule"], sup["action"]) == ("operator", "abort")
    assert sup["reason"] == "stop (arrived after the run's last model request; the run ended final as it would have)"
    # the run has finished: abort says so and records nothing
    late = cli("abort", rid)
    assert late.returncode == 1
    assert f"run {rid} has already finished (ok, outcome final); the abort was not recorded" in late.stderr.decode()


def test_an_abort_sent_to_a_paused_run_ends_it_on_resume_before_the_gated_call(tmp_path, model_server, cli):
    target = str(tmp_path / "written.txt")
    path = plan(tmp_path, profile(model_server.openai_base))
    model_server.script(call("echo", {"a": 1}), call("write_file", {"path": target}))
    paused = cli("run", str(path), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    rid = jsonl(paused.stdout)[-1]["run_id"]
    aborted = cli("abort", rid)
    assert aborted.stderr.decode() == (f"abort recorded for run {rid}: the run is paused; toolloop resume {rid} reads"
                                       " it and ends the run aborted\n")
    assert cli("approve", rid, "2", "--approve").returncode == 0
    done = cli("resume", rid, "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    records = jsonl(done.stdout)
    assert done.returncode == 1 and records[-1]["outcome"] == "aborted", done.stderr.decode()
    assert [r["status"] for r in of_type(records, "receipt")] == ["ok"]  # the echo, kept
    assert records[-1]["counts"]["ok"] == 1
    assert not os.path.exists(target) and len(model_server.requests) == 2


# ---------------------------------------------------------------------------------------------
# Every ending says why: the summary's error and one line on standard error


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", ["closed port", "401", "unset key"])
def test_provider_error_says_which_profile_which_server_and_why(tmp_path, model_server, cli, case):
    if case == "closed port":
        port = closed_port()
        server, env = f"http://127.0.0.1:{port}", {"TL_TEST_KEY": KEY}
        message = f"router profile: the server {server} refused the connection (5 tries)"
    elif case == "401":
        model_server.script(Reply(f"Incorrect API key provided: {KEY}", status=401))
        server, env = model_server.url, {"TL_TEST_KEY": KEY}
        message = f"router profile: the server {server} answered HTTP 401: Incorrect API key provided: [REDACTED]"
    else:
        server, env = model_server.url, {"TL_TEST_KEY": ""}
        message = ("router profile: the environment variable TL_TEST_KEY (api_key_env) is not set or is empty, so the"
                   f" server {server} was not asked")
    path = plan(tmp_path, profile(server + "/v1"))
    proc = cli("run", str(path), "--format", "jsonl", env=env)
    assert proc.returncode == 1
    summary = jsonl(proc.stdout)[-1]
    assert summary["outcome"] == "provider_error"
    assert summary["error"] == {"kind": "provider_error", "message": message}
    lines = proc.stderr.decode().splitlines()
    assert lines == [f"toolloop: run {summary['run_id']} ended provider_error: {message}"]
    assert KEY.encode() not in proc.stdout + proc.stderr


@pytest.mark.parametrize("script, budget, outcome, message", [
    ([call("echo", {"a": 1}), call("echo", {"a": 2})], "{max_iterations: 2, max_tokens: 100000, max_tool_calls: 5,"
     " timeout_s: 60}", "max_iterations", "the router took its 2 turns (max_iterations) without a final answer"),
    ([Reply(call("echo", {"a": 1}), 15, 10)], "{max_iterations: 5, max_tokens: 20, max_tool_calls: 5, timeout_s: 60}",
     "budget_exceeded", "the run used 25 tokens of its max_tokens 20"),
    (['{"action": "abort", "reason": "cannot find it"}'], None, "aborted", "the router model gave up: cannot find it"),
    (["no", "still no", "{}"], None, "malformed_output",
     "the router model's reply held no valid decision 3 times in a row; the last: "),
    ([call("nope", {})] * 2, None, "duplicate_action",
     "the router model proposed the same rejected action twice in a row (unknown_tool: 'nope' is not one of"),
    ([FINAL, '{"wrong": 1}', "not json"], None, "parse_error", "the final answer failed its checks after one repair: "),
])
def test_every_ending_but_final_and_paused_says_why(tmp_path, model_server, cli, script, budget, outcome, message):
    model_server.script(*script)
    path = plan(tmp_path, profile(model_server.openai_base), budget=budget)
    proc = cli("run", str(path), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    summary = jsonl(proc.stdout)[-1]
    assert (proc.returncode, summary["outcome"]) == (1, outcome)
    assert summary["error"]["kind"] == outcome and summary["error"]["message"].startswith(message)
    assert f"toolloop: run {summary['run_id']} ended {outcome}: {message}" in proc.stderr.decode()
    # the reply that crossed max_tokens (25 of 20) is reported; no other ending charged past a budget
    assert summary["overshoot"] == ({"tokens": 5, "cost_usd": None} if outcome == "budget_exceeded" else None)


def test_a_final_run_has_no_error(tmp_path, model_server, cli):
    model_server.script(FINAL, ANSWER)
    proc = cli("run", str(plan(tmp_path, profile(model_server.openai_base))), "--format", "jsonl",
               env={"TL_TEST_KEY": KEY})
    summary = jsonl(proc.stdout)[-1]
    assert proc.returncode == 0 and summary["error"] is None and "ended" not in proc.stderr.decode()
    assert summary["overshoot"] is None


# ---------------------------------------------------------------------------------------------
# What providers send back: usage, bodies, cut replies


@pytest.mark.parametrize("usage, shown", [
    ({"prompt_tokens": -1000000, "completion_tokens": 5}, "usage.prompt_tokens = -1000000"),
    ({"prompt_tokens": 10, "completion_tokens": 1e30}, "usage.completion_tokens = 1e+30"),
])
def test_usage_that_is_not_a_count_ends_the_run_provider_error(tmp_path, model_server, cli, usage, shown):
    body = {"choices": [{"message": {"content": call("echo", {"a": 1})}}], "usage": usage}
    model_server.script(Reply(body=body))
    proc = cli("run", str(plan(tmp_path, profile(model_server.openai_base))), "--format", "jsonl",
               env={"TL_TEST_KEY": KEY})
    summary = jsonl(proc.stdout)[-1]
    assert (proc.returncode, summary["outcome"]) == (1, "provider_error")
    assert summary["error"]["message"] == (f"router profile: the server {model_server.url} reported {shown}, which is"
                                           " not a count of tokens (a non-negative integer); the reply is refused")
    assert summary["loop"]["tokens"] == {"input": 0, "output": 0} and of_type(jsonl(proc.stdout), "receipt") == []


def no_usage(text: str) -> Reply:
    return Reply(body={"choices": [{"message": {"content": text}}]})


def test_replies_without_usage_count_nothing_with_one_warning_per_run(tmp_path, model_server, cli):
    model_server.script(no_usage(call("echo", {"a": 1})), no_usage(FINAL), no_usage(ANSWER))
    proc = cli("run", str(plan(tmp_path, profile(model_server.openai_base))), "--format", "jsonl",
               env={"TL_TEST_KEY": KEY})
    summary = jsonl(proc.stdout)[-1]
    assert proc.returncode == 0 and summary["outcome"] == "final", proc.stderr.decode()
    assert summary["loop"]["tokens"] == {"input": 0, "output": 0}
    assert proc.stderr.decode().splitlines() == [
        f"toolloop: warning: router profile: the server {model_server.url} reports no token usage; its replies count"
        " 0 tokens against max_tokens"]


def test_a_reply_without_usage_is_refused_under_a_cost_budget(tmp_path, model_server, cli):
    model_server.script(no_usage(call("echo", {"a": 1})))
    priced = (f"{{provider: openai, model: m, base_url: '{model_server.openai_base}', api_key_env: TL_TEST_KEY,"
              " price: {input_per_mtok: 1.0, output_per_mtok: 2.0}}")
    budget = "{max_iterations: 5, max_tokens: 100000, max_tool_calls: 5, timeout_s: 60, max_cost_usd: 1.0}"
    proc = cli("run", str(plan(tmp_path, priced, budget=budget)), "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    summary = jsonl(proc.stdout)[-1]
    assert (proc.returncode, summary["outcome"]) == (1, "provider_error")
    assert summary["error"]["message"] == (f"router profile: the server {model_server.url} reported no token usage, so"
                                           " the reply's cost cannot be known and the run has a cost budget"
                                           " (max_cost_usd); the reply is refused")
    assert of_type(jsonl(proc.stdout), "receipt") == []


@pytest.mark.parametrize("status, tries", [(500, 5), (400, 1)])
def test_an_error_body_nesting_deeply_is_retried_then_provider_error(tmp_path, model_server, cli, status, tries):
    deep = b'{"error": ' * 100_000 + b"1" + b"}" * 100_000
    model_server.script(*[Reply(status=status, body=deep)] * tries)
    proc = cli("run", str(plan(tmp_path, profile(model_server.openai_base))), "--format", "jsonl",
               env={"TL_TEST_KEY": KEY})
    summary = jsonl(proc.stdout)[-1]
    assert (proc.returncode, summary["outcome"]) == (1, "provider_error"), proc.stderr.decode()
    assert summary["error"]["message"].startswith(f'router profile: the server {model_server.url} answered HTTP'
                                                  f' {status}: {{"error": {{"error": ')
    assert len(model_server.requests) == tries and model_server.pending == 0


def test_a_reply_in_a_charset_it_is_not_written_in_drives_the_loop(tmp_path, model_server, cli):
    def utf8_declared_utf16(text: str, status: int = 200) -> Reply:
        body = {"choices": [{"message": {"content": text}}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
        return Reply(body=json.dumps(body).encode(), status=status, content_type="text/plain; charset=utf-16")

    model_server.script(utf8_declared_utf16(FINAL), Reply(status=503, body=b'{"error": {"message": "busy"}}x',
                                                          content_type="text/plain; charset=utf-16"),
                        utf8_declared_utf16(ANSWER))
    proc = cli("run", str(plan(tmp_path, profile(model_server.openai_base))), "--format", "jsonl",
               env={"TL_TEST_KEY": KEY})
    assert proc.returncode == 0, proc.stderr.decode()
    assert jsonl(proc.stdout)[-1]["final"] == {"answer": 1}


def cut(text: str) -> Reply:
    return Reply(body={"choices": [{"message": {"content": text}, "finish_reason": "length"}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 64}})


def test_a_reply_cut_off_at_the_token_limit_is_reported_as_cut(tmp_path, model_server, cli):
    model_server.script(cut('{"action": "call", "tool": "echo", "ar'), FINAL, cut('{"answer": '), cut('{"answ'))
    proc = cli("run", str(plan(tmp_path, profile(model_server.openai_base))), "--format", "jsonl",
               env={"TL_TEST_KEY": KEY})
    records = jsonl(proc.stdout)
    first = of_type(records, "decision")[0]
    assert first["rejected"] == "malformed"
    assert first["reason"].startswith("the reply was cut off at the output token limit (max_tokens) before it ended;")
    assert "cut off at the output token limit" in json.dumps(model_server.requests[1].json["messages"])
    repair = json.dumps(model_server.requests[3].json["messages"])
    assert "cut off at the output token limit" in repair
    summary = records[-1]
    assert summary["outcome"] == "parse_error"
    assert summary["error"]["message"].startswith("the final answer failed its checks after one repair: the reply was"
                                                  " cut off at the output token limit")
