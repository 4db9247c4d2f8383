"""``toolloop serve``'s HTTP API over real HTTP on 127.0.0.1: tokens, the page's cookie and its
CSRF check, answers (422, 200, 409, 404) through the journal's compare-and-set, a race with
``toolloop approve``, a run followed as Server-Sent Events while it goes, and steer, abort and
resume."""

from __future__ import annotations

import getpass
import json
import threading
from pathlib import Path

import pytest

from conftest import write
from modelserver import Reply
from regkit import openai_profile, registry_yaml
from servekit import TOKEN, Served, events, registry, toolloop

from toolloop_cli._canonical import sha256_of


KEY = "sk-serve-canary"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("serve")
    write(folder / "reg.yml", registry())
    return folder


@pytest.fixture(scope="module")
def server(work):
    served = Served(work, env={"TL_TEST_KEY": KEY})  # what a resumed routed run needs
    yield served
    assert served.stop() == 0, "\n".join(served.log)


def plan(work: Path, name: str, calls: list | None = None, lanes: list | None = None) -> Path:
    doc = {"version": 1, "registry": "reg.yml", "subagent": "t"}
    if lanes is not None:
        doc.update(mode="parallel", max_concurrency=2, lanes=lanes)
    else:
        doc.update(mode="sequential", calls=calls)
    return write(work / f"{name}.yml", json.dumps(doc))


def run_paused(work: Path, name: str, **kw) -> str:
    proc = toolloop(work, "run", str(plan(work, name, **kw)), "--format", "jsonl")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 4, err.decode()
    return json.loads(out.decode().splitlines()[-1])["run_id"]


def test_every_request_needs_a_token_and_the_page_takes_it_once_as_a_cookie(server):
    with server.client(token=None) as anonymous:
        for path in ("/api/runs", "/api/approvals", "/", "/inbox", "/api/runs/x/records"):
            res = anonymous.get(path)
            assert res.status_code == 401, path
            assert res.headers["www-authenticate"].startswith("Bearer")
        assert anonymous.get("/api/runs").json()["how"].startswith("Open this page with its token once: /?token=TOKEN")
        page = anonymous.get("/")
        assert page.headers["content-type"].startswith("text/html") and "/?token=TOKEN" in page.text
        # the 401 page is styled (the stylesheet and script hold no data and need no token) and offers
        # a field for the token
        assert 'href="/static/style.css"' in page.text and '<input id="token" name="token" type="password"' in page.text
        style = anonymous.get("/static/style.css")
        assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")
        assert anonymous.get("/static/app.js").status_code == 200
        assert anonymous.post("/api/runs/x/abort", json={}).status_code == 401
        assert anonymous.get("/?token=wrong").status_code == 401
        assert anonymous.get("/", headers={"Cookie": f"toolloop_session={TOKEN}"}).status_code == 401
    with server.client(token="wrong") as wrong:
        assert wrong.get("/api/runs").status_code == 401
    with server.client() as api:
        assert api.get("/api/nope").status_code == 404 and "no such API path" in api.get("/api/nope").json()["error"]
        assert api.get("/nope").status_code == 404 and "no such page" in api.get("/nope").text
        assert api.get("/api/runs/no-such-run").status_code == 404
        assert api.delete("/api/runs").status_code == 405
    with server.client(token=None) as browser:
        opened = browser.get(f"/?token={TOKEN}")
        assert opened.status_code == 303 and opened.headers["location"] == "/"
        cookie = opened.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
        assert TOKEN not in cookie  # the cookie holds a value derived from the token
        # the cookie authenticates the page and API reads
        assert browser.get("/").status_code == 200
        assert browser.get("/api/runs").status_code == 200
        assert 'name="csrf-token"' in browser.get("/inbox").text
        assert browser.get("/static/app.js").status_code == 200


def test_changes_made_with_the_cookie_need_the_same_origin_and_the_csrf_token(server, work):
    rid = run_paused(work, "csrf", calls=[{"tool": "pay", "call_key": "p", "args": {"amount": 300, "to": "x"}}])
    with server.client(token=None) as browser:
        browser.get(f"/?token={TOKEN}")
        page = browser.get(f"/runs/{rid}").text
        csrf = page.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]
        url = f"/api/approvals/{rid}/p"
        own = server.url
        refused = [
            browser.post(url, json={"decision": "approve"}, headers={"Origin": own}),  # no CSRF token
            browser.post(url, json={"decision": "approve"}, headers={"Origin": own, "X-CSRF-Token": "0" * 64}),
            browser.post(url, json={"decision": "approve"}, headers={"X-CSRF-Token": csrf}),  # no Origin nor Referer
            browser.post(url, json={"decision": "approve"},
                         headers={"Origin": "http://evil.example", "X-CSRF-Token": csrf}),
            browser.post(url, json={"decision": "approve"},
                         headers={"Referer": "http://evil.example/", "X-CSRF-Token": csrf}),
        ]
        assert [r.status_code for r in refused] == [403] * 5
        assert "CSRF" in refused[0].json()["error"] and "Origin" in refused[3].json()["error"]
        with server.client() as api:  # nothing was answered
            assert [q["call_key"] for q in api.get("/api/approvals", params={"run": rid}).json()] == ["p"]
        done = browser.post(url, json={"decision": "reject", "message": "no"},
                            headers={"Referer": f"{own}/runs/{rid}", "X-CSRF-Token": csrf})
        assert done.status_code == 200, done.text
        assert done.json() == {"run_id": rid, "item_key": None, "call_key": "p", "state": "rejected", "edited": False,
                               "by": getpass.getuser()}


def test_answers_422_then_200_then_409_and_404_then_resume(server, work):
    lanes = [{"item_key": f"k{i}", "calls": [{"tool": "pay", "call_key": "pay", "args": {"amount": 200 + i, "to": "x"}}]}
             for i in range(2)]
    rid = run_paused(work, "answers", lanes=lanes)
    with server.client() as api:
        requests = api.get("/api/approvals", params={"run": rid}).json()
        assert [(q["item_key"], q["call_key"], q["tool"], q["effect"], q["args"]) for q in requests] == [
            ("k0", "pay", "pay", "write", {"amount": 200, "to": "x"}),
            ("k1", "pay", "pay", "write", {"amount": 201, "to": "x"})]
        url = f"/api/approvals/{rid}/pay"
        bad = api.post(url, params={"item": "k0"}, json={"decision": "approve", "args": {"amount": "lots", "to": "x"}})
        assert bad.status_code == 422
        assert bad.json()["error"] == "the arguments fail the tool's input schema: at /amount: \"lots\" is not of type \"integer\""
        assert api.post(url, params={"item": "k0"}, json={"decision": "approve", "args": [1]}).status_code == 422
        assert len(api.get("/api/approvals", params={"run": rid}).json()) == 2  # still pending
        good = api.post(url, params={"item": "k0"}, json={"decision": "approve", "args": {"amount": 150, "to": "y"},
                                                          "message": "capped"})
        assert good.status_code == 200 and good.json()["edited"] is True
        again = api.post(url, params={"item": "k0"}, json={"decision": "reject"})
        assert again.status_code == 409 and "answered already" in again.json()["error"]
        assert api.post(url, json={"decision": "approve"}).status_code == 404  # the lane is needed in a parallel run
        assert api.post(f"/api/approvals/{rid}/nope", params={"item": "k1"}, json={"decision": "approve"}).status_code == 404
        missing = api.post("/api/approvals/no-such-run/pay", json={"decision": "approve"})
        assert missing.status_code == 404 and "no run 'no-such-run'" in missing.json()["error"]
        for body in ({"decision": "maybe"}, {"decision": "reject", "args": {}}, {"decision": "approve", "extra": 1}, [1]):
            assert api.post(url, params={"item": "k1"}, json=body).status_code == 400, body
        assert api.post(url, params={"item": "k1"}, content=b"{not json").status_code == 400
        assert api.post(url, params={"item": "k1"}, json={"decision": "reject", "message": "not now"}).status_code == 200
        assert api.get("/api/approvals", params={"run": rid}).json() == []
        started = api.post(f"/api/runs/{rid}/resume")
        assert started.status_code == 202, started.text
        records = [rec for _kind, rec in events(api, rid)]
        assert api.get(f"/api/runs/{rid}/records").json() == records
    receipts = {r["item_key"]: r for r in records if r["type"] == "receipt"}
    assert receipts["k0"]["status"] == "ok" and receipts["k0"]["args"] == {"amount": 150, "to": "y"}
    assert receipts["k0"]["approval"]["decision"] == "edited" and receipts["k0"]["approval"]["by"] == getpass.getuser()
    assert receipts["k1"]["status"] == "denied" and receipts["k1"]["error"]["message"].endswith("not now")
    assert records[-1]["type"] == "summary" and records[-1]["status"] == "failed"


def test_a_race_between_the_api_and_toolloop_approve_runs_the_call_once(server, work):
    with server.client() as api:
        for i in range(2):
            target = work / f"paid-{i}.txt"
            rid = run_paused(work, f"race-{i}", calls=[{"tool": "marker", "call_key": "pay", "args": {"path": str(target)}}])
            answers: dict[str, int] = {}
            cli = toolloop(work, "approve", rid, "pay", "--approve", "--approver", "terminal")
            web = threading.Thread(target=lambda: answers.update(
                web=api.post(f"/api/approvals/{rid}/pay", json={"decision": "approve"}).status_code))
            web.start()
            answers["cli"] = cli.wait(120)
            web.join(120)
            assert sorted([answers["web"] == 200, answers["cli"] == 0]) == [False, True], answers  # exactly one won
            assert answers["web"] in (200, 409) and answers["cli"] in (0, 1)
            assert api.post(f"/api/runs/{rid}/resume").status_code == 202
            records = [rec for _kind, rec in events(api, rid)]
            assert records[-1]["status"] == "ok"
            again = api.post(f"/api/runs/{rid}/resume")  # a finished run: nothing left to run
            assert again.status_code == 409 and "nothing left to run" in again.json()["error"]
            assert target.read_text() == "ran\n"  # exactly once
            receipt = records[0]
            assert receipt["approval"]["by"] == (getpass.getuser() if answers["web"] == 200 else "terminal")


def test_server_sent_events_follow_a_run_started_during_the_test(server, work):
    gate = work / "sse.gate"
    path = plan(work, "sse", calls=[
        {"tool": "echo", "args": {"n": 1}},
        {"tool": "gate", "args": {"log": str(work / "sse.log"), "key": "g", "gate": str(gate)}},
        {"tool": "echo", "args": {"n": 3}}])
    proc = toolloop(work, "run", str(path), "--format", "jsonl")
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())  # printed after its commit: the run is under way
        rid = first["run_id"]
        with server.client() as api:
            assert api.get(f"/api/runs/{rid}").json()["status"] == "running"

            def arrived(kind, record):
                if kind == "receipt" and record["seq"] == 0:
                    gate.write_text("open")  # the rest of the run happens while the stream is open

            got = events(api, rid, arrived)
            assert [(k, r.get("seq")) for k, r in got] == [("receipt", 0), ("receipt", 1), ("receipt", 2),
                                                           ("summary", None)]
            assert got[0][1] == first and got[-1][1]["status"] == "ok"
            assert api.get(f"/api/runs/{rid}/records").json() == [r for _k, r in got]
            assert api.get(f"/api/runs/{rid}").json()["status"] == "ok"
            assert rid in [r["run_id"] for r in api.get("/api/runs").json()]
            assert api.get("/api/runs/no-such-run/records", headers={"Accept": "text/event-stream"}).status_code == 404
    finally:
        gate.write_text("open")
        proc.communicate(timeout=120)
    assert proc.returncode == 0


def test_steer_abort_and_resume(server, work):
    gate = work / "abort.gate"
    path = plan(work, "abort", calls=[
        {"tool": "echo", "args": {"n": 1}},
        {"tool": "gate", "args": {"log": str(work / "abort.log"), "key": "g", "gate": str(gate)}},
        {"tool": "echo", "args": {"n": 3}}])
    proc = toolloop(work, "run", str(path), "--format", "jsonl")
    try:
        assert proc.stdout is not None
        rid = json.loads(proc.stdout.readline())["run_id"]
        with server.client() as api:
            running = api.post(f"/api/runs/{rid}/resume")
            assert running.status_code == 409 and "is running" in running.json()["error"]
            steer = api.post(f"/api/runs/{rid}/steer", json={"message": "go left"})
            assert steer.status_code == 400 and "steer is for routed runs" in steer.json()["error"]
            aborted = api.post(f"/api/runs/{rid}/abort", json={"message": "wrong customer"})
            assert aborted.status_code == 200 and aborted.json()["kind"] == "abort"

            def arrived(kind, record):
                if kind == "supervisor":  # the run read the abort: let the call in flight end
                    gate.write_text("open")

            got = [r for _k, r in events(api, rid, arrived)]
            assert [r["reason"] for r in got if r["type"] == "supervisor"] == ["aborted by an operator: wrong customer"]
            assert got[-1]["type"] == "summary" and got[-1]["status"] == "stopped"
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 4, err.decode()
            assert api.post(f"/api/runs/{rid}/resume").status_code == 202
            got = [r for _k, r in events(api, rid)]
            assert got[-1]["status"] == "ok"
            # the gate call was in flight when the run read the abort (it ran to its end), or had not
            # started yet (cancelled, then run by the resume): either way each call ends ok, once
            last = {r["seq"]: r["status"] for r in got if r["type"] == "receipt"}
            assert last == {0: "ok", 1: "ok", 2: "ok"}
            assert [r["status"] for r in got if r["type"] == "receipt"].count("ok") == 3
            ended = api.post(f"/api/runs/{rid}/abort", json={})
            assert ended.status_code == 409 and "has ended (ok)" in ended.json()["error"]
            assert api.post("/api/runs/no-such-run/abort").status_code == 404
    finally:
        gate.write_text("open")
        if proc.poll() is None:
            proc.communicate(timeout=120)


def test_redacted_values_never_leave_the_server_and_a_kept_marker_keeps_the_value(server, work):
    secret = "s3cret-canary-value"
    rid = run_paused(work, "vault", calls=[
        {"tool": "vault", "call_key": "open", "args": {"user": "ada", "password": secret}}])
    with server.client() as api:
        (request,) = api.get("/api/approvals", params={"run": rid}).json()
        assert request["args"] == {"user": "ada", "password": "[REDACTED]"} and request["effect"] == "destructive"
        pages = [api.get(p).text for p in ("/inbox", f"/runs/{rid}", "/")]
        edited = api.post(f"/api/approvals/{rid}/open",
                          json={"decision": "approve", "args": {"user": "bob", "password": "[REDACTED]"}})
        assert edited.status_code == 200 and edited.json()["edited"] is True
        assert api.post(f"/api/runs/{rid}/resume").status_code == 202
        records = [r for _k, r in events(api, rid)]
        shown = json.dumps(records) + json.dumps(api.get(f"/api/runs/{rid}/records").json()) + "".join(pages)
        shown += api.get(f"/runs/{rid}").text + json.dumps(api.get("/api/runs").json())
    receipt = records[0]
    assert receipt["status"] == "ok" and receipt["args"] == {"user": "bob", "password": "[REDACTED]"}
    # the call ran with the edited user and the password it had (the marker kept it)
    assert receipt["args_sha256"] == sha256_of({"user": "bob", "password": secret})
    assert receipt["approval"]["decision"] == "edited"
    assert secret not in shown
    assert secret not in "\n".join(server.log)


def test_a_routed_run_is_steered_while_it_runs_then_approved_and_resumed(server, work, model_server):
    target = work / "routed-written.txt"
    write(work / "routed-reg.yml", registry_yaml("echo", "write_file"))
    profile = openai_profile(model_server.openai_base)
    write(work / "routed.yml", f"""
        version: 1
        registry: routed-reg.yml
        subagent: t
        mode: routed
        goal: Write the file.
        router_profile: {profile}
        final_profile: {profile}
        budget: {{max_iterations: 8, max_tokens: 100000, max_tool_calls: 6, timeout_s: 60}}
        final_schema: {{type: object, required: [answer]}}
    """)
    arrived, release = threading.Event(), threading.Event()

    def call(tool, args):
        return json.dumps({"action": "call", "tool": tool, "args": args, "reason": "r"})

    def held(_request):
        arrived.set()
        release.wait(60)
        return Reply(call("echo", {"a": 1}))

    model_server.script(Reply(handler=held), call("write_file", {"path": str(target)}))
    proc = toolloop(work, "run", "routed.yml", "--format", "jsonl", env={"TL_TEST_KEY": KEY})
    with server.client() as api:
        try:
            assert arrived.wait(60)  # the first turn is asking the model: the loop is running
            rid = next(r["run_id"] for r in api.get("/api/runs").json() if r["plan"].endswith("routed.yml"))
            assert api.post(f"/api/runs/{rid}/steer", json={}).status_code == 400  # steer needs a message
            steer = api.post(f"/api/runs/{rid}/steer", json={"message": "Prefer short answers."})
            assert steer.status_code == 200 and steer.json()["kind"] == "steer"
        finally:
            release.set()
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 4, err.decode()  # paused: write_file waits for a person
        assert "Prefer short answers." in json.dumps(model_server.requests[1].json["messages"])
        (request,) = api.get("/api/approvals", params={"run": rid}).json()
        assert (request["call_key"], request["tool"], request["effect"], request["args"]) == (
            "2", "write_file", "write", {"path": str(target)})
        listed = toolloop(work, "approvals", "list", rid, "--format", "json").communicate(timeout=120)[0]
        assert json.loads(listed) == [request]  # the same requests as the command line lists
        assert api.post(f"/api/approvals/{rid}/2", json={"decision": "approve"}).status_code == 200
        model_server.script('{"action": "final", "reason": "done"}', '{"answer": 1}')
        assert api.post(f"/api/runs/{rid}/resume").status_code == 202
        got = events(api, rid)
    kinds = [k for k, _r in got]
    assert kinds[-1] == "summary" and got[-1][1]["outcome"] == "final" and got[-1][1]["final"] == {"answer": 1}
    assert "decision" in kinds
    sup = [r for k, r in got if k == "supervisor"]
    assert [(s["rule"], s["action"]) for s in sup] == [("operator", "steer")]
    receipts = [r for k, r in got if k == "receipt"]
    assert [(r["tool"], r["status"]) for r in receipts] == [("echo", "ok"), ("write_file", "ok")]
    assert receipts[1]["approval"]["by"] == getpass.getuser()
    assert target.read_text() == "ran\n"


def test_the_page_shows_hostile_values_escaped(server, work):
    note = "<script>alert(1)</script>\u202etxt.exe\x1b[2J"
    proc = toolloop(work, "run", str(plan(work, "hostile", calls=[{"tool": "echo", "call_key": "k<b>", "args": {"note": note}}])),
                    "--format", "jsonl")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    rid = json.loads(out.decode().splitlines()[-1])["run_id"]
    with server.client() as api:
        page = api.get(f"/runs/{rid}")
        assert page.status_code == 200
        assert page.headers["content-security-policy"].startswith("default-src 'self'; script-src 'self'")
        html = page.text
        assert api.get(f"/api/runs/{rid}/records").json()[0]["args"] == {"note": note}  # the API gives it as it is
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "\u202e" not in html and "\x1b" not in html and "\\u202etxt.exe\\u001b[2J" in html
    assert "<b>" not in html and "k&lt;b&gt;" in html


def test_any_page_takes_the_token_once_and_opens_without_it(server, work):
    rid = run_paused(work, "opened", calls=[{"tool": "pay", "call_key": "p", "args": {"amount": 300, "to": "x"}}])
    for page in ("/inbox", f"/runs/{rid}", "/"):
        with server.client(token=None) as browser:
            opened = browser.get(page, params={"token": TOKEN})
            assert opened.status_code == 303 and opened.headers["location"] == page, page
            assert browser.get(page).status_code == 200
    with server.client(token=None) as browser:
        assert browser.get("/inbox", params={"token": "wrong"}).status_code == 401
        # a path that would leave the site is kept on it
        sent = browser.get(f"{server.url}//evil.example/x", params={"token": TOKEN})
        assert sent.headers["location"] == "/evil.example/x"


def test_a_run_with_nothing_left_to_run_offers_no_resume_and_the_api_answers_409(server, work):
    def run(name: str, calls: list) -> str:
        proc = toolloop(work, "run", str(plan(work, name, calls=calls)), "--format", "jsonl")
        out, _err = proc.communicate(timeout=120)
        return json.loads(out.decode().splitlines()[-1])["run_id"]

    done = run("done", [{"tool": "echo", "args": {"n": 1}}])
    # a call that raises (no such arguments), then one skipped after it
    failed = run("failed", [{"tool": "gate", "args": {"nope": 1}}, {"tool": "echo", "args": {}}])
    with server.client() as api:
        for rid, why in ((done, f"run {done} finished ok; there is nothing left to run"),
                         (failed, f"run {failed} failed and every call left to run has run; the failed calls run"
                                  f" again only with toolloop resume {failed} --retry-failed")):
            refused = api.post(f"/api/runs/{rid}/resume")
            assert refused.status_code == 409 and refused.json()["error"] == why
            page = api.get(f"/runs/{rid}").text
            assert 'data-kind="resume"' not in page and why in page
        # a paused run is offered one
        paused = run_paused(work, "offered", calls=[{"tool": "pay", "call_key": "p", "args": {"amount": 300, "to": "x"}}])
        assert 'data-kind="resume"' in api.get(f"/runs/{paused}").text


def test_the_run_page_shows_a_routed_runs_route_and_answer(server, work):
    from conftest import ROOT

    proc = toolloop(work, "run", str(ROOT / "plans" / "routed-example.yml"), "--format", "jsonl")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    rid = json.loads(out.decode().splitlines()[-1])["run_id"]
    with server.client() as api:
        page = api.get(f"/runs/{rid}").text
    assert 'route <strong>publish</strong>' in page and "<dt>Route</dt><dd>publish</dd>" in page
    assert "HELLO FROM TOOLLOOP" in page.split("<dt>Answer</dt>", 1)[1]
