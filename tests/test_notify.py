"""Notifications (``notify``): a person is told when a call starts waiting for them and when a run
pauses, fails or finishes; by a real command given the event on standard input, or by a real
POST to a receiver on 127.0.0.1. Each attempt is a ``notification`` record; a failed one is a
warning; nothing about a notification fails or stalls the run; header values are written nowhere."""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import trio.testing

from conftest import jsonl, write
from servekit import registry

from toolloop_cli.engine import notify
from toolloop_cli.engine.launch import Launch, RunOptions
from toolloop_cli.engine.notify import NotifyTarget, Notifier, approve_command
from toolloop_cli.engine.redact import RunSecrets
from toolloop_cli.store import Store

#: a receiver command: appends what it got on standard input, one line, to the file it is given
SINK = """
import sys
data = sys.stdin.read()
with open(sys.argv[1], "a") as out:
    out.write(data.strip() + "\\n")
"""
#: a receiver command that fails: says why on standard error and exits 3
FAILING = "import sys; sys.stdin.read(); sys.stderr.write('the hook is down\\n'); sys.exit(3)"
#: a receiver command that never answers
HANGING = "import time; time.sleep(600)"


class Receiver:
    """An HTTP receiver on 127.0.0.1: answers each POST with the next of ``statuses`` (the last one
    again when they run out), or never answers when ``hang``; keeps what it got."""

    def __init__(self, statuses=(204,), hang: bool = False):
        self.statuses = list(statuses)
        self.got: list[tuple[dict, dict]] = []  # (headers, body)
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.got.append((dict(self.headers), json.loads(body)))
                if hang:
                    outer.release.wait(60)
                    return
                status = outer.statuses.pop(0) if len(outer.statuses) > 1 else outer.statuses[0]
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/s3cret-path"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made: list[Receiver] = []

    def make(*args, **kwargs) -> Receiver:
        made.append(Receiver(*args, **kwargs))
        return made[-1]

    yield make
    for r in made:
        r.close()


class Sink:
    def __init__(self, on_summary=None):
        self.got: list[dict] = []
        self.on_summary = on_summary
        self.on_flush = None
        self.flushed_after_summary = 0

    def write(self, record: dict, line: bytes | None = None) -> None:
        if record["type"] == "summary" and self.on_summary is not None:
            self.on_summary(record)
        self.got.append(record)

    def flush(self) -> None:
        if self.got and self.got[-1]["type"] == "summary":
            self.flushed_after_summary += 1
            if self.on_flush is not None:
                self.on_flush()


def notifier(tmp_path, target: NotifyTarget, **kwargs) -> tuple[Notifier, Store, list[str]]:
    store = Store(tmp_path / "state")
    warnings: list[str] = []
    return Notifier(target, store=store, run_id="R1", plan="/p/plan.yml", secrets=RunSecrets(),
                    warn=warnings.append, **kwargs), store, warnings


def records(store: Store, run_id: str = "R1") -> list[tuple]:
    return [(r["event"], r["attempt"], r["ok"], r["error"]) for r in store.notifications_of(run_id)]


def sink_command(tmp_path) -> tuple[list[str], Path]:
    script = write(tmp_path / "hooks" / "sink.py", SINK)
    return [sys.executable, str(script), str(tmp_path / "got.jsonl")], tmp_path / "got.jsonl"


def got_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# --- the notifier on its own ---------------------------------------------------------------------

def test_a_command_gets_each_event_as_one_json_object_on_standard_input(tmp_path):
    argv, got = sink_command(tmp_path)
    n, store, warnings = notifier(tmp_path, NotifyTarget(on=frozenset(notify.EVENTS), command=tuple(argv)))
    n.labels = {"team": "a"}
    n.approval_request(run_id="R1", tool="pay", call_key="k 1", item_key="doc-1", args={"amount": 500},
                       reason="args.amount > 100")
    n.ended({"status": "failed", "outcome": None, "error": None}, [])
    n.finish()
    events = got_events(got)
    assert [e["event"] for e in events] == ["approval_request", "failed", "finished"]
    assert events[0] == {"event": "approval_request", "run_id": "R1", "plan": "/p/plan.yml", "labels": {"team": "a"},
                         "tool": "pay", "call_key": "k 1", "item_key": "doc-1", "args": {"amount": 500},
                         "reason": "args.amount > 100",
                         "approve_command": "toolloop approve R1 'k 1' --item doc-1 --approve"}
    assert events[1]["status"] == events[2]["status"] == "failed"
    assert records(store) == [("approval_request", 1, True, None), ("failed", 1, True, None),
                              ("finished", 1, True, None)]
    assert warnings == []
    store.close()


def test_only_the_events_in_on_are_sent_and_a_paused_run_has_not_finished(tmp_path):
    argv, got = sink_command(tmp_path)
    n, store, _w = notifier(tmp_path, NotifyTarget(on=frozenset({"paused", "finished"}), command=tuple(argv)))
    n.approval_request(run_id="R1", tool="pay", call_key="0", item_key=None, args={})
    n.ended({"status": "stopped"}, [(None, "0", None)])
    n.ended({"status": "interrupted"}, [])  # exit 130: failed (not in on) and finished
    n.finish()
    events = got_events(got)
    assert [e["event"] for e in events] == ["paused", "finished"]
    assert events[1]["status"] == "interrupted"
    assert events[0]["approve_command"] == "toolloop approve R1 0 --approve"
    assert events[0]["reason"] == "1 call waits for a person"
    store.close()


def test_a_command_that_fails_is_tried_three_times_each_a_record_and_a_warning_and_never_raises(tmp_path, monkeypatch):
    monkeypatch.setattr(notify, "RETRY_PAUSE_S", 0.0)
    n, store, warnings = notifier(tmp_path, NotifyTarget(on=frozenset({"finished"}),
                                                          command=(sys.executable, "-c", FAILING)))
    n.ended({"status": "ok"}, [])
    n.finish()
    error = "exit status 3: the hook is down"
    assert records(store) == [("finished", i, False, error) for i in (1, 2, 3)]
    assert len(warnings) == 3
    assert warnings[0] == (f"notification finished of run R1 to command {Path(sys.executable).name} failed"
                           f" (attempt 1 of 3): {error}")
    assert "(attempt 3 of 3)" in warnings[2]
    store.close()


def test_a_url_gets_the_event_posted_as_json_with_its_headers_and_non_2xx_is_tried_again(tmp_path, receiver,
                                                                                           monkeypatch):
    monkeypatch.setattr(notify, "RETRY_PAUSE_S", 0.0)
    hook = receiver(statuses=(500, 503, 204))
    target = NotifyTarget(on=frozenset({"finished"}), url=hook.url, headers_env=(("Authorization", "HOOK_TOKEN"),))
    n, store, warnings = notifier(tmp_path, target, environ={"HOOK_TOKEN": "Bearer tok-123",
                                                             "TOOLLOOP_SERVE_URL": "http://127.0.0.1:8765/"})
    n.ended({"status": "ok", "outcome": "final"}, [])
    n.finish()
    assert records(store) == [("finished", 1, False, "HTTP 500"), ("finished", 2, False, "HTTP 503"),
                              ("finished", 3, True, None)]
    assert len(hook.got) == 3
    headers, body = hook.got[-1]
    assert headers["Authorization"] == "Bearer tok-123" and headers["Content-Type"] == "application/json"
    assert body == {"event": "finished", "run_id": "R1", "plan": "/p/plan.yml", "labels": {}, "status": "ok",
                    "outcome": "final", "url": "http://127.0.0.1:8765/runs/R1"}
    # a warning names the receiver by scheme, host and port: never its path (a webhook's secret)
    assert len(warnings) == 2 and all("s3cret-path" not in w for w in warnings)
    assert warnings[0].endswith(f"to http://127.0.0.1:{hook.server.server_address[1]} failed (attempt 1 of 3): HTTP 500")
    store.close()


def test_a_receiver_that_never_answers_times_out_after_10_s_on_the_mock_clock(tmp_path, receiver, monkeypatch):
    monkeypatch.setattr(notify, "FINISH_WAIT_S", 100.0)  # each try's timeout alone, not the wait at the end
    clock = trio.testing.MockClock(autojump_threshold=0)
    n, store, warnings = notifier(tmp_path, NotifyTarget(on=frozenset({"finished"}),
                                                          command=(sys.executable, "-c", HANGING)), clock=clock)
    n.ended({"status": "ok"}, [])
    n.finish()
    assert records(store) == [("finished", i, False, "no answer within 10 s") for i in (1, 2, 3)]
    assert 30 <= clock.current_time() <= 30 + 2 * notify.RETRY_PAUSE_S + 1  # the tries' time, on trio's clock
    store.close()
    hook = receiver(hang=True)
    n, store, _w = notifier(tmp_path / "http", NotifyTarget(on=frozenset({"paused"}), url=hook.url),
                            clock=trio.testing.MockClock(autojump_threshold=0))
    n.ended({"status": "stopped"}, [])
    n.finish()
    assert records(store) == [("paused", i, False, "no answer within 10 s") for i in (1, 2, 3)]
    store.close()


def test_after_the_run_ends_the_process_waits_for_its_notifications_at_most_30_s(tmp_path):
    # the clock jumps only once the run has ended (finish closes the delivery): before that, the
    # delivery loop waiting for the hanging command would let it jump to the first try's timeout
    clock = trio.testing.MockClock()
    n, store, warnings = notifier(tmp_path, NotifyTarget(on=frozenset(notify.EVENTS),
                                                          command=(sys.executable, "-c", HANGING)), clock=clock)
    close = n._close

    def close_then_jump() -> None:
        close()
        clock.autojump_threshold = 0

    n._close = close_then_jump
    n.ended({"status": "failed"}, [])  # failed, then finished: 2 x 3 tries of 10 s would be over a minute
    n.finish()
    assert clock.current_time() == pytest.approx(notify.FINISH_WAIT_S, abs=0.5)
    shown = records(store)
    assert shown[:2] == [("failed", 1, False, "no answer within 10 s"), ("failed", 2, False, "no answer within 10 s")]
    never = "not sent: the process waited 30 s for it after the run ended"
    assert shown[2:] == [("failed", 0, False, never), ("finished", 0, False, never)]
    assert warnings[-1] == (f"2 notifications of run R1 to command {Path(sys.executable).name} never sent (failed,"
                            " finished): the process waited 30 s for them after the run ended")
    store.close()


def test_approve_command_is_the_exact_line_that_answers_the_call():
    assert approve_command("R", "3", None) == "toolloop approve R 3 --approve"
    assert approve_command("R", "a b", "doc;1", state_dir="/s d") == \
        "toolloop approve R 'a b' --item 'doc;1' --state-dir '/s d' --approve"


# --- runs that notify ----------------------------------------------------------------------------

def _files(tmp_path, plan_notify: str = "", registry_notify: str = "", calls: str | None = None) -> Path:
    reg = registry().replace("    runner_defaults: {tool_timeout_s: 30}",
                             "    runner_defaults: {tool_timeout_s: 30" + (f", notify: {registry_notify}" if registry_notify else "") + "}")
    write(tmp_path / "reg" / "reg.yml", reg)
    write(tmp_path / "reg" / "sink.py", SINK)
    write(tmp_path / "plans" / "sink.py", SINK)
    write(tmp_path / "plans" / "fail.py", FAILING)
    calls = calls or """
          - {tool: echo, args: {n: 1}}
          - {tool: vault, call_key: open, args: {user: ann, password: hunter2-pw}}
    """
    return write(tmp_path / "plans" / "plan.yml", f"""
        version: 1
        registry: ../reg/reg.yml
        subagent: t
        mode: sequential
        {"notify: " + plan_notify if plan_notify else ""}
        calls:
        {calls}
    """)


def _start(tmp_path, plan: Path, options: RunOptions | None = None, sink: Sink | None = None, **hooks):
    launch = Launch(tmp_path / "state")
    sink = sink or Sink()
    result = launch.start(launch.admit(plan, options or RunOptions(labels={"team": "a"})), sink,
                          handle_signals=False, **hooks)
    return result, sink


def test_a_call_waiting_for_a_person_sends_approval_request_then_paused_then_finished_after_resume(tmp_path):
    plan = _files(tmp_path, plan_notify=f"{{command: [{sys.executable}, ./sink.py, {tmp_path / 'got.jsonl'}],"
                                        " on: [approval_request, paused, finished]}")
    result, sink = _start(tmp_path, plan)
    rid = result.summary["run_id"]
    assert result.summary["status"] == "stopped"
    events = got_events(tmp_path / "got.jsonl")
    assert [e["event"] for e in events] == ["approval_request", "paused"]
    request = events[0]
    assert request == {"event": "approval_request", "run_id": rid, "plan": str(plan), "labels": {"team": "a"},
                       "tool": "vault", "call_key": "open", "args": {"user": "ann", "password": "[REDACTED]"},
                       "reason": "required",
                       "approve_command": f"toolloop approve {rid} open --state-dir {tmp_path / 'state'} --approve"}
    assert events[1]["status"] == "stopped" and events[1]["approve_command"] == request["approve_command"]
    assert all(r["type"] != "notification" for r in sink.got)  # never among the run's own records
    store = Store(tmp_path / "state")
    assert store.answer_approval(rid, None, "open", "approved", approver="test")
    store.close()
    launch = Launch(tmp_path / "state")
    resumed = launch.start(launch.resume(rid), Sink(), handle_signals=False)
    assert resumed.summary["status"] == "ok"
    events = got_events(tmp_path / "got.jsonl")
    assert [e["event"] for e in events] == ["approval_request", "paused", "finished"]
    assert events[2]["status"] == "ok" and events[2]["labels"] == {"team": "a"}
    store = Store(tmp_path / "state")
    assert records(store, rid) == [("approval_request", 1, True, None), ("paused", 1, True, None),
                                   ("finished", 1, True, None)]
    # not links of the run's hash chain: the chain holds as it was
    from toolloop_cli.chain import verify_run

    assert verify_run(store, store.get_run(rid)).ok
    store.close()


def test_by_default_only_approval_requests_and_pauses_are_sent(tmp_path):
    plan = _files(tmp_path, plan_notify=f"{{command: [{sys.executable}, ./sink.py, {tmp_path / 'got.jsonl'}]}}")
    result, _sink = _start(tmp_path, plan)
    rid = result.summary["run_id"]
    assert [e["event"] for e in got_events(tmp_path / "got.jsonl")] == ["approval_request", "paused"]
    store = Store(tmp_path / "state")
    assert store.answer_approval(rid, None, "open", "approved", approver="test")
    store.close()
    launch = Launch(tmp_path / "state")
    assert launch.start(launch.resume(rid), Sink(), handle_signals=False).summary["status"] == "ok"
    assert [e["event"] for e in got_events(tmp_path / "got.jsonl")] == ["approval_request", "paused"]  # no finished


def test_each_waiting_lane_is_told_with_its_item_key_and_a_halt_is_a_pause_too(tmp_path):
    from toolloop_cli.engine.launch import HaltPolicy

    _files(tmp_path)
    plan_path = write(tmp_path / "plans" / "lanes.yml", f"""
        version: 1
        registry: ../reg/reg.yml
        subagent: t
        mode: parallel
        notify: {{command: [{sys.executable}, ./sink.py, {tmp_path / 'got.jsonl'}]}}
        max_concurrency: 2
        lanes:
          - {{item_key: a, calls: [{{call_key: pay, tool: pay, args: {{amount: 500, to: x}}}}]}}
          - {{item_key: b, calls: [{{call_key: pay, tool: pay, args: {{amount: 900, to: y}}}}]}}
    """)
    result, _sink = _start(tmp_path, plan_path)
    rid = result.summary["run_id"]
    events = got_events(tmp_path / "got.jsonl")
    requests = sorted((e for e in events if e["event"] == "approval_request"), key=lambda e: e["item_key"])
    assert [(e["item_key"], e["args"]["amount"], e["approve_command"]) for e in requests] == [
        ("a", 500, f"toolloop approve {rid} pay --item a --state-dir {tmp_path / 'state'} --approve"),
        ("b", 900, f"toolloop approve {rid} pay --item b --state-dir {tmp_path / 'state'} --approve")]
    paused = [e for e in events if e["event"] == "paused"]
    assert len(paused) == 1 and paused[0]["reason"] == "2 calls wait for a person" and "approve_command" not in paused[0]
    # a run stopped by its halt policy stops resumable too: it is a pause
    (tmp_path / "got.jsonl").unlink()
    halted = _files(tmp_path, plan_notify=f"{{command: [{sys.executable}, ./sink.py, {tmp_path / 'got.jsonl'}]}}",
                    calls="  [{tool: vault, args: {user: u, password: p}}, {tool: echo, args: {n: 1}}]")
    result, _sink = _start(tmp_path, halted, RunOptions(halt=HaltPolicy("now", fail_count=1), approve="none"))
    assert result.summary["status"] == "stopped"
    assert [(e["event"], e["status"]) for e in got_events(tmp_path / "got.jsonl")] == [("paused", "stopped")]


def test_a_failed_run_sends_failed_and_finished_and_a_broken_receiver_never_fails_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(notify, "RETRY_PAUSE_S", 0.0)
    denied = "  - {tool: pay, args: {amount: 500, to: x}}\n"  # --approve none denies it: the run fails
    plan = _files(tmp_path, plan_notify=f"{{command: [{sys.executable}, ./sink.py, {tmp_path / 'got.jsonl'}],"
                                        " on: [failed, finished]}", calls=denied)
    result, _sink = _start(tmp_path, plan, RunOptions(approve="none"))
    assert result.summary["status"] == "failed"
    events = got_events(tmp_path / "got.jsonl")
    assert [(e["event"], e["status"]) for e in events] == [("failed", "failed"), ("finished", "failed")]
    broken = _files(tmp_path, plan_notify=f"{{command: [{sys.executable}, ./fail.py], on: [failed, finished]}}",
                    calls=denied)
    warnings: list[str] = []
    result, _sink = _start(tmp_path, broken, RunOptions(approve="none"), on_warning=warnings.append)
    assert result.summary["status"] == "failed" and result.exit_code == 1  # the denied call's doing, not the hook's
    store = Store(tmp_path / "state")
    shown = records(store, result.summary["run_id"])
    store.close()
    assert shown == [("failed", i, False, "exit status 3: the hook is down") for i in (1, 2, 3)] + [
        ("finished", i, False, "exit status 3: the hook is down") for i in (1, 2, 3)]
    assert len(warnings) == 6 and all("failed (attempt" in w for w in warnings)
    ok = _files(tmp_path, plan_notify=f"{{command: [{sys.executable}, ./fail.py], on: [finished]}}",
                calls="  - {tool: echo, args: {n: 1}}\n")
    result, _sink = _start(tmp_path, ok, on_warning=warnings.append)
    assert result.summary["status"] == "ok" and result.exit_code == 0


def test_the_plans_notify_wins_over_runner_defaults_and_paths_are_relative_to_the_declaring_file(tmp_path):
    on = "on: [finished]"
    both = _files(tmp_path, registry_notify=f"{{command: [{sys.executable}, ./sink.py, {tmp_path / 'reg.jsonl'}], {on}}}",
                  plan_notify=f"{{command: [{sys.executable}, ./sink.py, {tmp_path / 'plan.jsonl'}], {on}}}",
                  calls="  - {tool: echo, args: {n: 1}}\n")
    _start(tmp_path, both)
    assert [e["event"] for e in got_events(tmp_path / "plan.jsonl")] == ["finished"]
    assert not (tmp_path / "reg.jsonl").exists()
    (tmp_path / "plans" / "sink.py").unlink()  # ./sink.py is the registry's, beside it, not the plan's
    only_registry = _files(tmp_path, registry_notify=f"{{command: [{sys.executable}, ./sink.py, {tmp_path / 'reg.jsonl'}],"
                                                     f" {on}}}", calls="  - {tool: echo, args: {n: 1}}\n")
    (tmp_path / "plans" / "sink.py").unlink()
    _start(tmp_path, only_registry)
    assert [e["event"] for e in got_events(tmp_path / "reg.jsonl")] == ["finished"]


def test_a_receiver_that_hangs_does_not_hold_the_run_back(tmp_path, monkeypatch):
    monkeypatch.setattr(notify, "FINISH_WAIT_S", 0.5)
    plan = _files(tmp_path, plan_notify=f"{{command: [{sys.executable}, -c, \"{HANGING}\"]}}")
    seen_at_summary: list = []

    def look(_summary: dict) -> None:  # on the output thread, when the summary is written
        con = sqlite3.connect(tmp_path / "state" / "state.db")
        seen_at_summary.append(con.execute("SELECT COUNT(*) FROM notifications").fetchone()[0])
        con.close()

    sink = Sink(on_summary=look)
    sink.on_flush = lambda: look({})  # the summary is flushed to its reader before the process waits
    result, sink = _start(tmp_path, plan, sink=sink)
    assert result.summary["status"] == "stopped" and sink.got[-1] == result.summary
    assert seen_at_summary == [0, 0]  # the summary was out, and flushed, while the first attempt still waited
    assert sink.flushed_after_summary == 1
    store = Store(tmp_path / "state")
    never = "not sent: the process waited 0.5 s for it after the run ended"
    assert records(store, result.summary["run_id"]) == [("approval_request", 0, False, never),
                                                        ("paused", 0, False, never)]
    store.close()


# --- what people see -------------------------------------------------------------------------------

def test_runs_show_prints_notifications_before_the_summary_and_header_values_are_written_nowhere(tmp_path, cli,
                                                                                                 receiver):
    hook = receiver(statuses=(500, 204))
    token = "Bearer hook-tok-5e1f2a9b7c"
    # a tool that reads the hook's token from the environment and returns it: the run's records
    # must still never hold it (header values are secrets of the run)
    write(tmp_path / "lib" / "hookapp.py", "import os\n\ndef leak():\n    return {'seen': os.environ['HOOK_TOKEN']}\n")
    leak = """
      leak:
        callable: hookapp:leak
        description: Reads the hook's token.
        input_schema: {type: object}
        output_schema: {}
"""
    write(tmp_path / "reg.yml", registry(extra=leak))
    write(tmp_path / "plan.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: sequential
        notify: {{url: "{hook.url}", headers_env: {{Authorization: HOOK_TOKEN}}, on: [approval_request, paused]}}
        calls:
          - {{tool: leak, args: {{}}}}
          - {{tool: vault, call_key: open, args: {{user: ann, password: pw-1}}}}
    """)
    env = {"HOOK_TOKEN": token, "TOOLLOOP_SERVE_URL": "http://127.0.0.1:8765", "PYTHONPATH": str(tmp_path / "lib")}
    ran = cli("run", "plan.yml", "--format", "jsonl", "--audit", "audit.jsonl", env=env)
    assert ran.returncode == 4, ran.stderr
    out = jsonl(ran.stdout)
    rid = out[-1]["run_id"]
    assert [r["type"] for r in out] == ["receipt", "summary"]  # no notification record among the run's output
    assert out[0]["status"] == "ok" and "[REDACTED]" in out[0]["result"]["seen"]
    assert f"warning: notification approval_request of run {rid} to http://127.0.0.1:" in ran.stderr.decode()
    bodies = [body for _h, body in hook.got]
    assert [b["event"] for b in bodies] == ["approval_request", "approval_request", "paused"]
    assert bodies[0]["url"] == f"http://127.0.0.1:8765/runs/{rid}"
    assert bodies[0]["approve_command"] == f"toolloop approve {rid} open --approve"
    assert all(h["Authorization"] == token for h, _b in hook.got)
    shown = cli("runs", "show", rid, "--format", "jsonl", env=env)
    rows = jsonl(shown.stdout)
    from jsonschema import Draft202012Validator

    from toolloop_cli.record_schema import receipt_schema

    checker = Draft202012Validator(receipt_schema())
    assert all(checker.is_valid(r) for r in rows if r["type"] == "notification")
    assert not checker.is_valid({**rows[2], "event": "done"})
    assert [r["type"] for r in rows] == ["receipt", "approval_request", "notification", "notification", "notification",
                                         "summary"]
    assert [(r["event"], r["attempt"], r["ok"], r["error"]) for r in rows[2:5]] == [
        ("approval_request", 1, False, "HTTP 500"), ("approval_request", 2, True, None), ("paused", 1, True, None)]
    written = [ran.stdout, ran.stderr, shown.stdout, (tmp_path / "audit.jsonl").read_bytes()]
    written += [p.read_bytes() for p in (tmp_path / ".toolloop").iterdir() if p.is_file()]
    for secret in (token.encode(), b"hook-tok-5e1f2a9b7c"):
        assert not any(secret in blob for blob in written)


# --- declarations and routed runs ------------------------------------------------------------------

@pytest.mark.parametrize("block, message", [
    ("{command: [x], url: 'http://127.0.0.1:1/'}",
     "'notify': needs exactly one of 'command' (a program given the event on standard input) or 'url' (the event"
     " is POSTed to it)"),
    ("{on: [finished]}", "'notify': needs exactly one of 'command'"),
    ("{url: 'ftp://127.0.0.1/'}", "'notify': 'url' must be an http:// or https:// address"),
    ("{url: 'http://127.0.0.1:99999/hook'}", "'notify': 'url' needs a host and, if it names a port, one from 1 to"),
    ("{url: 'https://hooks.example:0/'}", "'notify': 'url' needs a host and, if it names a port, one from 1 to"),
    ("{url: 'http:///hook'}", "'notify': 'url' needs a host"),
    ("{command: [x], headers_env: {Authorization: T}}", "'notify': 'headers_env' goes with 'url', not with 'command'"),
    ("{command: [x], on: [finished, done]}", "item 2 of 'on' must be one of 'approval_request', 'paused', 'failed'"
                                             " or 'finished', found 'done'"),
    ("{command: [x], on: []}", "'on' must not be empty"),
])
def test_a_notify_block_is_checked_before_anything_runs(tmp_path, block, message):
    from toolloop_cli.errors import ConfigError
    from toolloop_cli.plan.admit import admit_plan

    plan = _files(tmp_path, plan_notify=block, calls="  - {tool: echo, args: {n: 1}}\n")
    with pytest.raises(ConfigError) as caught:
        admit_plan(plan)
    found = [p for p in caught.value.problems if p.path.startswith("notify")]
    assert found and found[0].code == "TL203" and message in found[0].message, caught.value.problems
    # the same block under the registry's runner_defaults is refused there too
    reg_only = _files(tmp_path, registry_notify=block, calls="  - {tool: echo, args: {n: 1}}\n")
    with pytest.raises(ConfigError) as caught:
        admit_plan(reg_only)
    assert any(message in p.message and "runner_defaults" in p.path for p in caught.value.problems)


def test_a_routed_call_waiting_for_a_person_is_told_with_its_turn_and_the_run_pauses(tmp_path):
    from conftest import APP
    from toolloop_cli.engine.run import execute_plan
    from toolloop_cli.plan.admit import admit_plan
    from toolloop_cli.providers import ModelReply
    from toolloop_cli.providers.scripted import ScriptedProvider

    write(tmp_path / "sink.py", SINK)
    plan = write(tmp_path / "plan.yml", f"""
        version: 1
        registry: {APP / "registry.yml"}
        subagent: t
        mode: routed
        goal: Pay.
        allowed_tools: [echo, pay]
        router_profile: {{provider: openai, model: m}}
        final_profile: {{provider: openai, model: m}}
        budget: {{max_iterations: 4, max_tokens: 10000, max_tool_calls: 3, timeout_s: 30}}
        final_schema: {{type: object}}
        notify: {{command: [{sys.executable}, ./sink.py, {tmp_path / "got.jsonl"}]}}
    """)
    call = '{"action": "call", "tool": "pay", "args": {"amount": 500}, "reason": "pay it"}'
    provider = ScriptedProvider([ModelReply(call, 10, 5, "m")])
    store = Store(tmp_path / "state")
    try:
        result = execute_plan(admit_plan(plan), store, lambda _r: None,
                              RunOptions(handle_signals=False, providers={"openai": provider}, labels={}))
    finally:
        store.close()
    rid = result.summary["run_id"]
    assert result.summary["outcome"] == "paused" and result.exit_code == 4
    events = got_events(tmp_path / "got.jsonl")
    assert [e["event"] for e in events] == ["approval_request", "paused"]
    assert events[0]["tool"] == "pay" and events[0]["call_key"] == "1" and events[0]["args"] == {"amount": 500}
    assert events[0]["reason"] == "args.amount > 100"
    line = f"toolloop approve {rid} 1 --state-dir {tmp_path / 'state'} --approve"
    assert events[0]["approve_command"] == events[1]["approve_command"] == line
    assert events[1]["outcome"] == "paused" and events[1]["status"] == "stopped"


def test_a_replay_tells_nobody(tmp_path):
    """The recorded run was told about; replaying it (a check of the recording) sends nothing."""
    from conftest import ROOT

    text = (ROOT / "plans" / "routed-example.yml").read_text()
    for rel in ("../registries/demo.yml", "prompts/routed-example.md", "fixtures/routed-example.jsonl"):
        text = text.replace(rel, str((ROOT / "plans" / rel).resolve()))
    write(tmp_path / "sink.py", SINK)
    plan = write(tmp_path / "plan.yml", text + f"notify: {{command: [{sys.executable}, ./sink.py,"
                                                f" {tmp_path / 'got.jsonl'}], on: [finished]}}\n")
    result, _sink = _start(tmp_path, plan)
    assert result.summary["outcome"] == "final"
    assert [e["event"] for e in got_events(tmp_path / "got.jsonl")] == ["finished"]
    launch = Launch(tmp_path / "state")
    replayed = launch.start(launch.replay(result.summary["run_id"]), Sink(), handle_signals=False)
    assert replayed.summary["outcome"] == "final" and replayed.summary["run_id"] != result.summary["run_id"]
    assert [e["event"] for e in got_events(tmp_path / "got.jsonl")] == ["finished"]
    store = Store(tmp_path / "state")
    assert records(store, replayed.summary["run_id"]) == []
    store.close()


def test_a_child_runs_call_that_waits_is_told_with_the_childs_run_id(tmp_path):
    from conftest import APP
    from toolloop_cli.engine.run import execute_plan
    from toolloop_cli.plan.admit import admit_plan
    from toolloop_cli.providers import ModelReply
    from toolloop_cli.providers.scripted import ScriptedProvider

    write(tmp_path / "sink.py", SINK)
    write(tmp_path / "child.yml", """
        version: 1
        registry: reg.yml
        subagent: t
        mode: routed
        goal: Write it.
        allowed_tools: [gated]
        router_profile: {provider: openai, model: m}
        final_profile: {provider: openai, model: m}
        budget: {max_iterations: 4, max_tokens: 10000, max_tool_calls: 3, timeout_s: 30}
        final_schema: {type: object}
    """)
    write(tmp_path / "reg.yml", f"""
        version: 1
        app_root: {APP}
        subagents:
          t:
            runner_defaults: {{tool_timeout_s: 30}}
            tools:
              gated:
                callable: testapp.tools:echo
                description: A person approves every call.
                effect: write
                approval: required
                input_schema: {{type: object}}
                output_schema: {{}}
              child:
                plan: child.yml
                description: A routed child.
    """)
    plan = write(tmp_path / "plan.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: sequential
        notify: {{command: [{sys.executable}, ./sink.py, {tmp_path / "got.jsonl"}]}}
        calls:
          - {{tool: child, call_key: ask, args: {{}}}}
    """)
    call = '{"action": "call", "tool": "gated", "args": {"n": 1}, "reason": "write"}'
    store = Store(tmp_path / "state")
    try:
        result = execute_plan(admit_plan(plan), store, lambda _r: None, RunOptions(
            handle_signals=False, providers={"openai": ScriptedProvider([ModelReply(call, 10, 5, "m")])}))
        child_id = store.child_run(result.summary["run_id"], 0)["run_id"]
    finally:
        store.close()
    assert result.summary["status"] == "stopped"
    events = got_events(tmp_path / "got.jsonl")
    assert [(e["event"], e["run_id"]) for e in events] == [("approval_request", child_id),
                                                           ("paused", result.summary["run_id"])]
    assert events[0]["approve_command"] == f"toolloop approve {child_id} 1 --state-dir {tmp_path / 'state'} --approve"
    assert "approve_command" not in events[1]  # the parent waits for its child, not for a call of its own


def test_an_event_after_the_delivery_thread_stopped_is_recorded_as_never_sent(tmp_path):
    argv, got = sink_command(tmp_path)
    n, store, warnings = notifier(tmp_path, NotifyTarget(on=frozenset(notify.EVENTS), command=tuple(argv)))
    n.ended({"status": "ok"}, [])
    n.finish()
    n.approval_request(run_id="R1", tool="pay", call_key="0", item_key=None, args={})  # too late: never raises
    n.finish()
    assert records(store)[-1][:3] == ("approval_request", 0, False)
    assert [e["event"] for e in got_events(got)] == ["finished"]
    store.close()


def test_pruning_a_run_deletes_its_notification_records(tmp_path):
    plan = _files(tmp_path, plan_notify=f"{{command: [{sys.executable}, ./sink.py, {tmp_path / 'got.jsonl'}],"
                                        " on: [finished]}", calls="  - {tool: echo, args: {n: 1}}\n")
    result, _sink = _start(tmp_path, plan)
    rid = result.summary["run_id"]
    store = Store(tmp_path / "state")
    try:
        assert records(store, rid) == [("finished", 1, True, None)]
        assert store.delete_runs(store.prunable_runs())["runs"] == 1
        assert store.notifications_of(rid) == []
    finally:
        store.close()


# --- the warnings scrubbed like every other output ------------------------------------------------
def _written(tmp_path, *runs) -> list[bytes]:
    blobs = [b for ran in runs for b in (ran.stdout, ran.stderr)]
    return blobs + [p.read_bytes() for p in (tmp_path / ".toolloop").iterdir() if p.is_file()]


def _pieces(secret: str, size: int = 8) -> list[bytes]:
    """Every run of ``size`` characters of ``secret``: a clipped secret leaks its start too."""
    return [secret[i:i + size].encode() for i in range(len(secret) - size + 1)]


def test_a_failing_commands_warning_is_scrubbed_before_it_is_clipped(tmp_path, cli):
    # the hook inherits the run's environment and says, after a long line, the serve token it
    # read: the warning clips that line, and a secret cut in two must not leave its start behind
    token = "tlserve-" + "5d4c3b2a1f0e" * 3
    hook = ("import os, sys; sys.stdin.read(); sys.stderr.write('x' * 150 + os.environ['TOOLLOOP_SERVE_TOKEN']"
            " + '\\n'); sys.exit(3)")
    write(tmp_path / "reg.yml", registry())
    write(tmp_path / "plan.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: sequential
        notify: {{command: {json.dumps([sys.executable, "-c", hook])}, on: [finished]}}
        calls:
          - {{tool: echo, args: {{n: 1}}}}
    """)
    ran = cli("run", "plan.yml", "--format", "jsonl", env={"TOOLLOOP_SERVE_TOKEN": token})
    assert ran.returncode == 0, ran.stderr
    err = ran.stderr.decode()
    assert err.count("warning: notification finished of run") == 3, err
    assert "exit status 3: " + "x" * 10 in err and "[REDACTED]" in err
    shown = cli("runs", "show", jsonl(ran.stdout)[-1]["run_id"], "--format", "jsonl")
    assert [r["error"] for r in jsonl(shown.stdout) if r["type"] == "notification"][0].endswith("[REDACTED]")
    for piece in _pieces(token):
        assert not any(piece in blob for blob in _written(tmp_path, ran, shown)), piece


def test_a_urls_token_is_a_secret_of_the_run(tmp_path, cli, receiver):
    # a webhook's token in its path and query, a password before its host: a tool that quotes the
    # URL, and the warnings of a receiver that fails, never write them
    hook = receiver(statuses=(500,))
    port = hook.server.server_address[1]
    url = f"http://ann:pw-9c8b7a6f5e@127.0.0.1:{port}/hooks/T0-8f7e6d5c4b?sig=sig-1a2b3c4d5e"
    write(tmp_path / "lib" / "hookapp.py", "import os\n\ndef quote():\n    return {'said': 'posting to ' + os.environ['HOOK_URL']}\n")
    quote = """
      quote:
        callable: hookapp:quote
        description: Quotes the hook's URL.
        input_schema: {type: object}
        output_schema: {}
"""
    write(tmp_path / "reg.yml", registry(extra=quote))
    write(tmp_path / "plan.yml", f"""
        version: 1
        registry: reg.yml
        subagent: t
        mode: sequential
        notify: {{url: "{url}", on: [finished]}}
        calls:
          - {{tool: quote, args: {{}}}}
    """)
    ran = cli("run", "plan.yml", "--format", "jsonl", env={"HOOK_URL": url, "PYTHONPATH": str(tmp_path / "lib")})
    assert ran.returncode == 0, ran.stderr
    assert len(hook.got) == 3 and hook.got[0][1]["event"] == "finished"
    assert f"to http://127.0.0.1:{port} failed (attempt 3 of 3): HTTP 500" in ran.stderr.decode()
    receipt = jsonl(ran.stdout)[0]
    assert receipt["status"] == "ok" and receipt["result"]["said"].startswith("posting to http://ann:[REDACTED]@")
    for secret in ("pw-9c8b7a6f5e", "T0-8f7e6d5c4b", "sig-1a2b3c4d5e"):
        assert not any(secret.encode() in blob for blob in _written(tmp_path, ran)), secret


def test_a_port_out_of_range_is_a_failed_attempt_never_an_error_of_the_run(tmp_path):
    target = NotifyTarget(on=frozenset({"finished"}), url="http://127.0.0.1:99999/hooks/x")
    n, store, warnings = notifier(tmp_path, target)
    n.send("finished")
    n.finish()  # never raises
    assert [r[:3] for r in records(store)] == [("finished", 1, False), ("finished", 2, False), ("finished", 3, False)]
    assert warnings and all(" to http://127.0.0.1 failed" in w for w in warnings)
