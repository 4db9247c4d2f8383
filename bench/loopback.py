#!/usr/bin/env python3
"""A scripted OpenAI-compatible model server on 127.0.0.1 for the routed-loop benchmarks.

It runs in a process of its own, so its CPU time is never counted against the loop under test,
and it speaks Chat Completions (``POST /v1/chat/completions``) in the two ways a tool loop can be
driven, chosen per run by ``POST /script`` with ``{"mode": ..., "turns": N}``:

  text    toolloop's routed protocol, where the assistant's text is a JSON decision:
          N-1 ``{"action": "call", "tool": "noop", "args": {"i": i}}`` replies, a
          ``{"action": "final"}`` reply, then the final answer ``{"answer": 1}`` (N+1 requests)
  tools   native tool calling: N-1 replies carrying one ``tool_calls`` entry for ``noop`` with
          the arguments ``{"i": i}``, then a final text answer (N requests)

Every reply is encoded when the run is scripted, so a request costs the server the same small
work whichever client sends it: read the body, pick the next reply, write it. ``GET /count``
answers how many completion requests the current script has served, so a benchmark can check
that a client really went through every turn.

    python bench/loopback.py          # prints the port on its first line, serves until stdin closes

From Python: ``with Loopback() as server: server.script("tools", 100); base = server.base``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def _completion(message: dict, finish: str) -> bytes:
    return json.dumps({"id": "chatcmpl-loopback", "object": "chat.completion", "created": 0,
                       "model": "loopback-model",
                       "choices": [{"index": 0, "finish_reason": finish, "logprobs": None, "message": message}],
                       "usage": USAGE}).encode()


def text_replies(turns: int) -> list[bytes]:
    """toolloop's routed protocol: call decisions as text, a final decision, the final answer."""
    def text(t: str) -> bytes:
        return _completion({"role": "assistant", "content": t}, "stop")

    calls = [text(json.dumps({"action": "call", "tool": "noop", "args": {"i": i}, "reason": "go"}))
             for i in range(turns - 1)]
    return calls + [text('{"action": "final", "reason": "done"}'), text('{"answer": 1}')]


def tool_replies(turns: int) -> list[bytes]:
    """Native tool calling: one tool call a reply, then a final text answer."""
    calls = [_completion({"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": "noop", "arguments": json.dumps({"i": i})}}]},
        "tool_calls") for i in range(turns - 1)]
    return calls + [_completion({"role": "assistant", "content": "done: 1"}, "stop")]


MODES = {"text": text_replies, "tools": tool_replies}


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.replies: list[bytes] = []
        self.served = 0


def serve() -> None:
    state = _State()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            if self.path == "/count":
                self._send(200, json.dumps({"served": state.served, "left": len(state.replies)}).encode())
            else:
                self._send(404, b'{"error": {"message": "no such endpoint"}}')

        def do_POST(self) -> None:  # noqa: N802
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path == "/script":
                ask = json.loads(raw)
                with state.lock:
                    state.replies = list(reversed(MODES[ask["mode"]](int(ask["turns"]))))
                    state.served = 0
                self._send(200, b"{}")
            elif self.path.endswith("/chat/completions"):
                with state.lock:
                    reply = state.replies.pop() if state.replies else None
                    state.served += 1
                if reply is None:
                    self._send(500, b'{"error": {"message": "no scripted reply left", "type": "server_error"}}')
                else:
                    self._send(200, reply)
            else:
                self._send(404, b'{"error": {"message": "no such endpoint"}}')

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    print(httpd.server_address[1], flush=True)
    sys.stdin.read()  # serve until the parent closes our standard input (or dies)
    httpd.shutdown()


class Loopback:
    """The server in a child process of this Python."""

    def __enter__(self) -> "Loopback":
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve())], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())
        self.url = f"http://127.0.0.1:{self.port}"
        self.base = self.url + "/v1"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def script(self, mode: str, turns: int) -> None:
        req = urllib.request.Request(self.url + "/script", data=json.dumps({"mode": mode, "turns": turns}).encode(),
                                     method="POST", headers={"content-type": "application/json"})
        urllib.request.urlopen(req, timeout=10).read()

    def count(self) -> dict:
        return json.loads(urllib.request.urlopen(self.url + "/count", timeout=10).read())

    def check(self, mode: str, turns: int, who: str) -> None:
        """Fail loudly unless the last run asked for every scripted reply and no more."""
        got = self.count()
        want = turns + 1 if mode == "text" else turns
        if got["served"] != want or got["left"]:
            raise SystemExit(f"{who}: the model server served {got['served']} requests ({got['left']} scripted "
                             f"replies left), expected {want}")


if __name__ == "__main__":
    serve()
