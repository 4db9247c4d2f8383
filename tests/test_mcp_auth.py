"""MCP servers over HTTP authenticated with OAuth client credentials (``auth``), against
tests/mcp_oauth_server.py on 127.0.0.1: the mcp SDK's own server, taking only the tokens its
authorization server (same port) issued. The token endpoint discovered from the server's 401 (or
its well-known document) or given; asked with HTTP Basic; kept in the state folder (owner only)
until it expires; one new token and one retry on a 401; the client secret and every token
hidden in everything written; a failing token endpoint an error receipt naming where and what."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import ROOT, jsonl, write
from regkit import RecordSink as Records

from toolloop_cli.engine.launch import Launch, RunOptions

CLIENT_ID = "toolloop-ci"
SECRET = "s3cret-client-credential-canary-91f2"
SERVER = ROOT / "tests" / "mcp_oauth_server.py"
ENV = {"TICKETS_CLIENT_ID": CLIENT_ID, "TICKETS_CLIENT_SECRET": SECRET}


class OAuthServer:
    def __init__(self, *flags: str):
        env = {**os.environ, "MCP_CLIENT_ID": CLIENT_ID, "MCP_CLIENT_SECRET": SECRET}
        self.proc = subprocess.Popen([sys.executable, str(SERVER), *flags], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert line.isdigit(), f"the MCP server did not start ({line!r})"
        self.port = int(line)
        self.base = f"http://127.0.0.1:{line}"
        self.url = f"{self.base}/mcp"

    def state(self) -> dict:
        return httpx.get(f"{self.base}/control").json()

    def change(self, **what) -> None:
        httpx.post(f"{self.base}/control", json=what).raise_for_status()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def server():
    s = OAuthServer()
    yield s
    s.stop()


@pytest.fixture
def creds(monkeypatch):
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)


#: a callable tool that changes what the server does next (between two MCP calls of one run)
CONTROL = '''
import json, urllib.request

def change(url: str, what: dict) -> dict:
    request = urllib.request.Request(url + "/control", data=json.dumps(what).encode(), method="POST")
    urllib.request.urlopen(request).read()
    return {"changed": sorted(what)}
'''


def registry(tmp_path: Path, url: str, *, token_url: str | None = None, pinned: bool = False,
             scope: str | None = "tickets:read") -> Path:
    cc = {"client_id_env": "TICKETS_CLIENT_ID", "client_secret_env": "TICKETS_CLIENT_SECRET"}
    if token_url:
        cc["token_url"] = token_url
    if scope:
        cc["scope"] = scope
    mcp = {"url": url, "allow": ["echo", "whoami"], "trusted": True, "auth": {"client_credentials": cc}}
    tools: dict = {"tickets": {"mcp": mcp}, "control": {
        "callable": "oauth_control:change", "description": "change what the server does next",
        "input_schema": {"type": "object"}, "output_schema": {}}}
    if pinned:  # nothing taken from the server: it is reached first by the call itself
        tools["tickets"] = {"mcp": {**mcp, "allow": ["echo"]}, "effect": "read", "description": "echo",
                            "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
                            "output_schema": {}}
    (tmp_path / "oauth_control.py").write_text(CONTROL, encoding="utf-8")
    return write(tmp_path / "reg.yml", json.dumps({"version": 1, "app_root": ".", "subagents": {
        "w": {"runner_defaults": {"tool_timeout_s": 20}, "tools": tools}}}))


def plan(tmp_path: Path, calls: list[dict], name: str = "plan.yml") -> Path:
    return write(tmp_path / name, json.dumps(
        {"version": 1, "registry": "reg.yml", "subagent": "w", "mode": "sequential", "calls": calls}))



def run(tmp_path: Path, calls: list[dict], name: str = "plan.yml") -> list[dict]:
    """A run in this process (the state folder in tmp_path/state): its receipts."""
    launch = Launch(tmp_path / "state")
    sink = Records()
    launch.start(launch.admit(plan(tmp_path, calls, name), RunOptions()), sink, handle_signals=False)
    return [r for r in sink.got if r["type"] == "receipt"]


def echo(text: str) -> dict:
    return {"tool": "tickets.echo", "args": {"text": text}}


def answered(receipt: dict) -> dict:
    result = receipt["result"]
    return result if "content" not in result else json.loads(result["content"][0]["text"])


def test_the_token_endpoint_is_discovered_from_the_401_and_asked_with_basic_auth(tmp_path, server, creds):
    registry(tmp_path, server.url)
    receipts = run(tmp_path, [echo("hi"), {"tool": "tickets.whoami", "args": {}}])
    assert [r["status"] for r in receipts] == ["ok", "ok"], receipts
    assert answered(receipts[0]) == {"text": "hi"}
    assert answered(receipts[1]) == {"token": "[REDACTED]"}  # the server quoted the token it was sent
    state = server.state()
    (asked,) = state["token_requests"]
    assert asked["basic"] is True
    assert asked["form"] == {"grant_type": "client_credentials", "scope": "tickets:read", "resource": server.url}
    # the server's resource_metadata, then the authorization server's metadata (path-aware)
    assert state["metadata_requests"] == ["/.well-known/oauth-protected-resource/mcp",
                                          "/.well-known/oauth-authorization-server/auth"]
    kept = tmp_path / "state" / "mcp-tokens.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    data = json.loads(kept.read_text())
    assert data["endpoints"] == {server.url: f"{server.base}/auth/token"}
    (key,) = data["tokens"]
    assert json.loads(key) == [f"{server.base}/auth/token", CLIENT_ID]  # keyed by token URL and client id
    assert data["tokens"][key]["access_token"] == state["issued"][0]
    assert SECRET not in kept.read_text()  # the secret is never kept


def test_without_a_hint_the_well_known_document_is_read(tmp_path, creds):
    server = OAuthServer("--no-hint")
    try:
        registry(tmp_path, server.url)
        assert [r["status"] for r in run(tmp_path, [echo("a")])] == ["ok"]
        state = server.state()
        assert len(state["token_requests"]) == 1
        assert state["metadata_requests"][0] == "/.well-known/oauth-protected-resource/mcp"
    finally:
        server.stop()


def test_a_kept_token_serves_later_runs_until_it_expires(tmp_path, server, creds, monkeypatch):
    from toolloop_cli.contract import mcp_tokens

    registry(tmp_path, server.url)
    assert [r["status"] for r in run(tmp_path, [echo("1")])] == ["ok"]
    found = len(server.state()["metadata_requests"])
    assert [r["status"] for r in run(tmp_path, [echo("2")], "p2.yml")] == ["ok"]
    state = server.state()
    assert len(state["token_requests"]) == 1  # the kept token, without discovering again
    assert len(state["metadata_requests"]) == found
    # an hour later the token has expired: a new one from the endpoint found before
    monkeypatch.setattr(mcp_tokens, "now", lambda: time.time() + 3601)
    assert [r["status"] for r in run(tmp_path, [echo("3")], "p3.yml")] == ["ok"]
    state = server.state()
    assert len(state["token_requests"]) == 2 and len(state["metadata_requests"]) == found
    assert state["last_token"] == state["issued"][1]


def test_a_token_without_expires_in_is_kept_until_a_401(tmp_path, server, creds, monkeypatch):
    from toolloop_cli.contract import mcp_tokens

    server.change(expires_in=None)
    registry(tmp_path, server.url)
    assert [r["status"] for r in run(tmp_path, [echo("1")])] == ["ok"]
    monkeypatch.setattr(mcp_tokens, "now", lambda: time.time() + 10 * 365 * 86400)
    assert [r["status"] for r in run(tmp_path, [echo("2")], "p2.yml")] == ["ok"]
    assert len(server.state()["token_requests"]) == 1


def test_a_refused_token_is_replaced_once_and_the_request_sent_again(tmp_path, server, creds):
    registry(tmp_path, server.url)
    receipts = run(tmp_path, [echo("before"), {"tool": "control", "args": {"url": server.base, "what": {"revoke": True}}},
                              echo("after")])
    assert [r["status"] for r in receipts] == ["ok", "ok", "ok"], receipts
    assert answered(receipts[2]) == {"text": "after"}
    state = server.state()
    assert len(state["token_requests"]) == 2 and state["refused"] == 2  # the first request, the revoked token
    assert state["last_token"] == state["issued"][1]
    kept = json.loads((tmp_path / "state" / "mcp-tokens.json").read_text())["tokens"]
    assert [v["access_token"] for v in kept.values()] == [state["issued"][1]]


def test_a_second_401_after_a_fresh_token_ends_the_call_as_an_error(tmp_path, server, creds):
    registry(tmp_path, server.url)
    receipts = run(tmp_path, [echo("before"), {"tool": "control", "args": {"url": server.base,
                                                                           "what": {"refuse_all": True}}},
                              echo("after")])
    assert [r["status"] for r in receipts][:3] == ["ok", "ok", "error"], receipts
    assert receipts[2]["error"]["message"] == f"http://127.0.0.1:{server.port} answered HTTP 401 to a token just issued"
    assert len(server.state()["token_requests"]) == 2  # one new token, never a third


def test_a_failing_token_endpoint_is_an_error_receipt_naming_scheme_host_port_and_status(tmp_path, server, creds):
    server.change(fail=503)  # its answer quotes the secret: never shown
    registry(tmp_path, server.url, token_url=f"{server.base}/auth/token", pinned=True)
    (receipt,) = run(tmp_path, [{"tool": "tickets", "args": {"text": "x"}}])
    assert receipt["status"] == "error"
    message = receipt["error"]["message"]
    assert message == (f"MCP server '{server.url}' could not be reached: the token endpoint"
                       f" http://127.0.0.1:{server.port} answered HTTP 503 Service Unavailable"
                       " (temporarily_unavailable)")
    assert server.state()["metadata_requests"] == []  # a token_url given: nothing discovered
    # once the endpoint answers again, so does the server
    server.change(fail=None)
    assert [r["status"] for r in run(tmp_path, [{"tool": "tickets", "args": {"text": "y"}}], "p2.yml")] == ["ok"]


def test_a_token_endpoint_failing_when_admission_lists_the_server_refuses_the_plan(tmp_path, server, creds):
    from toolloop_cli.errors import ConfigError

    server.change(fail=500)
    registry(tmp_path, server.url)
    with pytest.raises(ConfigError) as refused:
        Launch(tmp_path / "state").admit(plan(tmp_path, [echo("x")]), RunOptions())
    assert {p.code for p in refused.value.problems} == {"TL313"}
    said = f"the token endpoint http://127.0.0.1:{server.port} answered HTTP 500 Internal Server Error"
    assert all(said in p.message and SECRET not in p.message for p in refused.value.problems)


def test_a_token_endpoint_failing_during_a_run_fails_that_call_and_not_the_session(tmp_path, server, creds):
    registry(tmp_path, server.url)
    receipts = run(tmp_path, [
        echo("1"),
        {"tool": "control", "args": {"url": server.base, "what": {"revoke": True, "fail": 500}}},
        echo("2"),
        {"tool": "control", "args": {"url": server.base, "what": {"fail": None}}},
        echo("3"),
    ])
    statuses = [r["status"] for r in receipts]
    assert statuses[:3] == ["ok", "ok", "error"], receipts
    assert receipts[2]["error"]["message"] == (f"the token endpoint http://127.0.0.1:{server.port} answered HTTP 500"
                                               " Internal Server Error (temporarily_unavailable)")
    assert SECRET not in json.dumps(receipts)


def test_unset_variables_refuse_the_run_at_admission_naming_them(tmp_path, server, monkeypatch):
    from toolloop_cli.errors import ConfigError

    monkeypatch.setenv("TICKETS_CLIENT_ID", CLIENT_ID)
    monkeypatch.delenv("TICKETS_CLIENT_SECRET", raising=False)
    for pinned in (False, True):
        registry(tmp_path, server.url, pinned=pinned)
        with pytest.raises(ConfigError) as refused:
            Launch(tmp_path / "state").admit(plan(tmp_path, [{"tool": "tickets" if pinned else "tickets.echo",
                                                              "args": {"text": "x"}}]), RunOptions())
        problems = refused.value.problems
        assert len(problems) == (1 if pinned else 2)  # each tool of the server is named
        for problem in problems:
            assert problem.code == "TL313" and problem.level == "error"
            assert "needs the environment variable TICKETS_CLIENT_SECRET" in problem.message
            assert "TICKETS_CLIENT_ID" not in problem.message
    assert server.state()["token_requests"] == []


def test_the_cli_end_to_end_hides_the_secret_and_every_token(cli, tmp_path, server):
    registry(tmp_path, server.url)
    p = plan(tmp_path, [echo("a"), {"tool": "control", "args": {"url": server.base, "what": {"revoke": True}}},
                        {"tool": "tickets.whoami", "args": {}}])
    ran = cli("run", str(p), "--format", "jsonl", "--audit", "audit.jsonl", env=ENV)
    assert ran.returncode == 0, ran.stderr.decode()
    assert [r["status"] for r in jsonl(ran.stdout)[:-1]] == ["ok", "ok", "ok"]
    shown = cli("runs", "show", jsonl(ran.stdout)[-1]["run_id"], "--contract", env=ENV)
    assert shown.returncode == 0 and b"TICKETS_CLIENT_SECRET" in shown.stdout  # the name, never the value
    tokens = server.state()["issued"]
    assert len(tokens) == 2
    kept = tmp_path / ".toolloop" / "mcp-tokens.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and tokens[1] in kept.read_text()
    written = ran.stdout + ran.stderr + shown.stdout + shown.stderr
    for path in tmp_path.rglob("*"):  # the journal, its WAL, the audit file: all but the token file
        if path.is_file() and path != kept and path.suffix not in (".yml", ".py"):
            written += path.read_bytes()
    assert (tmp_path / ".toolloop" / "state.db").exists()
    for value in (SECRET, *tokens):
        assert value.encode() not in written
    assert b"[REDACTED]" in written  # whoami's answer, hidden

    unset = cli("run", str(p), "--format", "jsonl", env={"TICKETS_CLIENT_ID": CLIENT_ID})
    assert unset.returncode == 3 and b"TL313" in unset.stderr and b"TICKETS_CLIENT_SECRET" in unset.stderr
    lint = cli("validate", str(p), "--format", "json")  # validate does not need the variables
    assert lint.returncode == 0, lint.stdout.decode() + lint.stderr.decode()
    (warning,) = [f for f in json.loads(lint.stdout) if f["code"] == "TL313"]
    assert warning["level"] == "warning"
    assert "TICKETS_CLIENT_ID and TICKETS_CLIENT_SECRET" in warning["message"]
    # with a toolloop.lock, validate skips the server's lock check, saying which variable it lacks
    locked = cli("lock", "reg.yml", env=ENV)
    assert locked.returncode == 0, locked.stderr.decode()
    lint = cli("validate", "reg.yml", "--format", "json", env={"TICKETS_CLIENT_ID": CLIENT_ID})
    assert lint.returncode == 0, lint.stdout.decode() + lint.stderr.decode()
    (warning,) = json.loads(lint.stdout)
    assert warning["code"] == "TL313" and warning["level"] == "warning"
    assert "not checked: the environment variable TICKETS_CLIENT_SECRET" in warning["message"]


# ------------------------------------------------------------------------------------- the rules


@pytest.mark.parametrize("mcp, message", [
    ('{command: [srv], allow: [x], auth: {client_credentials: {client_id_env: A, client_secret_env: B}}}',
     "mcp.auth of tool 't' applies to a server reached by 'url'"),
    ('{url: "http://127.0.0.1:1/mcp", headers_env: {authorization: TOKEN}, allow: [x],'
     ' auth: {client_credentials: {client_id_env: A, client_secret_env: B}}}',
     "mcp.auth and the Authorization header of mcp.headers_env of tool 't' both set the Authorization header"),
    ('{url: "http://127.0.0.1:1/mcp", allow: [x], auth: {client_credentials: {client_id_env: A,'
     ' client_secret_env: "hunter2 secret"}}}',
     "mcp.auth.client_credentials.client_secret_env of tool 't' must name an environment variable"),
    ('{url: "http://127.0.0.1:1/mcp", allow: [x], auth: {client_credentials: {client_id_env: A,'
     ' client_secret_env: B, token_url: "http://auth.example.com/token"}}}',
     "mcp.auth.client_credentials.token_url of tool 't' must be an https:// address (or http:// on loopback)"),
    ('{url: "http://mcp.example.com/mcp", allow: [x], auth: {client_credentials: {client_id_env: A,'
     ' client_secret_env: B}}}',
     "mcp.url of tool 't' must be an https:// address (or http:// on loopback) when mcp.auth is set"),
])
def test_an_auth_block_that_cannot_be_used_safely_is_a_finding(tmp_path, mcp, message):
    from toolloop_cli.contract.registry import load_registry

    write(tmp_path / "reg.yml", f"""
        version: 1
        subagents:
          w:
            runner_defaults: {{tool_timeout_s: 5}}
            tools:
              t:
                mcp: {mcp}
                effect: read
    """)
    contract, problems = load_registry(tmp_path / "reg.yml")
    assert contract is None
    (finding,) = problems
    assert finding.code == "TL317" and message in finding.message, finding


def test_usable_auth_blocks_load_and_make_servers_of_their_own(tmp_path):
    from toolloop_cli.contract.mcp import server_key
    from toolloop_cli.contract.registry import load_registry

    auth = "auth: {client_credentials: {client_id_env: A, client_secret_env: B, scope: %s}}"
    write(tmp_path / "reg.yml", f"""
        version: 1
        subagents:
          w:
            runner_defaults: {{tool_timeout_s: 5}}
            tools:
              a: {{mcp: {{url: "https://mcp.example.com/mcp", allow: [x], {auth % "read"}}}, effect: read}}
              b: {{mcp: {{url: "https://mcp.example.com/mcp", allow: [y], {auth % "write"}}}, effect: read}}
              c: {{mcp: {{url: "http://[::1]:8/mcp", allow: [z], {auth % "read"}}}, effect: read}}
    """)
    contract, problems = load_registry(tmp_path / "reg.yml")
    assert contract is not None, problems
    tools = contract.subagents["w"].tools
    # credentials asked with another scope are another session with the server
    assert server_key(tools["a"].mcp) != server_key(tools["b"].mcp)


def test_the_client_secret_and_known_tokens_are_run_secrets_and_new_tokens_reach_live_runs(tmp_path, monkeypatch):
    from toolloop_cli.contract import mcp_tokens
    from toolloop_cli.contract.registry import load_registry
    from toolloop_cli.engine.redact import RunSecrets, run_credentials

    registry(tmp_path, "http://127.0.0.1:1/mcp")
    contract, problems = load_registry(tmp_path / "reg.yml")
    assert contract is not None, problems
    found = run_credentials(contract, ENV)
    assert SECRET in found and CLIENT_ID not in found  # the id names the client; the secret is one
    secrets = RunSecrets(found)
    mcp_tokens.learn("http://127.0.0.1:1/mcp", CLIENT_ID, "tok-learnt-during-the-run-3f9a")
    assert "tok-learnt-during-the-run-3f9a" in secrets.values()
    assert secrets.text("sent tok-learnt-during-the-run-3f9a") == "sent [REDACTED]"
    assert "tok-learnt-during-the-run-3f9a" in run_credentials(contract, ENV)  # a later run knows it too


class Refusal:
    """A server's 401 as the flow sees it (only its headers are read)."""

    def __init__(self, challenge: str):
        import httpx2

        self.status_code = 401
        self.headers = httpx2.Headers({"www-authenticate": challenge})


@pytest.mark.parametrize("challenge, said", [
    ('Bearer resource_metadata="http://metadata.example.com/prm"',
     "the server's resource_metadata http://metadata.example.com:80 is neither HTTPS nor loopback: not followed"),
])
def test_discovery_never_follows_plain_http_off_loopback(challenge, said):
    import trio

    from toolloop_cli.contract.mcp_auth import ClientCredentials
    from toolloop_cli.contract.models import McpDecl

    decl = McpDecl.model_validate({"url": "https://mcp.example.com/mcp", "allow": ["x"], "auth": {
        "client_credentials": {"client_id_env": "TICKETS_CLIENT_ID", "client_secret_env": "TICKETS_CLIENT_SECRET"}}})
    auth = ClientCredentials(decl, ENV)
    assert trio.run(auth._discover, Refusal(challenge)) is None
    assert auth.failure == said


def test_documents_naming_plain_http_elsewhere_are_not_used(creds, monkeypatch):
    """The loopback server's metadata names an authorization server, then a token endpoint, on
    plain HTTP off loopback: discovery stops there and sends nothing to it."""
    import trio

    from toolloop_cli.contract import mcp_auth
    from toolloop_cli.contract.models import McpDecl

    async def documents(client, urls, needs, tried):
        return answers[needs]

    decl = McpDecl.model_validate({"url": "http://127.0.0.1:1/mcp", "allow": ["x"], "auth": {
        "client_credentials": {"client_id_env": "TICKETS_CLIENT_ID", "client_secret_env": "TICKETS_CLIENT_SECRET"}}})
    for answers, said in [
        ({"authorization_servers": {"authorization_servers": ["http://auth.example.com"]}},
         "the authorization server http://auth.example.com:80 is neither HTTPS nor loopback: not used"),
        ({"authorization_servers": {"authorization_servers": ["http://127.0.0.1:2"]},
          "token_endpoint": {"issuer": "http://127.0.0.1:2", "token_endpoint": "http://auth.example.com/token"}},
         "the token endpoint http://auth.example.com:80 is neither HTTPS nor loopback: the client secret is not sent"
         " there"),
        ({"authorization_servers": {"resource": "http://127.0.0.1:1/other", "authorization_servers": ["x"]}},
         "the protected resource metadata of http://127.0.0.1:1 is for another resource"),
        ({"authorization_servers": {"authorization_servers": ["http://127.0.0.1:2"]},
          "token_endpoint": {"issuer": "http://127.0.0.1:3", "token_endpoint": "http://127.0.0.1:2/token"}},
         "the authorization server metadata at http://127.0.0.1:2 names another issuer"),
    ]:
        auth = mcp_auth.ClientCredentials(decl)
        monkeypatch.setattr(mcp_auth, "_first_document", documents)
        assert trio.run(auth._discover, Refusal("Bearer")) is None
        assert auth.failure == said


def test_of_several_authorization_servers_the_first_listed_is_used(creds, monkeypatch, tmp_path):
    import trio

    from toolloop_cli import contract
    from toolloop_cli.contract import mcp_auth, mcp_tokens
    from toolloop_cli.contract.models import McpDecl

    asked: list[list[str]] = []

    async def documents(client, urls, needs, tried):
        asked.append(urls)
        if needs == "authorization_servers":
            return {"resource": "http://127.0.0.1:1/", "authorization_servers": [
                "https://first.example.com/tenant", "https://second.example.com"]}
        return {"issuer": "https://first.example.com/tenant", "token_endpoint": "https://first.example.com/token"}

    monkeypatch.setattr(mcp_auth, "_first_document", documents)
    monkeypatch.setattr(contract, "_state_folder", str(tmp_path / "state"))
    decl = McpDecl.model_validate({"url": "http://127.0.0.1:1/mcp", "allow": ["x"], "auth": {
        "client_credentials": {"client_id_env": "TICKETS_CLIENT_ID", "client_secret_env": "TICKETS_CLIENT_SECRET"}}})
    auth = mcp_auth.ClientCredentials(decl)
    assert trio.run(auth._discover, Refusal("Bearer")) == "https://first.example.com/token"
    assert asked[1] == ["https://first.example.com/.well-known/oauth-authorization-server/tenant",
                        "https://first.example.com/.well-known/openid-configuration/tenant",
                        "https://first.example.com/tenant/.well-known/openid-configuration"]
    assert auth.resource == "http://127.0.0.1:1/"  # the resource the metadata names (a parent of the server's)
    assert mcp_tokens.cached_endpoint("http://127.0.0.1:1/mcp") == "https://first.example.com/token"
