"""``toolloop serve`` as a command: the serve extra, the users file (a token per person, recorded
as the approver), a token made up at start, the loopback default, a port in use, and stopping on
SIGTERM."""

from __future__ import annotations

import json
import socket
import sqlite3

import pytest

from conftest import write
from servekit import TOKEN, Served, events, registry, toolloop


def test_without_the_serve_extra_it_says_what_to_install(cli, tmp_path):
    shim = tmp_path / "shim"
    write(shim / "starlette" / "__init__.py", "raise ImportError('starlette is not installed here')\n")
    r = cli("serve", env={"PYTHONPATH": str(shim)})
    assert r.returncode == 2
    assert r.stderr.decode() == ("toolloop: error: toolloop serve needs the serve extra (starlette is not installed)\n"
                                 "  hint: pip install 'toolloop-cli[serve]'\n")


@pytest.mark.parametrize("text, env, message", [
    ("ada: {token_env: ADA_TOKEN}\nbob: {token_env: BOB_TOKEN}\n", {"ADA_TOKEN": "a" * 20},
     "users.yml:2:18: user 'bob': the variable 'BOB_TOKEN' is not set; export it with the person's token,"
     " or remove the user from users.yml"),
    ("ada: {token_env: ADA_TOKEN, role: admin}\n", {"ADA_TOKEN": "a" * 20},
     "users.yml:1:6: user 'ada' must be {token_env: VARIABLE} (unknown key 'role')"),
    ("- ada\n", {}, "users.yml:1:1: the users file must map names to {token_env: VARIABLE}"),
    ("ada: {token_env: [\n", {}, "users.yml:2:1: YAML syntax error"),
    ("ada: {token_env: A}\nbob: {token_env: B}\n", {"A": "same-token-value", "B": "same-token-value"},
     "users.yml:2:18: user 'bob' has the same token as another user"),
])
def test_a_users_file_that_cannot_be_used_stops_the_server_from_starting(cli, tmp_path, text, env, message):
    write(tmp_path / "users.yml", text)
    r = cli("serve", "--users", "users.yml", "--port", "0", env={"ADA_TOKEN": "", "BOB_TOKEN": "", **env})
    assert r.returncode == 2, r.stderr
    err = r.stderr.decode()
    assert err.startswith("toolloop: error: " + message), err
    assert "Traceback" not in err


def test_with_a_users_file_each_person_answers_with_their_own_token_and_name(tmp_path):
    write(tmp_path / "reg.yml", registry())
    write(tmp_path / "plan.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "t", "mode": "sequential",
                                             "calls": [{"tool": "pay", "call_key": "p", "args": {"amount": 500, "to": "x"}}]}))
    proc = toolloop(tmp_path, "run", "plan.yml", "--format", "jsonl")
    out, _ = proc.communicate(timeout=120)
    rid = json.loads(out.decode().splitlines()[-1])["run_id"]
    write(tmp_path / "users.yml", "ada:\n  token_env: ADA_TOKEN\nbob:\n  token_env: BOB_TOKEN\n")
    server = Served(tmp_path, "--users", "users.yml", env={"ADA_TOKEN": "ada-token-0123456789",
                                                           "BOB_TOKEN": "bob-token-0123456789"})
    try:
        assert server.token is None and any("2 user(s) from users.yml" in line for line in server.log)
        with server.client(token=TOKEN) as shared:  # TOOLLOOP_SERVE_TOKEN is not used with --users
            assert shared.get("/api/runs").status_code == 401
        with server.client(token="bob-token-0123456789") as bob:
            assert bob.get("/api/runs").status_code == 200
        with server.client(token="ada-token-0123456789") as ada:
            answer = ada.post(f"/api/approvals/{rid}/p", json={"decision": "approve"})
            assert answer.status_code == 200 and answer.json()["by"] == "ada"
            assert "ada" in ada.get("/inbox").text
    finally:
        assert server.stop() == 0
    con = sqlite3.connect(tmp_path / ".toolloop" / "state.db")
    try:
        assert con.execute("SELECT state, approver FROM approvals").fetchall() == [("approved", "ada")]
    finally:
        con.close()


def test_a_token_is_made_up_and_printed_when_none_is_given_and_it_listens_on_loopback(tmp_path):
    server = Served(tmp_path, env={"TOOLLOOP_SERVE_TOKEN": None})
    try:
        assert server.url.startswith("http://127.0.0.1:")
        assert server.token and server.token != TOKEN and len(server.token) >= 24
        assert any("a new token" in line for line in server.log)
        with server.client() as api:
            assert api.get("/api/runs").json() == []
        with server.client(token=TOKEN) as other:
            assert other.get("/api/runs").status_code == 401
        # a port in use is a usage error naming it
        port = int(server.url.rsplit(":", 1)[1])
        busy = toolloop(tmp_path, "serve", "--port", str(port))
        _, err = busy.communicate(timeout=120)
        assert busy.returncode == 2
        assert f"cannot listen on 127.0.0.1:{port}" in err.decode() and "--port" in err.decode()
    finally:
        assert server.stop() == 0  # SIGTERM stops it cleanly
    assert server.log[-1] == "toolloop serve: stopped"
    with socket.socket() as probe:  # and the port is free again
        probe.bind(("127.0.0.1", port))


def test_a_token_from_the_environment_is_never_printed(tmp_path):
    server = Served(tmp_path)  # TOOLLOOP_SERVE_TOKEN is set
    try:
        assert server.token == TOKEN
        with server.client() as api:
            assert api.get("/api/runs").status_code == 200
    finally:
        assert server.stop() == 0
    assert not any(TOKEN in line for line in server.log), server.log
    assert any(line.startswith(f"toolloop serve: open {server.url}/?token=TOKEN, with TOKEN the value of"
                               " TOOLLOOP_SERVE_TOKEN") for line in server.log), server.log


class _Bound:
    def __init__(self, host: str, port: int):
        self.name = (host, port)

    def getsockname(self):
        return self.name


def test_an_address_for_every_interface_is_shown_as_one_a_browser_can_open():
    from toolloop_cli.serve.server import every_address, openable_url

    assert openable_url(_Bound("0.0.0.0", 8765)) == "http://127.0.0.1:8765"
    assert openable_url(_Bound("::", 8765)) == "http://[::1]:8765"
    assert openable_url(_Bound("127.0.0.1", 9000)) == "http://127.0.0.1:9000"
    assert openable_url(_Bound("192.0.2.7", 9000)) == "http://192.0.2.7:9000"
    assert every_address(_Bound("0.0.0.0", 1)) and not every_address(_Bound("127.0.0.1", 1))


def test_the_peoples_tokens_are_secrets_of_every_run_the_server_resumes_and_of_what_they_type(tmp_path):
    ada, bob = "ada-tok-7f3e9a1c5b2d", "bob-tok-4e8d2c6a0f1b"
    # a tool that reads the people's tokens from the server's environment and returns them
    write(tmp_path / "lib" / "peekapp.py",
          "import os\n\ndef peek(**_):\n    return {'seen': [os.environ['ADA_TOKEN'], os.environ['BOB_TOKEN']]}\n")
    peek = """
      peek:
        callable: peekapp:peek
        description: Reads the people's tokens; a person approves every call.
        effect: write
        approval: required
        input_schema: {type: object}
        output_schema: {}
"""
    write(tmp_path / "reg.yml", registry(extra=peek))
    write(tmp_path / "plan.yml", json.dumps({"version": 1, "registry": "reg.yml", "subagent": "t", "mode": "sequential",
                                             "calls": [{"tool": "peek", "call_key": "a", "args": {}},
                                                       {"tool": "pay", "call_key": "b", "args": {"amount": 500, "to": "x"}}]}))
    env = {"PYTHONPATH": str(tmp_path / "lib")}
    out, err = toolloop(tmp_path, "run", "plan.yml", "--format", "jsonl", env=env).communicate(timeout=120)
    rid = json.loads(out.decode().splitlines()[-1])["run_id"]
    write(tmp_path / "users.yml", "ada:\n  token_env: ADA_TOKEN\nbob:\n  token_env: BOB_TOKEN\n")
    server = Served(tmp_path, "--users", "users.yml", env={"ADA_TOKEN": ada, "BOB_TOKEN": bob, **env})
    written = [out, err]
    try:
        with server.client(token=ada) as api:
            typed = api.post(f"/api/approvals/{rid}/a", json={"decision": "approve", "args": {"note": f"use {bob}"}})
            assert typed.status_code == 422 and "a token of this server's users" in typed.json()["error"]
            assert len(api.get("/api/approvals", params={"run": rid}).json()) == 1  # still pending
            answered = api.post(f"/api/approvals/{rid}/a", json={"decision": "approve", "message": f"ok, {bob}"})
            assert answered.status_code == 200, answered.text
            assert api.post(f"/api/runs/{rid}/resume").status_code == 202
            records = [rec for _kind, rec in events(api, rid)]
            receipt = next(r for r in records if r["type"] == "receipt" and r["call_key"] == "a")
            assert receipt["status"] == "ok" and receipt["result"] == {"seen": ["[REDACTED]", "[REDACTED]"]}
            assert records[-1]["status"] == "stopped"  # b waits for a person
            assert api.post(f"/api/runs/{rid}/abort", json={"message": f"stop: {ada}"}).status_code == 200
            for path in (f"/api/runs/{rid}/records", f"/api/runs/{rid}", f"/runs/{rid}", "/api/approvals", "/inbox"):
                res = api.get(path)
                assert res.status_code == 200, (path, res.text)
                written.append(res.content)
    finally:
        assert server.stop() == 0
    written.append("\n".join(server.log).encode())
    shown = toolloop(tmp_path, "runs", "show", rid, "--format", "jsonl").communicate(timeout=120)
    written += [*shown, *(p.read_bytes() for p in (tmp_path / ".toolloop").iterdir() if p.is_file())]
    con = sqlite3.connect(tmp_path / ".toolloop" / "state.db")
    try:
        assert con.execute("SELECT message FROM approvals WHERE call_key='a'").fetchone() == ("ok, [REDACTED]",)
    finally:
        con.close()
    for token in (ada, bob):
        assert not any(token.encode() in blob for blob in written), token
