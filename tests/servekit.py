"""``toolloop serve`` for tests: the real command in a subprocess on 127.0.0.1 (any free port),
its address and token read from what it prints when it is ready, an httpx client for it, and
a reader of Server-Sent Events."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from conftest import APP

TOKEN = "serve-test-token-0123456789"
START_S = 60


class Served:
    """A running ``toolloop serve``; ``log`` collects everything it wrote to standard error."""

    def __init__(self, cwd: Path, *args: str, env: dict | None = None):
        full_env = {**os.environ, "NO_COLOR": "1", "TOOLLOOP_SERVE_TOKEN": TOKEN, **(env or {})}
        full_env.pop("TOOLLOOP_STATE_DIR", None)
        for key in [k for k, v in full_env.items() if v is None]:
            del full_env[key]
        self.proc = subprocess.Popen([sys.executable, "-m", "toolloop_cli", "serve", "--port", "0", *args], cwd=cwd,
                                     env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        self.log: list[str] = []
        lines: queue.Queue = queue.Queue()

        def drain() -> None:
            assert self.proc.stderr is not None
            for raw in self.proc.stderr:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                self.log.append(line)
                lines.put(line)
            lines.put(None)

        threading.Thread(target=drain, daemon=True).start()
        self.url = ""
        self.token: str | None = None
        while True:
            line = lines.get(timeout=START_S)
            if line is None:
                self.proc.wait(10)
                raise RuntimeError("toolloop serve did not start:\n" + "\n".join(self.log))
            found = re.search(r"on (http://\S+)$", line)
            if found:
                self.url = found.group(1)
            if "user(s) from" in line:
                break
            opened = re.search(r"open (http://\S+)/\?token=(\S+)", line)
            if opened:
                # a token from TOOLLOOP_SERVE_TOKEN is never printed: the line names the variable
                self.token = full_env["TOOLLOOP_SERVE_TOKEN"] if opened.group(2) == "TOKEN," else opened.group(2)
                break

    def client(self, token: str | None = "default", **kw) -> httpx.Client:
        """An httpx client for the server; with the bearer token unless ``token`` is None."""
        token = self.token if token == "default" else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60, follow_redirects=False, **kw)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(20)


def events(client: httpx.Client, run_id: str, on_event=None) -> list[tuple[str, dict]]:
    """Follow a run's records as Server-Sent Events until the server ends the stream; ``on_event``
    is called with each ``(type, record)`` as it arrives."""
    out: list[tuple[str, dict]] = []
    with client.stream("GET", f"/api/runs/{run_id}/records", headers={"Accept": "text/event-stream"}) as res:
        assert res.status_code == 200, res.read()
        assert res.headers["content-type"].startswith("text/event-stream")
        kind = None
        for line in res.iter_lines():
            if line.startswith("event: "):
                kind = line[len("event: "):]
            elif line.startswith("data: "):
                record = json.loads(line[len("data: "):])
                out.append((kind, record))
                if on_event is not None:
                    on_event(kind, record)
    return out


def toolloop(cwd: Path, *args: str, stdout=subprocess.PIPE, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "toolloop_cli", *args], cwd=cwd, stdout=stdout,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env={**os.environ, "NO_COLOR": "1", **(env or {})})


def registry(extra: str = "") -> str:
    """A registry of the test App's tools, with gated ones."""
    return f"""
version: 1
app_root: {APP}
subagents:
  t:
    runner_defaults: {{tool_timeout_s: 30}}
    tools:
      echo:
        callable: testapp.tools:echo
        description: Returns the arguments it got.
        input_schema: {{type: object}}
        output_schema: {{}}
      pay:
        callable: testapp.tools:echo
        description: Pays; a person approves above 100.
        effect: write
        approval: {{when: "args.amount > 100"}}
        input_schema: {{type: object, required: [amount, to], properties: {{amount: {{type: integer}}, to: {{type: string}}}}}}
        output_schema: {{}}
      vault:
        callable: testapp.tools:echo
        description: Opens the vault; a person approves every call.
        effect: destructive
        approval: required
        redact: [/password]
        input_schema: {{type: object, required: [user, password], properties: {{user: {{type: string}}, password: {{type: string}}}}}}
        output_schema: {{}}
      marker:
        callable: testapp.tools:marker
        description: Writes a line to a file per execution; a person approves every call.
        effect: write
        approval: required
        input_schema: {{type: object, required: [path], properties: {{path: {{type: string}}}}}}
        output_schema: {{}}
      gate:
        callable: testapp.tools:log_gate
        description: Waits until a file exists.
        input_schema: {{type: object}}
        output_schema: {{}}
{extra}"""
